"""The web page against the real service, in chromium: what an analyst sees and does.

One service (real uvicorn, real sandboxed kernels, the scripted OpenAI-compatible
model behind the real ``openai`` SDK) serves the page at ``/``; the browser asks
for the key, uploads a file through the picker, starts a run, watches it live,
asks a follow-up in the same kernel, downloads what the run made, finds the
analysis again by its task, and cancels a running one. Every step asserts on
what the page shows, and no step may log a console error or fetch anything
from off this machine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import nbformat
import pytest
from browser import screenshot
from openai_server import OpenAIServer, Reply, context_length_error, python_call
from ports import listening_port
from service_server import ServiceServer

pytestmark = [pytest.mark.browser, pytest.mark.kernel]

KEY = "page-test-key"
SALES = "month,amount\n" + "\n".join(f"{m},{m * 10}" for m in range(1, 13)) + "\n"
LOAD = (
    "import pandas as pd, matplotlib.pyplot as plt\n"
    "sales = pd.read_csv('sales.csv')\n"
    "display(sales.head(3))\n"
    "sales.plot(x='month', y='amount')\n"
    "plt.savefig('chart.png'); plt.savefig('chart.svg')\n"
    "plt.show()\n"
    "open('page.html', 'w').write('<script>window.PWNED = 1</script>')\n"
    "sales.assign(double=sales.amount * 2).to_csv('doubled.csv', index=False)\n"
    "print('total', sales.amount.sum())"
)
TIMEOUT = 60_000  # ms: a round with a cold kernel on a loaded 2-core machine
UPLOAD_LIMIT = 256 * 1024


@pytest.fixture(scope="module")
def service(model: OpenAIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceServer]:
    with ServiceServer(
        tmp_path_factory.mktemp("web-service"), model.base_url, keys={KEY}, max_upload_mb=UPLOAD_LIMIT / 2**20
    ) as running:
        yield running


def no_problems(page: Any) -> None:
    assert page.log.console_errors == [] and page.log.page_errors == []
    assert page.log.external() == []  # everything the page needs is served by the service itself


def test_analysis_from_upload_to_downloads(
    page: Any, service: ServiceServer, model: OpenAIServer, tmp_path: Path
) -> None:
    model.add(Reply("**Loading** the sales file.", tool_calls=(python_call(LOAD),)))
    model.add(Reply("## Answer\n\nThe total is **780**."))
    model.add(
        Reply(
            "The frame is still there.",
            tool_calls=(python_call("import os\nprint('rows', len(sales), os.path.getsize('extra.csv'))"),),
        )
    )
    model.add(Reply("It has **12** rows."))
    data = tmp_path / "sales.csv"
    data.write_text(SALES, encoding="utf-8")

    page.goto(service.url + "/")
    key_input = page.locator("#key-input")
    key_input.wait_for(state="visible")
    assert page.evaluate("document.activeElement.id") == "key-input"  # keyboard users can type at once
    key_input.fill(KEY)
    key_input.press("Enter")
    page.locator("#new-run").wait_for(state="visible")

    page.locator("#file-input").set_input_files(str(data))
    page.locator("#file-list li", has_text=f"sales.csv · {len(SALES)} B").wait_for()
    page.locator("#task").fill("Total the sales amounts.")
    page.locator("#task").press("Control+Enter")

    run = page.locator(".run").first
    run.locator(".answer").wait_for(state="visible", timeout=TIMEOUT)
    first = run.locator(".round").first
    assert first.locator(".markdown strong", has_text="Loading").count() == 1
    assert first.locator("pre.code .hljs-keyword").count() >= 1
    assert first.locator(".output table").count() == 1
    assert first.locator(".output img").evaluate("img => img.naturalWidth") > 100
    assert first.locator("pre.stdout", has_text="total 780").count() == 1
    assert "The total is 780." in run.locator(".answer").inner_text()
    assert run.inner_text().count("The total is 780.") == 1  # one answer per turn: the last round points to it
    assert run.locator(".round").last.locator(".answered button").inner_text() == "see the answer above"
    # The files the code wrote: each a link; the raster image among them shown (as data, never the SVG or HTML).
    written = first.locator(".files-written a")
    assert written.all_inner_texts() == ["chart.png", "chart.svg", "doubled.csv", "page.html"]
    assert all(link.get_attribute("download") is None for link in written.all())
    image = first.locator(".file-image img")
    image.wait_for()
    assert image.count() == 1 and image.get_attribute("alt") == "chart.png"
    assert image.get_attribute("src").startswith("data:image/png;base64,")
    assert image.evaluate("img => img.naturalWidth") > 100
    run.locator(".status.completed").wait_for()
    assert run.locator(".status").all_inner_texts() == ["completed"]
    assert "tokens" in run.locator(".run-head").inner_text()
    page.locator("#thread-downloads").wait_for(state="visible")
    screenshot(page, "web-service-run")

    # A follow-up continues in the same live kernel (`sales` is still defined), with a file of its own.
    page.locator("#follow-up").wait_for(state="visible")
    page.locator("#follow-up-task").fill("How many rows?")
    page.locator("#follow-up-files").set_input_files(
        [{"name": "extra.csv", "mimeType": "text/csv", "buffer": b"a\n1\n"}]
    )
    page.locator("#follow-up-list li", has_text="extra.csv · 4 B").wait_for()
    page.locator("#follow-up-task").press("Control+Enter")
    second = page.locator(".run").nth(1)
    second.locator(".answer").wait_for(state="visible", timeout=TIMEOUT)
    assert second.locator("pre.stdout", has_text="rows 12 4").count() == 1
    assert second.locator(".exec.bad").count() == 0
    # Each turn under its own question, model and times; rounds counted within the turn.
    assert page.locator(".run h2").all_inner_texts() == ["Total the sales amounts.", "How many rows?"]
    assert "model scripted-test-model" in second.locator(".run-meta").inner_text()
    assert second.locator(".round").first.get_attribute("aria-label") == "Round 1 of turn 2"
    assert page.locator("#follow-up-list li").count() == 0  # sent with the question
    assert second.inner_text().count("It has 12 rows.") == 1

    # Downloads: once for the thread (not per turn), each named by the server after the thread: the
    # notebook (every turn), the clean one, the HTML report, the zip with the data; the made file by its name.
    thread = page.evaluate("decodeURIComponent(location.hash.slice('#thread/'.length))")
    links = page.locator("#thread-downloads a")
    assert links.all_inner_texts() == [
        "Notebook (.ipynb)",
        "Clean notebook",
        "HTML report",
        "Notebook with its data (.zip)",
    ]
    assert page.locator(".run .downloads, .run a.download:not(.files-written a)").count() == 0
    saved = {}
    for label, locator in [(label, links.filter(has_text=label)) for label in links.all_inner_texts()] + [
        ("doubled.csv", first.locator(".files-written a", has_text="doubled.csv"))
    ]:
        with page.expect_download() as info:
            locator.click()
        target = tmp_path / "downloads" / info.value.suggested_filename
        info.value.save_as(target)
        saved[label] = target
    assert {label: path.name for label, path in saved.items()} == {
        "Notebook (.ipynb)": f"{thread}.ipynb",
        "Clean notebook": f"{thread}.clean.ipynb",
        "HTML report": f"{thread}.html",
        "Notebook with its data (.zip)": f"{thread}.zip",
        "doubled.csv": "doubled.csv",
    }
    with zipfile.ZipFile(saved["Notebook with its data (.zip)"]) as bundle:
        assert f"{thread}/sales.csv" in bundle.namelist() and f"{thread}/extra.csv" in bundle.namelist()
    notebook = nbformat.read(saved["Notebook (.ipynb)"], as_version=4)
    sources = "\n".join(cell.source for cell in notebook.cells)
    assert "pd.read_csv('sales.csv')" in sources and "len(sales)" in sources
    nbformat.validate(nbformat.read(saved["Clean notebook"], as_version=4))
    report = saved["HTML report"].read_text(encoding="utf-8")
    assert "<html" in report.lower() and "Total the sales amounts." in report
    assert saved["doubled.csv"].read_text(encoding="utf-8").splitlines()[1] == "1,10,20"

    # Past analyses: listed, found by task text, reopened with their runs replayed from events.
    page.locator("#new-analysis").click()
    page.locator("#new-run").wait_for(state="visible")
    threads = page.locator("#threads li")
    threads.first.wait_for()
    page.locator("#search").fill("sales amounts")
    assert threads.count() == 1
    page.locator("#search").fill("no such analysis")
    assert threads.count() == 0
    page.locator("#search").fill("")
    page.locator("#threads button", has_text="Total the sales amounts.").click()
    page.locator(".run .answer").first.wait_for(state="visible", timeout=TIMEOUT)
    assert page.locator(".run").count() == 2
    assert page.locator(".run").first.locator(".output img").count() == 1
    assert page.locator(".run h2").all_inner_texts() == ["Total the sales amounts.", "How many rows?"]
    # Opened after it finished, a run shows its recorded duration, not the time since the page looked.
    record = page.evaluate("id => KA.api.run(id)", page.locator(".run").first.get_attribute("data-run-id"))
    assert record["elapsed_s"] > 0.5
    elapsed = page.locator(".run").first.locator(".elapsed")
    elapsed.filter(has_text=page.evaluate("s => KA.render.seconds(s)", record["elapsed_s"])).wait_for()
    assert page.locator(".run").first.locator(".started").inner_text().startswith("started ")

    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")  # phone width
    screenshot(page, "web-service-phone")
    no_problems(page)


AT_BOTTOM = "() => { const s = document.scrollingElement; return s.scrollHeight - s.scrollTop - s.clientHeight <= 48; }"
LONG_TASK = "Follow the printing of many numbered lines and then say how many lines were printed in all, " * 4


def held(gate: threading.Event, reply: Reply) -> Any:
    """A scripted reply that waits for the test to open ``gate``: the model "thinks" until the page is ready."""

    def entry(body: dict[str, Any]) -> Reply:
        assert gate.wait(TIMEOUT / 1000), "the test never let the model answer"
        return reply

    return entry


def test_the_page_follows_the_live_round_until_the_reader_scrolls_away(
    page: Any, service: ServiceServer, model: OpenAIServer
) -> None:
    lines = "for i in range(24):\n    print('line', i)"
    gates = [threading.Event() for _ in range(3)]
    model.add(
        Reply("Printing.", tool_calls=(python_call(lines),)),
        held(gates[0], Reply("Printing more.", tool_calls=(python_call(lines),))),
        held(gates[1], Reply("And more.", tool_calls=(python_call(lines),))),
        held(gates[2], Reply("72 lines.")),
    )
    page.set_viewport_size({"width": 1100, "height": 600})
    page.goto(service.url + "/")
    page.locator("#key-input").fill(KEY)
    page.locator("#key-input").press("Enter")
    page.locator("#task").fill(LONG_TASK.strip())
    page.locator("#start").click()
    run = page.locator(".run").first
    rounds = run.locator(".round")
    try:
        # A long question has a line of its own, three lines at most until pressed; the status sits below it.
        title, head = run.locator(".run-head h2"), run.locator(".run-head")
        assert title.get_attribute("title") == LONG_TASK.strip()
        assert abs(title.bounding_box()["width"] - head.bounding_box()["width"]) < 2
        assert run.locator(".status").bounding_box()["y"] >= title.bounding_box()["y"] + title.bounding_box()["height"]
        assert title.evaluate("h => h.scrollHeight > h.clientHeight")  # clamped, ellipsis at the third line
        title.click()
        assert title.evaluate("h => h.scrollHeight <= h.clientHeight + 1")

        # Round 1 ran and round 2 waits for the model: the page has followed them down.
        rounds.nth(1).wait_for(timeout=TIMEOUT)
        rounds.nth(0).locator(".exec.ok").wait_for()
        page.wait_for_function(AT_BOTTOM)
        assert page.evaluate("window.scrollY") > 0

        # The reader scrolls up to read round 1: round 2 runs and round 3 comes, and the page stays put.
        page.mouse.move(600, 300)
        page.mouse.wheel(0, -300)
        page.wait_for_function(f"() => !({AT_BOTTOM})()")
        read_at = page.evaluate("window.scrollY")
        gates[0].set()
        rounds.nth(2).wait_for(timeout=TIMEOUT)
        rounds.nth(1).locator(".exec.ok").wait_for(timeout=TIMEOUT)
        assert page.evaluate("window.scrollY") <= read_at
        assert rounds.nth(2).bounding_box()["y"] > 600  # the newest round is below the fold: not followed

        # Back at the bottom, the page follows again.
        page.mouse.wheel(0, 100_000)
        page.wait_for_function(AT_BOTTOM)
        gates[1].set()
        rounds.nth(3).wait_for(timeout=TIMEOUT)
        rounds.nth(2).locator(".exec.ok").wait_for(timeout=TIMEOUT)
        page.wait_for_function(AT_BOTTOM)
        assert rounds.nth(3).bounding_box()["y"] < 600
    finally:
        for gate in gates:
            gate.set()
    run.locator(".status.completed").wait_for(timeout=TIMEOUT)
    assert run.inner_text().count("72 lines.") == 1
    # Followed to its end, the page lands on the answer (issue 49: it stayed at the last round, far below it),
    answer = run.locator(".answer")
    page.wait_for_function("() => Math.abs(document.querySelector('.run .answer').getBoundingClientRect().top) < 2")
    assert answer.bounding_box()["y"] < 600
    # and the list of analyses is still beside it, not scrolled away with the page.
    sidebar = page.locator(".sidebar").bounding_box()
    assert page.evaluate("window.scrollY") > 0 and sidebar["y"] <= 0 < sidebar["y"] + sidebar["height"]
    assert page.locator("#new-analysis").bounding_box()["y"] >= 0  # in view, where the reader is
    no_problems(page)


def test_cancel_interrupts_the_running_code(page: Any, service: ServiceServer, model: OpenAIServer) -> None:
    code = "import time\nprint('still working', flush=True)\ntime.sleep(120)"
    model.add(Reply("This will take a while.", tool_calls=(python_call(code),)))
    page.goto(service.url + "/")
    page.locator("#key-input").fill(KEY)
    page.locator("#key-form button[type=submit]").click()
    dropped = page.evaluate_handle(
        "() => { const dt = new DataTransfer();"
        " dt.items.add(new File(['a,b\\n1,2\\n'], 'dropped.csv', {type: 'text/csv'})); return dt; }"
    )
    page.dispatch_event("#drop-zone", "drop", {"dataTransfer": dropped})  # drag and drop, as a file manager does
    page.locator("#file-list li", has_text="dropped.csv · 8 B").wait_for()
    page.locator("#task").fill("Wait for a long time.")
    page.locator("#start").click()

    run = page.locator(".run").first
    listed = page.locator("#threads li", has_text="Wait for a long time.")
    listed.and_(page.locator("li[data-status=running]")).wait_for()  # in the history while it runs
    running = run.locator(".exec.running")
    running.wait_for(timeout=TIMEOUT)
    assert running.inner_text().startswith("running…")  # the clock while code runs
    run.locator("pre.live-output", has_text="still working").wait_for(timeout=TIMEOUT)  # its output so far
    run.get_by_role("button", name="Cancel").click()
    run.locator(".status.cancelled").wait_for(timeout=30_000)
    assert run.get_by_role("button", name="Cancel").is_hidden()
    assert run.locator(".status").all_inner_texts() == ["cancelled"] and run.locator(".problem").is_hidden()
    listed.and_(page.locator("li[data-status=cancelled]")).wait_for()  # and its state changes there live
    record = page.evaluate("id => KA.api.run(id)", run.get_attribute("data-run-id"))
    assert record["status"] == "cancelled" and len(record["file_ids"]) == 1
    no_problems(page)


def test_a_wrong_key_asks_again_without_console_errors(page: Any, service: ServiceServer) -> None:
    page.goto(service.url + "/")
    page.locator("#key-input").fill("not-the-key")
    assert page.locator("#key-refused").is_hidden()  # nothing was refused yet
    page.locator("#key-input").press("Enter")
    page.locator("#key-refused").wait_for(state="visible")  # the form was up all along: wait for the verdict
    assert page.locator("#key-form").is_visible()
    assert page.evaluate("sessionStorage.getItem('kernel-agent-key')") is None
    info = json.loads(page.evaluate("fetch('/v1/info').then(r => r.text())"))
    assert info["auth"] is True
    page.log.console_errors[:] = [e for e in page.log.console_errors if "401" not in e]  # Chrome logs every 401
    no_problems(page)


def test_a_bad_drop_is_refused_with_its_reason_before_start(page: Any, service: ServiceServer) -> None:
    page.goto(service.url + "/")
    page.locator("#key-input").fill(KEY)
    page.locator("#key-input").press("Enter")
    page.locator("#new-run").wait_for(state="visible")
    dropped = page.evaluate_handle(
        "limit => { const dt = new DataTransfer();"
        " dt.items.add(new File([], 'empty.csv', {type: 'text/csv'}));"
        " dt.items.add(new File([new Uint8Array(limit + 1)], 'big.csv', {type: 'text/csv'}));"
        " dt.items.add(new File([new Uint8Array([37, 80, 68, 70, 0, 1])], 'scan.pdf', {type: 'application/pdf'}));"
        " dt.items.add(new File(['a,b\\n1,2\\n'], 'good.csv', {type: 'text/csv'})); return dt; }",
        UPLOAD_LIMIT,
    )
    page.dispatch_event("#drop-zone", "drop", {"dataTransfer": dropped})
    refused = page.locator("#file-list li.refused")
    refused.filter(has_text="empty.csv").filter(has_text="refused: the file is empty").wait_for()
    refused.filter(has_text="big.csv").filter(has_text="larger than this server's 256.0 KB upload limit").wait_for()
    refused.filter(has_text="scan.pdf").filter(has_text="a binary .pdf file").wait_for()
    page.locator("#file-list li:not(.refused)", has_text="good.csv · 8 B").wait_for()
    uploads = [url for url in page.log.requests if url.endswith("/v1/files")]
    assert len(uploads) == 1  # only the good file went to the server
    assert page.locator("#start").is_enabled()
    screenshot(page, "web-service-refused-drops")
    page.get_by_role("button", name="Remove empty.csv").click()
    assert refused.count() == 2
    no_problems(page)


def test_a_failed_run_shows_one_status_one_message_and_the_models_line_first(
    page: Any, service: ServiceServer, model: OpenAIServer
) -> None:
    code = "sales = pd.DataFrame({'month': [1, 2], 'amount': [10, 20]})\nsales['profit']"
    model.add(Reply("Look at **profit**.", tool_calls=(python_call(code),)), context_length_error())
    page.goto(service.url + "/")
    page.locator("#key-input").fill(KEY)
    page.locator("#key-input").press("Enter")
    page.locator("#task").fill("What is the profit?")
    page.locator("#start").click()
    run = page.locator(".run").first
    run.locator(".status.failed").wait_for(timeout=TIMEOUT)
    assert run.locator(".status").all_inner_texts() == ["failed"]
    failure = run.locator(".problem")
    assert failure.count() == 1 and "maximum context length is 8192 tokens" in failure.inner_text()
    assert run.inner_text().count("maximum context length is 8192 tokens") == 1
    assert failure.inner_text().splitlines()[0] == "Stopped: the model endpoint failed after 1 round(s)."
    lead = run.locator("pre.traceback-lead")
    assert lead.inner_text().startswith("Cell In[") and "----> 2 sales['profit']" in lead.inner_text()
    assert lead.inner_text().splitlines()[-1] == "KeyError: 'profit'"
    assert "site-packages" not in lead.inner_text()
    unfold = run.get_by_role(
        "button", name=re.compile(r"Show the whole traceback \(\d+ frames inside installed packages\)")
    )
    assert run.locator("pre.traceback-full").is_hidden()
    unfold.click()
    assert "pandas/core/frame.py" in run.locator("pre.traceback-full").inner_text()
    screenshot(page, "web-service-failed")
    page.locator("#threads li[data-status=failed]", has_text="What is the profit?").wait_for()
    no_problems(page)


@pytest.fixture
def demo_server(tmp_path: Path) -> Iterator[str]:
    """``kernel-agent serve --demo`` as a user starts it: its own process, no model, no key, on loopback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "KERNEL_AGENT_"))}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kernel_agent.cli",
            "serve",
            "--demo",
            "--port",
            "0",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{listening_port(process)}"  # the OS picked it: it stays this server's
        deadline = time.monotonic() + 60
        while True:  # up when it answers: the readiness of another process, not a pause
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "serve --demo did not start"
                time.sleep(0.2)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)  # uvicorn's lifespan shuts the thread kernels down
        try:
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            if process.stderr:
                process.stderr.close()


