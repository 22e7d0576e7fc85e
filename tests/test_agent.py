"""The agent end to end: the real openai SDK over HTTP to the scripted server, real kernels."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import nbformat
import pandas as pd
import pytest
from leaks import kernels_of
from openai_server import HTTPError, OpenAIServer, Reply, python_call
from ports import closed_port

from kernel_agent import Agent
from kernel_agent.errors import ConfigError, DataFileError
from kernel_agent.events import CodeReady, ExecutionFinished, RoundStarted, RunFinished, TextDelta

pytestmark = pytest.mark.kernel

FAST = {"max_retries": 2, "backoff": 0.01}


@pytest.fixture
def sales_csv(tmp_path: Path) -> Path:
    rows = []
    for day in range(1, 21):
        for product, price, region in (("Apple", 1.5, "East"), ("Banana", 0.8, "West"), ("Orange", 1.2, "South")):
            rows.append(
                {
                    "date": f"2024-01-{day:02d}",
                    "product": product,
                    "quantity": day % 7 + 3,
                    "price": price,
                    "region": region,
                }
            )
    path = tmp_path / "sales_data.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def agent_for(server: OpenAIServer, protocol: str = "tags", **kwargs: Any) -> Agent:
    return Agent(
        model="test-model",
        base_url=server.base_url,
        api_key="sk-test-not-for-the-kernel",
        protocol=protocol,
        model_options=FAST,
        **kwargs,
    )


SEED_ROUNDS = [
    ("Load and inspect.", "df = pd.read_csv(data.sales_data)\nprint('Shape:', df.shape)\nprint(df.dtypes)"),
    (
        "Totals.",
        "df['total_sales'] = df['quantity'] * df['price']\n"
        "print(df.groupby('product')['total_sales'].sum().sort_values(ascending=False))\n"
        "print(f\"Total Revenue: ${df['total_sales'].sum():.2f}\")",
    ),
    (
        "Plot.",
        "fig, axes = plt.subplots(1, 2, figsize=(8, 3))\n"
        "df.groupby('product')['total_sales'].sum().plot.bar(ax=axes[0])\n"
        "df.groupby('region')['total_sales'].sum().plot.bar(ax=axes[1])\n"
        "plt.savefig('sales_analysis.png')\nplt.show()",
    ),
]


def seed_script(protocol: str) -> list[Any]:
    """Seed 000's 4-round sales analysis in the given protocol's form."""
    entries: list[Any] = []
    for text, code in SEED_ROUNDS:
        if protocol == "tools":
            entries.append(Reply(text, tool_calls=(python_call(code),)))
        elif protocol == "deepanalyze":  # vLLM stops on </Code> and drops it
            entries.append(Reply(f"<Analyze>{text}</Analyze>\n<Code>\n```python\n{code}\n```\n", stop_reason="</Code>"))
        else:
            entries.append(Reply(f"<Analyze>{text}</Analyze>\n<Code>\n```python\n{code}\n```\n</Code>"))

    def answer(body: dict[str, Any]) -> Reply:
        sent = json.dumps(body["messages"])
        assert "Total Revenue" in sent and "Shape: (60, 5)" in sent  # earlier outputs reached the model
        final = "Apple leads revenue."
        return Reply(final if protocol == "tools" else f"<Answer>{final}</Answer>")

    return [*entries, answer]


@pytest.mark.parametrize("protocol", ["tags", "deepanalyze", "tools"])
def test_seed_sales_analysis_end_to_end(
    protocol: str, openai_server: OpenAIServer, sales_csv: Path, tmp_path: Path
) -> None:
    for entry in seed_script(protocol):
        openai_server.add(entry)
    with agent_for(openai_server, protocol) as agent:
        run = agent.run("Analyze sales_data.csv and create visualizations", data=[sales_csv], workspace=tmp_path / "ws")
    assert run.stop_reason == "answer"
    assert run.answer == "Apple leads revenue."
    assert [r.status for r in run.rounds] == ["ok", "ok", "ok", "answer"]
    assert len(run.rounds[2].result.images) == 1  # type: ignore[union-attr]
    assert [a.path for a in run.rounds[2].artifacts] == ["sales_analysis.png"]
    assert run.usage.total_tokens > 0
    nb = nbformat.read(run.notebook_path, as_version=4)
    nbformat.validate(nb)
    assert sum(cell.cell_type == "code" for cell in nb.cells) == 4  # setup + 3 rounds
    feedback_roles = {"tags": "user", "deepanalyze": "execute", "tools": "tool"}[protocol]
    last = openai_server.requests[-1]["messages"]
    assert last[-1]["role"] == feedback_roles
    if protocol == "deepanalyze":
        assert openai_server.requests[0]["stop"] == ["</Code>"]
        assert last[-2]["content"].rstrip().endswith("</Code>")  # put back after the stop
    if protocol == "tools":
        assert openai_server.requests[0]["tools"][0]["function"]["name"] == "execute_python"


def test_model_fixes_its_own_error_after_seeing_the_traceback(
    openai_server: OpenAIServer, sales_csv: Path, tmp_path: Path
) -> None:
    def fix(body: dict[str, Any]) -> Reply:
        feedback = body["messages"][-1]["content"]
        assert "KeyError" in feedback and "qty" in feedback
        return Reply("<Code>df['revenue'] = df['quantity'] * df['price']\nprint(df['revenue'].sum())</Code>")

    openai_server.add(Reply("<Code>df = pd.read_csv(data.sales_data)\ndf['revenue'] = df['qty'] * df['price']</Code>"))
    openai_server.add(fix)
    openai_server.add(Reply("<Answer>done</Answer>"))
    with agent_for(openai_server) as agent:
        run = agent.run("revenue", data=[sales_csv], workspace=tmp_path / "ws")
    assert [r.status for r in run.rounds] == ["error", "ok", "answer"]
    assert run.rounds[0].result.error.ename == "KeyError"  # type: ignore[union-attr]


def test_variables_from_round_one_are_used_in_round_three(openai_server: OpenAIServer, tmp_path: Path) -> None:
    def check(body: dict[str, Any]) -> Reply:
        assert "2468" in body["messages"][-1]["content"]
        return Reply("<Answer>2468</Answer>")

    openai_server.add(Reply("<Code>secret_number = 1234</Code>"))
    openai_server.add(Reply("<Code>unrelated = 'x'</Code>"))
    openai_server.add(Reply("<Code>print(secret_number * 2)</Code>"))
    openai_server.add(check)
    with agent_for(openai_server) as agent:
        run = agent.run("state", workspace=tmp_path / "ws")
    assert run.answer == "2468"
    assert run.rounds[2].result.stdout == "2468\n"  # type: ignore[union-attr]


def test_figure_reaches_the_model_as_an_image_with_vision(openai_server: OpenAIServer, tmp_path: Path) -> None:
    def look(body: dict[str, Any]) -> Reply:
        parts = [p for m in body["messages"] if isinstance(m.get("content"), list) for p in m["content"]]
        urls = [p["image_url"]["url"] for p in parts if p.get("type") == "image_url"]
        assert len(urls) == 1 and urls[0].startswith("data:image/png;base64,iVBOR")
        return Reply("I saw the line.")

    openai_server.add(Reply("", tool_calls=(python_call("plt.plot([1, 2, 3]); plt.show()"),)))
    openai_server.add(look)
    with agent_for(openai_server, "tools", vision=True) as agent:
        run = agent.run("plot", workspace=tmp_path / "ws")
    assert run.answer == "I saw the line."


def test_without_vision_figures_are_placeholders(openai_server: OpenAIServer, tmp_path: Path) -> None:
    def look(body: dict[str, Any]) -> Reply:
        assert "image_url" not in json.dumps(body["messages"])
        assert "[image 1: png" in body["messages"][-1]["content"]
        return Reply("ok")

    openai_server.add(Reply("", tool_calls=(python_call("plt.plot([1, 2]); plt.show()"),)))
    openai_server.add(look)
    with agent_for(openai_server, "tools") as agent:
        assert agent.run("plot", workspace=tmp_path / "ws").answer == "ok"


def test_code_runs_with_and_without_the_closing_tag(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(Reply("<Analyze>a</Analyze><Code>print('stopped')", stop_reason="</Code>"))
    openai_server.add(Reply("<Code>print('closed')</Code>"))
    openai_server.add(Reply("<Code>\n```python\nprint('lost tag')\n```\n"))  # streamed reply lost </Code>
    openai_server.add(Reply("<Answer>fine</Answer>"))
    with agent_for(openai_server, "deepanalyze") as agent:
        run = agent.run("tags", workspace=tmp_path / "ws")
    assert [r.result.stdout for r in run.rounds[:3]] == ["stopped\n", "closed\n", "lost tag\n"]  # type: ignore[union-attr]
    assert [r.problem for r in run.rounds[:3]] == [None, None, None]  # finish_reason "stop" explains the lost tag
    sent = openai_server.requests[1]["messages"]
    assert sent[-2]["content"].endswith("</Code>")
    assert sent[-1] == {"role": "execute", "content": "stopped\n"}  # raw, as DeepAnalyze sends it


@pytest.mark.parametrize("protocol", ["tags", "deepanalyze", "tools"])
def test_a_partly_used_reply_is_explained_to_the_model(
    protocol: str, openai_server: OpenAIServer, tmp_path: Path
) -> None:
    """Two code blocks (tags, deepanalyze) or two tool calls (tools): the first runs, and the feedback
    says what was not."""
    if protocol != "tools":
        openai_server.add(Reply("<Code>print('first')</Code>\n<Code>print('second')</Code>"))
    else:
        openai_server.add(Reply("", tool_calls=(python_call("print('first')"), python_call("print('second')"))))
    openai_server.add(Reply("done" if protocol == "tools" else "<Answer>done</Answer>"))
    with agent_for(openai_server, protocol) as agent:
        run = agent.run("two at once", workspace=tmp_path / "ws")
    assert run.rounds[0].result.stdout == "first\n" and run.rounds[0].problem  # type: ignore[union-attr]
    sent = json.dumps(openai_server.requests[1]["messages"])
    assert f"[about your reply: {run.rounds[0].problem}]" in sent
    if protocol != "tools":
        assert "a second <Code> block was not run" in run.rounds[0].problem


def test_stuck_guard_stops_a_model_repeating_a_failure(openai_server: OpenAIServer, tmp_path: Path) -> None:
    for _ in range(3):
        openai_server.add(Reply("<Code>print(undefined_name)</Code>"))
    with agent_for(openai_server) as agent:
        run = agent.run("loop", workspace=tmp_path / "ws")
    assert run.stop_reason == "stuck"
    assert len(run.rounds) == 3
    assert openai_server.remaining == 0


def test_max_rounds_stops_and_keeps_every_round(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(Reply("<Code>a = 1</Code>"))
    openai_server.add(Reply("<Code>b = 2</Code>"))
    with agent_for(openai_server, max_rounds=2) as agent:
        run = agent.run("never answers", workspace=tmp_path / "ws")
    assert run.stop_reason == "max_rounds" and run.answer is None
    nb = nbformat.read(run.notebook_path, as_version=4)
    assert [c.source for c in nb.cells if c.cell_type == "code"][1:] == ["a = 1", "b = 2"]
    assert nb.metadata["kernel_agent"]["stop_reason"] == "max_rounds"


def test_a_server_error_then_success_is_retried(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(HTTPError(500))
    openai_server.add(Reply("<Answer>after a retry</Answer>"))
    with agent_for(openai_server) as agent:
        run = agent.run("retry", workspace=tmp_path / "ws")
    assert run.answer == "after a retry"
    assert len(openai_server.requests) == 2


def test_connection_refused_ends_with_llm_error_and_a_notebook(tmp_path: Path) -> None:
    with closed_port() as port, Agent(model="m", base_url=f"http://127.0.0.1:{port}/v1", model_options=FAST) as agent:
        events = list(agent.stream("unreachable", workspace=tmp_path / "ws"))
    run = events[-1].run  # type: ignore[union-attr]
    assert run.stop_reason == "llm_error"
    assert f"127.0.0.1:{port}" in (run.error or "")
    assert "Traceback" not in (run.error or "")
    assert any(e.kind == "error" for e in events)
    assert run.notebook_path is not None and Path(run.notebook_path).is_file()


def test_protocol_trouble_is_recorded_not_fatal(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(Reply(""))
    openai_server.add(Reply("I think the answer is probably 3, let me just say it."))
    openai_server.add(Reply("<Analyze>unbalanced <Code>print(7)</Code>"))
    openai_server.add(Reply("<Answer>7</Answer>"))
    with agent_for(openai_server) as agent:
        run = agent.run("trouble", workspace=tmp_path / "ws")
    assert run.answer == "7"
    assert run.rounds[0].problem and run.rounds[1].problem
    assert run.rounds[2].result.stdout == "7\n"  # type: ignore[union-attr]
    nudge = openai_server.requests[1]["messages"][-1]
    assert nudge["role"] == "user" and "<Code>" in nudge["content"]


def test_timeout_is_reported_truthfully_and_state_survives(openai_server: OpenAIServer, tmp_path: Path) -> None:
    def after_timeout(body: dict[str, Any]) -> Reply:
        feedback = body["messages"][-1]["content"]
        assert "[timeout]" in feedback and "still defined" in feedback
        return Reply("<Code>print(kept)</Code>")

    openai_server.add(Reply("<Code>kept = 'yes'</Code>"))
    openai_server.add(Reply("<Code>while True: pass</Code>"))
    openai_server.add(after_timeout)
    openai_server.add(Reply("<Answer>ok</Answer>"))
    with agent_for(openai_server, exec_timeout=2) as agent:
        run = agent.run("slow", workspace=tmp_path / "ws")
    assert [r.status for r in run.rounds] == ["ok", "timeout", "ok", "answer"]
    assert run.rounds[2].result.stdout == "yes\n"  # type: ignore[union-attr]


def test_missing_data_file_fails_before_any_model_call(openai_server: OpenAIServer, tmp_path: Path) -> None:
    with agent_for(openai_server) as agent, pytest.raises(DataFileError, match="nope.csv"):
        agent.run("x", data=[tmp_path / "nope.csv"], workspace=tmp_path / "ws")
    assert openai_server.requests == []


def test_an_unreadable_data_file_fails_before_any_model_call_and_leaves_no_kernel(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    """The files are described while the kernel runs its setup cell: a failure there still ends the run
    before the model is asked, with the kernel shut down."""
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not a parquet file at all\n" * 10)
    with agent_for(openai_server) as agent, pytest.raises(DataFileError, match="broken.parquet"):
        agent.run("x", data=[broken], workspace=tmp_path / "ws")
    assert openai_server.requests == []
    assert kernels_of(os.getpid()) == []


def test_no_model_configured_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="KERNEL_AGENT_MODEL"):
        Agent()


def test_environment_supplies_defaults_and_arguments_win(
    openai_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEL_AGENT_MODEL", "from-env")
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    with Agent() as agent:
        assert agent.config.model.name == "from-env" and agent.config.model.base_url == openai_server.base_url
    with Agent(model="explicit") as agent:
        assert agent.config.model.name == "explicit"


def test_the_api_key_never_reaches_the_kernel(
    openai_server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-secret")
    openai_server.add(Reply("<Code>import os\nprint(sorted(os.environ.items()))</Code>"))
    openai_server.add(Reply("<Answer>done</Answer>"))
    with agent_for(openai_server) as agent:
        run = agent.run("env", workspace=tmp_path / "ws")
    dump = run.rounds[0].result.stdout  # type: ignore[union-attr]
    assert "sk-env-secret" not in dump and "sk-test-not-for-the-kernel" not in dump
    assert "sk-test" not in Path(run.notebook_path).read_text()  # type: ignore[arg-type]


def test_stream_yields_typed_events_in_order(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(Reply("<Code>print('hi')</Code>"))
    openai_server.add(Reply("<Answer>bye</Answer>"))
    with agent_for(openai_server) as agent:
        events = list(agent.stream("events", workspace=tmp_path / "ws"))
    kinds = [e.kind for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "finished"
    assert kinds.index("code_ready") < kinds.index("execution_started") < kinds.index("execution_finished")
    assert "".join(e.text for e in events if isinstance(e, TextDelta) and e.round == 1) == "<Code>print('hi')</Code>"
    assert [e.round for e in events if isinstance(e, RoundStarted)] == [1, 2]
    assert isinstance(events[-1], RunFinished)
    assert any(isinstance(e, CodeReady) for e in events) and any(isinstance(e, ExecutionFinished) for e in events)
    json.dumps([e.to_dict() for e in events])  # every event is JSON-ready


def test_resume_continues_with_the_old_variables(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(Reply("<Code>total = 40 + 2\nprint(total)</Code>"))
    openai_server.add(Reply("<Code>1/0</Code>"))
    openai_server.add(Reply("<Answer>42</Answer>"))

    def follow_up(body: dict[str, Any]) -> Reply:
        briefing = body["messages"][-1]["content"]
        assert "total = 40 + 2" in briefing and "double it" in briefing
        return Reply("<Code>print(total * 2)</Code>")

    openai_server.add(follow_up)
    openai_server.add(Reply("<Answer>84</Answer>"))
    with agent_for(openai_server) as agent:
        first = agent.run("compute", workspace=tmp_path / "ws")
        assert first.notebook_path is not None
        second = agent.resume(first.notebook_path, "double it")
    assert second.answer == "84"
    assert second.notebook_path == first.notebook_path
    assert second.rounds[-2].result.stdout == "84\n"  # type: ignore[union-attr]
    assert [r.index for r in second.rounds] == [1, 2, 3, 4, 5]
    nb = nbformat.read(second.notebook_path, as_version=4)
    assert "print(total * 2)" in [c.source for c in nb.cells if c.cell_type == "code"]


def test_old_feedback_is_clipped_so_long_runs_fit_the_context(openai_server: OpenAIServer, tmp_path: Path) -> None:
    def check(body: dict[str, Any]) -> Reply:
        feedback = [
            m["content"] for m in body["messages"] if m["role"] == "user" and m["content"].startswith("<Execute>")
        ]
        assert len(feedback) == 5
        assert all(len(text) < 1000 and "characters omitted" in text for text in feedback[:3])  # clipped
        assert all(len(text) > 4000 and "characters omitted" not in text for text in feedback[3:])  # latest 2 full
        assert all(f"end of round {n}" in text for n, text in enumerate(feedback, start=1))  # tails survive
        return Reply("<Answer>fits</Answer>")

    for n in range(1, 6):
        openai_server.add(Reply(f"<Code>print('x' * 4500)\nprint('end of round {n}')</Code>"))
    openai_server.add(check)
    with agent_for(openai_server, full_feedback_rounds=2, old_feedback_chars=600) as agent:
        run = agent.run("long", workspace=tmp_path / "ws")
    assert run.answer == "fits"
    assert len(run.rounds[0].result.stdout) > 4500  # type: ignore[union-attr]  # the record keeps everything
