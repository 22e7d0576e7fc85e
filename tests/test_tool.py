"""PythonTool in someone else's loop, and our kernelspec installed the way Jupyter users install it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from openai import OpenAI
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageFunctionToolCall
from openai_server import OpenAIServer, Reply, python_call

from kernel_agent import AsyncKernelSession, KernelSession, PythonTool
from kernel_agent._python import BOOT
from kernel_agent.kernel.kernelspec import KERNEL_NAME, install_kernelspec, kernelspec_dir

pytestmark = pytest.mark.kernel


def test_python_tool_in_a_hand_written_openai_loop(openai_server: OpenAIServer, tmp_path: Path) -> None:
    def second_call(body: dict[str, Any]) -> Reply:
        assert body["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "'aQue9ScN'\n"}
        return Reply("", tool_calls=(python_call("len(reversed_secret)", id="call_2"),))

    def final(body: dict[str, Any]) -> Reply:
        assert body["messages"][-1]["content"] == "8\n"  # state persisted between the two calls
        return Reply("The reversed secret is aQue9ScN (8 characters).")

    openai_server.add(
        Reply("", tool_calls=(python_call("reversed_secret = 'NcS9euQa'[::-1]\nreversed_secret", id="call_1"),)),
        second_call,
        final,
    )
    client = OpenAI(base_url=openai_server.base_url, api_key="test")
    messages: list[Any] = [{"role": "user", "content": "Reverse 'NcS9euQa' exactly and count it."}]
    with KernelSession(tmp_path) as session:
        tool = PythonTool(session)
        for _ in range(5):
            schema = cast("ChatCompletionFunctionToolParam", tool.schema)  # the SDK's shape, as a plain dict
            reply = client.chat.completions.create(model="m", messages=messages, tools=[schema])
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                assert isinstance(call, ChatCompletionMessageFunctionToolCall)
                messages.append(tool.tool_message(call.id, call.function.arguments))
    client.close()
    assert messages[-1]["content"].startswith("The reversed secret is aQue9ScN")
    assert openai_server.requests[0]["tools"][0]["function"]["name"] == "execute_python"
    assert tool.last_result is not None and tool.last_result.result_text == "8"


def test_python_tool_reports_bad_arguments_and_errors_as_text(tmp_path: Path) -> None:
    with KernelSession(tmp_path) as session:
        tool = PythonTool(session, timeout=2)
        assert "not valid JSON" in tool.handle("{code: nope")
        assert 'missing "code"' in tool.handle({"source": "1"})
        assert "ZeroDivisionError" in tool.handle(json.dumps({"code": "1/0"}))
        assert "[timeout]" in tool.handle({"code": "while True: pass"})
        with pytest.raises(TypeError, match="ahandle"):
            asyncio.run(tool.ahandle({"code": "1"}))


def test_python_tool_with_an_async_session(tmp_path: Path) -> None:
    async def main() -> str:
        async with AsyncKernelSession(tmp_path) as session:
            return await PythonTool(session).ahandle({"code": "sum(range(10))"})

    assert asyncio.run(main()) == "45\n"


def test_installed_kernelspec_starts_a_kernel_with_clean_output(tmp_path: Path) -> None:
    jupyter = Path(sys.executable).with_name("jupyter")
    subprocess.run(
        [str(jupyter), "kernelspec", "install", str(kernelspec_dir() / KERNEL_NAME), "--prefix", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    kernels = tmp_path / "share" / "jupyter" / "kernels"
    assert (kernels / KERNEL_NAME / "kernel.json").is_file()
    manager = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))
    manager.start_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        outputs: list[dict[str, Any]] = []
        client.execute_interactive(
            "import matplotlib.pyplot as plt\nplt.plot([1, 2]);\n1/0",
            timeout=60,
            output_hook=lambda msg: outputs.append(msg),
        )
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    kinds = {m["msg_type"]: m["content"] for m in outputs}
    assert "image/png" in kinds["display_data"]["data"]
    assert not any("\x1b[" in line for line in kinds["error"]["traceback"])


def test_kernelspec_install_names_this_interpreter(tmp_path: Path) -> None:
    where = install_kernelspec(prefix=str(tmp_path))
    manifest = json.loads((where / "kernel.json").read_text())
    assert manifest["argv"][0] == sys.executable and Path(sys.executable).is_absolute()
    # isolated, by absolute path: a kernel_agent/ planted in the notebook's folder is never the launcher
    assert manifest["argv"][1:4] == ["-I", str(BOOT), "kernel_agent.kernel.inside.launcher"]
