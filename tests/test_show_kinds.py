"""``show`` and the HTML report on every kind of notebook kernel-agent writes, each made through its real
code path with a scripted model: a run continued by ``resume`` with another model, a service thread of
two turns (downloaded from the service), an MCP session (``kernel-agent mcp`` driven by the MCP SDK's
client) while open and once closed. The plan notebook's are in ``test_plan_show.py``."""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_client import HeldClient
from openai_server import OpenAIServer, Reply, python_call
from service_server import ServiceServer

from kernel_agent.cli import cli
from kernel_agent.notebook.html import page_title, render_html
from kernel_agent.notebook.kinds import notebook_kind

CLI = str(Path(sys.executable).with_name("kernel-agent"))
SALES = "region,amount\nnorth,3\nsouth,5\n"
KEY = "kinds-key"


def show(notebook: Path) -> str:
    shown = CliRunner().invoke(cli, ["show", str(notebook)], terminal_width=120)
    assert shown.exit_code == 0, shown.output
    return shown.output


def page_text(page: str) -> str:
    """The report's visible text, one space between words."""
    body = re.sub(r"<(style|script)\b.*?</\1>", " ", page, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def assert_two_turns(out: str, first_model: str, second_model: str) -> None:
    """``show``'s reading of a two-turn run: the latest answer first, then each question where its turn
    starts, each earlier turn with its answer and its own model, nothing unknown, nothing unanswered."""
    assert f"model {first_model} · protocol tools" in out.split("Round 1", 1)[0]  # the header: the first turn's
    assert "1 follow-up question(s)" in out
    # the run's answer first (the latest turn's, as the report reads), then the turns in order
    assert out.index("Doubled: 16.") < out.index("The total is 8.") < out.index("Follow-up question 1")
    follow_up = out.split("Follow-up question 1", 1)[1]
    assert "Double it" in follow_up and f"model {second_model} · protocol tools" in follow_up
    assert "unknown" not in out and "not recorded" not in out and "No answer" not in out
    assert "4 round(s)" in out and "tokens not reported" not in out


@pytest.mark.kernel
def test_a_resumed_run_shows_each_question_with_its_model_and_answer(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    data = tmp_path / "sales.csv"
    data.write_text(SALES)
    notebook = tmp_path / "sales-run.ipynb"
    openai_server.add(
        Reply("Sum.", tool_calls=(python_call("total = int(pd.read_csv(data.sales).amount.sum())\nprint(total)"),)),
        Reply("The total is 8."),
        Reply("Double.", tool_calls=(python_call("print(total * 2)"),)),
        Reply("Doubled: 16."),
    )
    model = ["--base-url", openai_server.base_url, "--protocol", "tools", "--quiet"]
    ran = CliRunner().invoke(
        cli,
        ["run", "Total amount?", "--data", str(data), "--model", "model-one", "--workspace", str(tmp_path / "ws"),
         "--out", str(notebook), *model],
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output
    resumed = CliRunner().invoke(cli, ["resume", str(notebook), "Double it", "--model", "model-two", *model])
    assert resumed.exit_code == 0, resumed.output

    assert_two_turns(show(notebook), "model-one", "model-two")
    page = render_html(notebook)
    text = page_text(page)
    assert page_title(_Node(_metadata(notebook))) == "kernel-agent: Total amount?"
    assert notebook_kind(_metadata(notebook)) == "resumed"
    assert "Model: model-one" in text and "Model model-two · protocol tools" in text  # the follow-up's own
    assert text.index("Doubled: 16.") < text.index("The total is 8.") < text.index("Follow-up question 1")


@pytest.mark.kernel
def test_a_service_threads_notebook_shows_its_turns(openai_server: OpenAIServer, tmp_path: Path) -> None:
    with (
        ServiceServer(tmp_path / "service", openai_server.base_url, keys={KEY}) as server,
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as client,
    ):
        upload = client.post("/v1/files", files={"file": ("sales.csv", SALES.encode())}, data={"purpose": "assistants"})
        openai_server.add(
            Reply("Sum.", tool_calls=(python_call("total = int(pd.read_csv(data.sales).amount.sum())\nprint(total)"),)),
            Reply("The total is 8."),
            Reply("Double.", tool_calls=(python_call("print(total * 2)"),)),
            Reply("Doubled: 16."),
        )
        first = _finished(client, {"task": "Total amount?", "file_ids": [upload.json()["id"]]})
        second = _finished(client, {"task": "Double it", "thread_id": first["thread_id"]})
        assert (first["answer"], second["answer"]) == ("The total is 8.", "Doubled: 16.")
        notebook = tmp_path / "thread.ipynb"
        notebook.write_bytes(client.get(second["notebook_url"]).content)
        served_page = client.get(second["html_url"]).text

    assert_two_turns(show(notebook), "scripted-test-model", "scripted-test-model")
    for page in (served_page, render_html(notebook)):
        text = page_text(page)
        assert "kernel-agent: Total amount?" in text and "Model: scripted-test-model" in text
        assert text.index("Doubled: 16.") < text.index("The total is 8.") < text.index("Follow-up question 1 Double it")


@pytest.mark.kernel
def test_an_mcp_sessions_notebook_shows_its_client_and_executions(tmp_path: Path) -> None:
    data = tmp_path / "sales.csv"
    data.write_text(SALES)
    workspace = tmp_path / "session"
    params = StdioServerParameters(
        command=CLI, args=["mcp", "--workspace", str(workspace), "--data", str(data)], cwd=str(tmp_path)
    )
    with (tmp_path / "server.log").open("a") as log, HeldClient(lambda: stdio_client(params, errlog=log)) as client:
        client.call("execute_python", {"code": "total = int(pd.read_csv(data.sales).amount.sum())\nprint(total)"})
        client.call("execute_python", {"code": "1 / 0"})
        notebook = Path(client.call("export_notebook").content[0].text)
        open_view = show(notebook)
    closed_view = show(notebook)  # the server wrote it once more as the session ended

    for out in (open_view, closed_view):
        header = out.split("Execution 1", 1)[0]
        assert "MCP session · client pytest-client 1.0 · data sales.csv" in header
        assert "✓ execution 1: ok" in out and "✗ execution 2: error" in out and "ZeroDivisionError" in out
        assert "Round" not in out and "model 0.0 s" not in out and "tokens" not in out and "Answer" not in out
    assert "still open when this notebook was written (2 code execution(s))" in open_view
    assert "The MCP session ended after 2 code execution(s)." in closed_view and "still open" not in closed_view

    text = page_text(render_html(notebook))
    assert notebook_kind(_metadata(notebook)) == "mcp"
    assert "kernel-agent: MCP session (pytest-client 1.0)" in text and "Client: pytest-client 1.0" in text
    assert "Session ended The MCP session ended after 2 code execution(s)." in text
    assert "Answer" not in text and "Model:" not in text and "Protocol:" not in text


def test_notebook_kinds_are_read_from_any_metadata() -> None:
    def kind(meta: object) -> str:
        return notebook_kind({"kernel_agent": meta})

    assert notebook_kind({}) == "foreign" and notebook_kind([]) == "foreign" and kind("x") == "foreign"
    assert kind({"task": "t"}) == "run" and kind({"turns": [{"task": "t"}]}) == "run"
    assert kind({"turns": [{"task": "t"}, {"task": "u"}]}) == "resumed" and kind({"turns": "x"}) == "run"
    assert kind({"plan": {"nodes": []}, "turns": [{}, {}]}) == "plan" and kind({"protocol": "mcp"}) == "mcp"
    assert page_title(_Node({"kernel_agent": {"protocol": "mcp", "model": "c" * 200}})).endswith("…)")
    assert page_title(_Node({"kernel_agent": {"protocol": "mcp"}})) == "kernel-agent: MCP session"
    assert page_title(_Node({})) == "kernel-agent run"


class _Node:
    def __init__(self, metadata: dict[str, object]) -> None:
        self.metadata = metadata


def _metadata(notebook: Path) -> dict[str, object]:
    from kernel_agent.notebook.load import read_notebook

    return dict(read_notebook(notebook).metadata)


def _finished(client: httpx.Client, body: dict[str, object]) -> dict[str, Any]:
    """Start a run and follow its events to the end (its record is written before the last); its record."""
    started = client.post("/v1/runs", json=body)
    assert started.status_code in (200, 201), started.text
    run_id = started.json()["id"]
    with client.stream("GET", f"/v1/runs/{run_id}/events") as events:
        for _line in events.iter_lines():  # the stream ends with the run's ``finished`` event
            pass
    value: dict[str, object] = client.get(f"/v1/runs/{run_id}").json()
    return value
