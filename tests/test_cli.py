"""The ``kernel-agent`` CLI through click's runner (and as a real process for signals).

Runs go to the local OpenAI-compatible test server and a real kernel. The
Ctrl-C and SIGTERM tests start ``python -m kernel_agent.cli run --json`` as a
subprocess, wait for the event saying the code started, signal it, and check
that the notebook was saved and no kernel of that process survives.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import nbformat
import pytest
from click.testing import CliRunner, Result
from leaks import kernels_of
from openai_server import OpenAIServer, Reply, python_call
from ports import closed_port

from kernel_agent import __version__
from kernel_agent.cli import cli
from kernel_agent.notebook.load import load_run

PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()\nprint('total', int(data_frame_total()))"
DEFINE = "def data_frame_total():\n    return pd.read_csv(data.numbers)['x'].sum()"


def invoke(*args: Any) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def numbers_csv(tmp_path: Path) -> Path:
    path = tmp_path / "numbers.csv"
    path.write_text("x\n1\n2\n3\n")
    return path


def notebook_meta(path: Path) -> dict[str, Any]:
    value: dict[str, Any] = nbformat.read(path, as_version=4).metadata["kernel_agent"]
    return value


# -- runs ---------------------------------------------------------------------------------------------


@pytest.mark.kernel
def test_run_renders_rounds_and_exits_0_with_the_answer(
    openai_server: OpenAIServer, numbers_csv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    openai_server.add(Reply("Define a helper.", tool_calls=(python_call(DEFINE),)))
    openai_server.add(Reply("Plot and total.", tool_calls=(python_call(PLOT),)))
    openai_server.add(Reply("The total of x is 6."))
    monkeypatch.setenv("KERNEL_AGENT_MODEL", "env-model")  # the environment supplies the model settings
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    notebook = tmp_path / "out" / "run.ipynb"

    result = invoke("run", "Sum x", "--data", numbers_csv, "--workspace", tmp_path / "ws", "--out", notebook)

    assert result.exit_code == 0, result.output
    assert "Round 3/30" in result.output and "total 6" in result.output
    assert "[image 1: png" in result.output
    assert "The total of x is 6." in result.output
    assert f"notebook: {notebook}" in result.output
    assert openai_server.requests[0]["model"] == "env-model"
    meta = notebook_meta(notebook)
    assert meta["stop_reason"] == "answer" and meta["answer"] == "The total of x is 6."


@pytest.mark.kernel
def test_json_prints_one_event_per_line_and_max_rounds_exits_1(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(Reply("Look.", tool_calls=(python_call("print(21 * 2)"),)))

    result = invoke(
        "run",
        "Compute",
        "--model",
        "m",
        "--base-url",
        openai_server.base_url,
        "--max-rounds",
        1,
        "--workspace",
        tmp_path / "ws",
        "--json",
    )

    assert result.exit_code == 1
    events = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = [event["event"] for event in events]
    assert kinds[0] == "run_started" and kinds[-1] == "finished"
    assert {"round_started", "text_delta", "code_ready", "execution_started", "round_finished"} <= set(kinds)
    finished = next(event for event in events if event["event"] == "execution_finished")
    assert finished["result"]["stdout"] == "42\n"
    assert events[-1]["run"]["stop_reason"] == "max_rounds"
    assert Path(events[-1]["run"]["notebook_path"]).is_file()


@pytest.mark.kernel
def test_resume_continues_a_run_with_its_variables(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(Reply("Set it.", tool_calls=(python_call("kept = 20 + 1"),)), Reply("Done: 21."))
    openai_server.add(Reply("Double it.", tool_calls=(python_call("print(kept * 2)"),)), Reply("Doubled: 42."))
    notebook = tmp_path / "run.ipynb"
    first = invoke(
        "run",
        "Set",
        "--model",
        "m",
        "--base-url",
        openai_server.base_url,
        "--protocol",
        "tools",
        "--workspace",
        tmp_path / "ws",
        "--out",
        notebook,
        "--quiet",
    )
    assert first.exit_code == 0, first.output

    result = invoke("resume", notebook, "Now double it", "--base-url", openai_server.base_url, "--quiet")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["Doubled: 42.", str(notebook)]
    assert openai_server.requests[-1]["model"] == "m"  # the run's own model and protocol by default
    assert "tools" in openai_server.requests[-1]
    cells = [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
    assert [c.source for c in cells[-2:]] == ["kept = 20 + 1", "print(kept * 2)"]
    assert cells[-1].outputs[0]["text"] == "42\n"  # the old variable was rebuilt in the new kernel


@pytest.mark.kernel
def test_quiet_prints_only_the_answer_and_the_notebook_path(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(Reply("Forty-two."))
    notebook = tmp_path / "q.ipynb"

    result = invoke(
        "run",
        "Answer",
        "--model",
        "m",
        "--base-url",
        openai_server.base_url,
        "--workspace",
        tmp_path / "ws",
        "--out",
        notebook,
        "--quiet",
    )

    assert result.exit_code == 0
    assert result.stdout.splitlines() == ["Forty-two.", str(notebook)]


@pytest.mark.kernel
def test_sandbox_flags_reach_the_kernel_and_off_is_loud(openai_server: OpenAIServer, tmp_path: Path) -> None:
    port = urlsplit(openai_server.base_url).port  # listening on this machine's loopback
    probe = (
        f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2).close()\n"
        "    print('connected')\nexcept OSError as e:\n    print(type(e).__name__)"
    )
    openai_server.add(Reply("Probe.", tool_calls=(python_call(probe),)), Reply("Probed."))
    offline = invoke(
        "run",
        "Probe",
        "--model",
        "m",
        "--base-url",
        openai_server.base_url,
        "--no-network",
        "--memory",
        5000,
        "--workspace",
        tmp_path / "ws1",
        "--json",
    )
    events = [json.loads(line) for line in offline.stdout.splitlines()]
    started = next(event for event in events if event["event"] == "run_started")
    assert started["confinement"].startswith("sandbox: bubblewrap (strict); seccomp filter kernel-agent/2 (")
    assert "; no nested user namespaces; network: off; memory: 5,000 MB" in started["confinement"]
    assert (
        next(e for e in events if e["event"] == "execution_finished")["result"]["stdout"] == "ConnectionRefusedError\n"
    )

    openai_server.add(Reply("Fine."))
    loose = invoke(
        "run",
        "Answer",
        "--model",
        "m",
        "--base-url",
        openai_server.base_url,
        "--sandbox",
        "off",
        "--workspace",
        tmp_path / "ws2",
        "--quiet",
    )
    assert loose.exit_code == 0 and loose.stdout.splitlines()[0] == "Fine."
    assert "warning: the kernel runs unconfined" in loose.stderr
    refused = invoke("run", "Answer", "--model", "m", "--sandbox", "off", "--no-network")
    assert refused.exit_code == 2 and "needs the sandbox" in refused.stderr


@pytest.mark.kernel
def test_no_template_starts_the_kernel_cold_and_the_run_says_so(openai_server: OpenAIServer, tmp_path: Path) -> None:
    said = {}
    for path, flags in (("forked", ()), ("cold", ("--no-template",))):
        openai_server.add(Reply("Ready."))
        result = invoke(
            "run", "Say ready", "--model", "m", "--base-url", openai_server.base_url, *flags,
            "--workspace", tmp_path / path, "--json",
        )  # fmt: skip
        assert result.exit_code == 0, result.stderr
        started = next(e for e in map(json.loads, result.stdout.splitlines()) if e["event"] == "run_started")
        assert notebook_meta(Path(started["notebook_path"]))["confinement"] == started["confinement"]
        said[path] = started["confinement"]
    assert said["forked"].endswith("; start: forked from a warmed template")
    assert said["cold"].endswith("; start: cold")  # asked for: no template was tried, so no reason is given
    assert said["cold"].startswith("sandbox: bubblewrap (strict); seccomp filter kernel-agent/2 (")  # confined alike


@pytest.mark.kernel
def test_unreachable_model_exits_1_with_a_clear_message_and_a_notebook(tmp_path: Path) -> None:
    notebook = tmp_path / "down.ipynb"

    with closed_port() as port:
        result = invoke(
            "run",
            "Anything",
            "--model",
            "m",
            "--base-url",
            f"http://127.0.0.1:{port}/v1",
            "--workspace",
            tmp_path / "ws",
            "--out",
            notebook,
        )

    assert result.exit_code == 1
    assert "cannot reach the model endpoint" in result.output
    assert "Traceback" not in result.output
    assert notebook_meta(notebook)["stop_reason"] == "llm_error"


@pytest.mark.kernel
def test_a_slow_model_is_reported_as_slow_and_asked_once(
    openai_server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    openai_server.add(Reply("<Answer>late</Answer>", pause=1.5), Reply("<Answer>never asked</Answer>"))
    monkeypatch.setenv("KERNEL_AGENT_REQUEST_TIMEOUT", "0.4")  # the flag wins over it
    result = invoke(
        "run",
        "Anything",
        "--model",
        "m",
        "--base-url",
        openai_server.base_url,
        "--protocol",
        "tags",
        "--request-timeout",
        0.3,
        "--workspace",
        tmp_path / "ws",
    )
    assert result.exit_code == 1
    said = " ".join(result.output.split())  # rich wraps lines at the terminal width
    assert "did not start replying within 0.3 s" in said and "--request-timeout" in said
    assert "cannot reach" not in said and "server is running" not in said
    assert len(openai_server.requests) == 1


# -- usage errors (no kernel) -------------------------------------------------------------------------


def test_missing_data_file_exits_2_before_anything_starts(tmp_path: Path) -> None:
    result = invoke("run", "Sum x", "--data", tmp_path / "nope.csv", "--model", "m", "--workspace", tmp_path / "ws")

    assert result.exit_code == 2
    assert "nope.csv" in result.stderr
    assert "Traceback" not in result.output
    assert not (tmp_path / "ws").exists()


def test_no_model_configured_exits_2_and_says_how_to_configure_one(tmp_path: Path) -> None:
    result = invoke("run", "Sum x", "--workspace", tmp_path / "ws")

    assert result.exit_code == 2
    assert "no model configured" in result.stderr
    assert "KERNEL_AGENT_MODEL" in result.stderr and "OPENAI_BASE_URL" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("run", "t", "--max-rounds", "0"),
        ("run", "t", "--quiet", "--json", "--model", "m"),
        ("run", "t", "--protocol", "xml"),
        ("run", "t", "--bogus"),
        ("kernelspec", "install", "--user", "--prefix", "p"),
    ],
)
def test_bad_flags_exit_2(args: tuple[str, ...]) -> None:
    result = invoke(*args)

    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_show_and_replay_of_a_missing_notebook_exit_2(tmp_path: Path) -> None:
    for command in ("show", "replay"):
        result = invoke(command, tmp_path / "missing.ipynb")
        assert result.exit_code == 2
        assert "missing.ipynb" in result.stderr and "Traceback" not in result.output


def test_version_and_help() -> None:
    assert invoke("--version").output.strip().endswith(__version__)
    for command in ("run", "demo", "replay", "show", "kernelspec"):
        help_text = invoke(command, "--help").output
        assert "Usage: " in help_text and command in help_text
    assert "OPENAI_BASE_URL" in invoke("run", "--help").output


def test_kernelspec_install_into_a_prefix(tmp_path: Path) -> None:
    result = invoke("kernelspec", "install", "--prefix", tmp_path)

    assert result.exit_code == 0
    spec = json.loads((tmp_path / "share" / "jupyter" / "kernels" / "kernel-agent" / "kernel.json").read_text())
    assert spec["argv"][1] == "-I" and spec["argv"][3] == "kernel_agent.kernel.inside.launcher"
    assert spec["argv"][2].endswith("/kernel_agent/_boot.py") and Path(spec["argv"][2]).is_absolute()
    assert spec["argv"][4:6] == ["-f", "{connection_file}"]


# -- signals ------------------------------------------------------------------------------------------


@pytest.mark.kernel
@pytest.mark.parametrize(("sent", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_interrupts_saves_the_notebook_and_leaves_no_kernel(
    sent: signal.Signals, code: int, openai_server: OpenAIServer, tmp_path: Path
) -> None:
    waiting = "print('partial output', flush=True)\nopen('started', 'w').close()\nimport time\ntime.sleep(60)"
    openai_server.add(Reply("Wait.", tool_calls=(python_call(waiting),)))
    notebook = tmp_path / "cancelled.ipynb"
    command = [
        sys.executable,
        "-m",
        "kernel_agent.cli",
        "run",
        "Wait a minute",
        "--model",
        "m",
        "--base-url",
        openai_server.base_url,
        "--workspace",
        str(tmp_path / "ws"),
        "--out",
        str(notebook),
        "--json",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if json.loads(line)["event"] == "execution_started":
                break
        deadline = time.monotonic() + 60
        while not (tmp_path / "ws" / "started").exists() and time.monotonic() < deadline:  # the print has been sent
            time.sleep(0.05)
        process.send_signal(sent)
        rest, errors = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    assert process.returncode == code, errors
    assert json.loads(rest.splitlines()[-1]) == {
        "event": "interrupted",
        "signal": sent.name,
        "notebook_path": str(notebook),
    }
    assert "Traceback" not in errors
    meta = notebook_meta(notebook)
    assert meta["stop_reason"] == "cancelled"
    assert kernels_of(process.pid) == []
    running = load_run(notebook).rounds[-1]  # the round that was running is kept, with what it printed
    assert running.code == waiting and running.result is not None and running.result.status == "cancelled"
    assert "partial output" in running.result.stdout
    cell = [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"][-1]
    assert cell.metadata["kernel_agent"]["code"] == waiting and "skip-execution" in cell.metadata["tags"]
    assert all(line.startswith("#") for line in cell.source.splitlines())  # Run All cannot hang on it again