def test_serve_demo_runs_end_to_end_from_the_page(page: Any, demo_server: str) -> None:
    page.goto(demo_server + "/")
    page.locator("#new-run").wait_for(state="visible")  # no key asked on loopback
    note = page.locator("#demo-note")
    assert note.is_visible() and "replies are scripted" in note.inner_text()
    page.locator("#file-list li:not(.refused)", has_text="sales.csv").wait_for(timeout=TIMEOUT)  # the bundled data
    assert page.locator("#task").input_value().startswith("Analyse sales.csv")
    page.locator("#start").click()
    run = page.locator(".run").first
    run.locator(".answer").wait_for(state="visible", timeout=4 * TIMEOUT)
    assert run.locator(".status").all_inner_texts() == ["completed"]
    assert "scripted replies" in run.locator(".run-meta").inner_text()
    assert run.locator(".round").count() >= 5 and run.locator(".output img").count() >= 3
    reasoning = run.locator(".reasoning").all_inner_texts()
    assert not any("<Analyze>" in text or "<Code>" in text for text in reasoning)
    assert run.locator(".problem").is_hidden()
    screenshot(page, "web-serve-demo")
    no_problems(page)


def test_serve_demo_says_on_the_run_that_it_ignores_the_users_task_and_file(page: Any, demo_server: str) -> None:
    page.goto(demo_server + "/")
    page.locator("#file-list li:not(.refused)", has_text="sales.csv").wait_for(timeout=TIMEOUT)
    page.locator("#file-input").set_input_files([{"name": "mine.csv", "mimeType": "text/csv", "buffer": b"a\n1\n"}])
    page.locator("#file-list li:not(.refused)", has_text="mine.csv").wait_for()
    page.locator("#task").fill("What is in my own file?")
    page.locator("#start").click()
    run = page.locator(".run").first
    notice = run.locator(".note", has_text="Demo server: this run ignores your question and your file mine.csv")
    notice.wait_for(timeout=TIMEOUT)
    assert "replies are scripted for the bundled sales.csv" in notice.inner_text()
    run.locator(".answer").wait_for(state="visible", timeout=4 * TIMEOUT)  # the bundled sales.csv was on the form
    assert notice.bounding_box()["y"] < run.locator(".answer").bounding_box()["y"]  # read first, above the answer
    refused = page.locator("#follow-up-refused")  # the script has no reply for a follow-up: said, not played
    refused.wait_for(state="visible", timeout=TIMEOUT)
    assert "takes no follow-up" in refused.inner_text() and page.locator("#follow-up").is_hidden()
    screenshot(page, "web-serve-demo-own-task")
    no_problems(page)
