"""An eval run's report.html in real chromium: its plots drawn, every question's notebook linked and
reachable, and a hostile answer shown as text that never runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from browser import screenshot

from kernel_agent.eval import write_report
from kernel_agent.eval.results import append_result, read_results

pytestmark = pytest.mark.browser

_HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">@answer[1]'


def _row(
    qid: str, outcome: str, level: str, concepts: list[str], correct: dict[str, bool], **extra: Any
) -> dict[str, Any]:
    scored = outcome in ("correct", "wrong", "no_answer", "format")
    return {
        "id": qid, "level": level, "concepts": concepts, "outcome": outcome, "scored": scored,
        "expected": {k: "1.00" for k in correct}, "correct": correct, "parsed": {}, "why": {},
        "raw_answer": "@a[1.00]", "rounds": 3, "tokens": {"total_tokens": 900}, "seconds": 4.0,
        "model_seconds": 2.5, "code_seconds": 0.5, "stop_reason": "answer", "errors": [], "error": None,
        "notebook": f"questions/{qid}/notebook.ipynb", **extra,
    }  # fmt: skip


def test_the_report_draws_its_plots_links_every_notebook_and_runs_nothing_from_an_answer(
    page: Any, tmp_path: Path
) -> None:
    rows = [
        _row("0", "correct", "easy", ["Summary Statistics"], {"a": True}),
        _row("1", "wrong", "medium", ["Correlation Analysis"], {"a": True, "b": False}, raw_answer=_HOSTILE,
             why={"b": "not in the answer"}),
        _row("2", "format", "hard", ["Machine Learning", "Summary Statistics"], {"a": False}),
        _row("3", "timeout", "easy", ["Outlier Detection"], {"a": False}, error="the model did not reply in time"),
    ]  # fmt: skip
    for row in rows:
        append_result(tmp_path, row)
        notebook = tmp_path / row["notebook"]
        notebook.parent.mkdir(parents=True)
        notebook.write_text("{}")
    report = write_report(tmp_path, read_results(tmp_path), "suite · <b>model</b>")
    page.goto(report.as_uri())

    assert page.title() == "suite · <b>model</b>"
    assert page.locator("svg.plot").count() == 5
    labels = page.eval_on_selector_all("svg.plot", "svgs => svgs.map(s => s.getAttribute('aria-label'))")
    assert labels[:3] == ["accuracy by level", "accuracy by concept", "failure kinds"]
    widths = page.eval_on_selector_all("svg.plot rect.bar", "bars => bars.map(b => b.getBBox().width)")
    assert len(widths) > 10 and max(widths) > 100  # drawn, and to scale
    assert "33.33% (1/3)" in page.locator("#overview").inner_text()  # the timeout is not scored
    links = page.eval_on_selector_all("a.notebook", "links => links.map(a => a.href)")
    assert len(links) == 4
    for link in links:
        assert Path(link.removeprefix("file://")).is_file(), link
    assert page.locator("pre", has_text="<script>window.pwned = 1</script>").count() == 1
    assert page.evaluate("window.pwned") is None
    assert page.locator("table.questions img, table.questions script").count() == 0
    assert page.log.page_errors == [] and page.log.external() == []
    screenshot(page, "eval-report")


def test_the_answer_column_shows_an_answers_underscores(page: Any, tmp_path: Path) -> None:
    # A scrolling box clips the ink below its last line box: an underscore there vanished
    # ("@top region[West]"). An answer of underscores alone is blank when clipped, dark when shown.
    rows = [_row("0", "correct", "easy", [], {"a": True}, raw_answer="________")]
    page.goto(write_report(tmp_path, rows, "t").as_uri())
    answer = page.locator("table.questions pre")
    assert answer.inner_text() == "________"
    from io import BytesIO

    from PIL import Image

    shot = Image.open(BytesIO(answer.screenshot())).convert("L")
    darkest = shot.getextrema()[0]  # a grey image's (min, max)
    assert isinstance(darkest, (int, float)) and darkest < 128, "the answer's underscores are clipped"
