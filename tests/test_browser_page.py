"""The web page's run view in chromium, fed the events of a real run (real kernel, scripted model).

The page's drawing code (``server/static/render.js``, ``run.js``) gets the events
as the service sends them (the CLI's ``--json`` events, with the execution's
nbformat outputs), one by one, in a page served over 127.0.0.1 from a copy of
the static folder. The service itself is tested in ``test_browser_web.py``.
"""

from __future__ import annotations

import functools
import shutil
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from browser import screenshot
from openai_server import OpenAIServer, Reply, python_call

from kernel_agent import Agent
from kernel_agent.server.threads import event_dict

pytestmark = [pytest.mark.browser, pytest.mark.kernel]

STATIC = Path(__file__).resolve().parent.parent / "kernel_agent" / "server" / "static"
HARNESS = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>run view</title>
<link rel="icon" href="data:,"><link rel="stylesheet" href="vendor/highlight-github.min.css">
<link rel="stylesheet" href="app.css"></head><body><main id="main"><div id="runs"></div></main>
<script src="vendor/marked.umd.js"></script><script src="vendor/purify.min.js"></script>
<script src="vendor/highlight.min.js"></script><script src="render.js"></script><script src="run.js"></script>
<script>
  window.cancelled = [];
  window.view = new KA.RunView({id: "r1", task: "Total the amounts."},
                               {cancel: async (id) => { window.cancelled.push(id); }, download: async () => {}},
                               {words: {llm_error: "stopped: the model endpoint failed"}});
  document.getElementById("runs").append(window.view.node);
</script></body></html>"""
CODE = (
    "import pandas as pd, matplotlib.pyplot as plt, sys\n"
    "sales = pd.DataFrame({'month': range(1, 13), 'amount': [m * 10 for m in range(1, 13)]})\n"
    "display(sales.head())\n"
    "sales.plot(x='month', y='amount')\n"
    "plt.show()\n"
    "print('a warning', file=sys.stderr)\n"
    "print('\\n'.join(f'line {i}' for i in range(80)))"
)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # the test's output is not a web log
        pass


@pytest.fixture
def static_site(tmp_path: Path) -> Iterator[str]:
    """The static folder plus the harness page, served over real HTTP on 127.0.0.1."""
    site = tmp_path / "site"
    shutil.copytree(STATIC, site)
    (site / "harness.html").write_text(HARNESS, encoding="utf-8")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/harness.html"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def run_events(openai_server: OpenAIServer, workspace: Path) -> list[dict[str, Any]]:
    """A real run's events as the service sends them."""
    openai_server.add(Reply("**Loading** the sales.", tool_calls=(python_call(CODE),)))
    openai_server.add(Reply("Checking an edge case.", tool_calls=(python_call("1 / 0"),)))
    openai_server.add(Reply("## Answer\n\nThe total is **780**."))
    events = []
    with Agent(model="m", base_url=openai_server.base_url) as agent:
        for event in agent.stream("Total the amounts.", workspace=workspace):
            events.append(event_dict(event))  # as the service sends them: nbformat outputs, folded tracebacks
    return events


def test_run_view_draws_rounds_answer_and_problems(
    page: Any, static_site: str, openai_server: OpenAIServer, tmp_path: Path
) -> None:
    events = run_events(openai_server, tmp_path / "ws")
    page.goto(static_site)
    split = next(i for i, e in enumerate(events) if e["event"] == "execution_finished")  # the code still runs
    assert events[split - 1]["event"] == "execution_output"
    page.evaluate("events => events.forEach(e => window.view.handle(e))", events[:split])

    run = page.locator(".run")
    assert run.locator(".exec.running").inner_text().startswith("running…")  # the clock while code runs
    live = run.locator("pre.live-output")  # the output so far, as it streams
    assert "line 79" in live.inner_text() and "a warning" in live.inner_text()
    assert "[1 figure so far]" in live.inner_text()
    screenshot(page, "web-run-view-live")
    assert run.locator(".status.running").count() == 1
    run.get_by_role("button", name="Cancel").click()
    assert page.evaluate("window.cancelled") == ["r1"]
    page.evaluate("events => events.forEach(e => window.view.handle(e))", events[split:])

    rounds = run.locator(".round")
    assert rounds.count() == 3
    assert live.count() == 0  # replaced by the whole outputs
    first = rounds.nth(0)
    assert first.locator(".markdown strong", has_text="Loading").count() == 1
    assert first.locator("pre.code .hljs-keyword").count() >= 1
    assert first.locator(".output table").count() == 1
    assert first.locator(".output img").evaluate("img => img.naturalWidth") > 100
    assert first.locator("pre.stderr", has_text="a warning").count() == 1
    long_output = first.locator("pre.stdout", has_text="line 79")
    assert long_output.evaluate("el => el.clientHeight < el.scrollHeight")  # collapsed
    first.get_by_role("button", name="Show all 81 lines").click()
    assert long_output.evaluate("el => el.clientHeight >= el.scrollHeight")
    assert "ZeroDivisionError" in rounds.nth(1).locator(".exec.bad").inner_text()
    lead = rounds.nth(1).locator("pre.traceback-lead")  # the model's line and the exception, nothing else
    assert lead.inner_text().startswith("Cell In[") and "----> 1 1 / 0" in lead.inner_text()
    assert lead.inner_text().splitlines()[-1] == "ZeroDivisionError: division by zero"
    assert rounds.nth(1).locator("pre.traceback-full").is_hidden()
    assert [rounds.nth(i).get_attribute("aria-label") for i in range(3)] == ["Round 1", "Round 2", "Round 3"]
    answer = run.locator(".answer")
    assert answer.is_visible() and "The total is 780." in answer.inner_text()
    assert answer.locator("h3").count() == 1 and answer.locator("h2").count() == 0
    assert run.evaluate(
        "n => Boolean(n.querySelector('.answer').compareDocumentPosition(n.querySelector('.round')) & 4)"
    )
    assert (
        run.locator(".status").all_inner_texts() == ["completed"]
        and run.get_by_role("button", name="Cancel").is_hidden()
    )
    assert run.locator(".problem").is_hidden()
    assert run.locator("h2", has_text="Answer").count() == 0  # the model's own heading, nowhere
    assert "tokens" in run.locator(".run-head").inner_text()
    assert page.log.external() == [] and page.log.console_errors == [] and page.log.page_errors == []
    screenshot(page, "web-run-view")
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")  # phone width
    screenshot(page, "web-run-view-phone")


def test_a_streaming_reply_reads_as_markdown_and_failures_are_said_once(page: Any, static_site: str) -> None:
    """A tags-protocol reply mid-stream: no raw tags or asterisks; a failed turn: one badge, one message."""
    page.goto(static_site)
    reply = (
        "<Analyze>\nFirst **load** the table,\nthen check it.\n</Analyze>\n<Code>\n```python\nsales = data['sales']\n"
    )
    chunks = [reply[i : i + 7] for i in range(0, len(reply), 7)]
    started = {
        "event": "run_started",
        "task": "Total the amounts.\n\nFollow-up: And by month?",
        "model": "m",
        "protocol": "tags",
        "workspace": "/w",
        "notebook_path": None,
        "question": "And by month?",
    }
    events = [started, {"event": "round_started", "round": 4, "max_rounds": 9}]
    events += [{"event": "text_delta", "round": 4, "text": chunk} for chunk in chunks]
    page.evaluate("events => events.forEach(e => window.view.handle(e))", events)
    reasoning = page.locator(".round .reasoning")
    reasoning.locator("strong", has_text="load").wait_for()  # drawn as markdown while it streams
    text = reasoning.inner_text()
    assert "<Analyze>" not in text and "<Code>" not in text and "**" not in text
    assert reasoning.locator("pre code", has_text="sales = data['sales']").count() == 1
    assert page.locator(".run h2").inner_text() == "Total the amounts."  # the record's question first
    assert "at most 6 rounds" in page.locator(".run-meta").inner_text()

    failure = "Error code: 400 - the context is too long"
    page.evaluate(
        "events => events.forEach(e => window.view.handle(e))",
        [
            {"event": "text_reset", "round": 4, "reason": "timeout"},
            {"event": "text_reset", "round": 4, "reason": "timeout"},
            {"event": "error", "message": failure, "error_type": "ModelError", "round": None},
            {"event": "finished", "run": {"answer": None, "stop_reason": "llm_error", "error": failure, "rounds": 0}},
        ],
    )
    run = page.locator(".run")
    assert run.locator(".status").all_inner_texts() == ["failed"]
    assert run.locator(".problem").count() == 1 and run.inner_text().count(failure) == 1
    assert run.locator(".problem").inner_text().splitlines() == [
        "Stopped: the model endpoint failed after 0 round(s).",
        failure,
    ]
    assert run.locator(".note").all_inner_texts() == ["Model request failed, retrying (2 times): timeout"]
    assert page.log.console_errors == [] and page.log.page_errors == []
