"""The rebuild plan: what re-running earlier cells restores and which names it loses (pure)."""

from __future__ import annotations

from kernel_agent.kernel.rebuild import RebuildCell, RebuildPlan


def walk(cells: list[RebuildCell], failing: dict[int, str]) -> RebuildPlan:
    plan = RebuildPlan(tuple(cells))
    for cell in cells:
        if plan.should_run(cell):
            plan.record(cell, cell.label not in failing, failing.get(cell.label, ""))
    return plan


def test_a_timed_out_cells_names_are_reported_lost_and_cells_reading_them_skipped() -> None:
    cells = [
        RebuildCell("import time", 0),
        RebuildCell("x = 1", 1),
        RebuildCell("i = 0\nrun = []\nwhile True:\n    i += 1", 2, "timeout"),
        RebuildCell("total = i + x\nprint(run)", 3),
        RebuildCell("y = x * 2", 4),
        RebuildCell("1/0", 5, "error"),
    ]
    report = walk(cells, {}).report()
    assert report.rerun == (0, 1, 4)
    assert report.skipped == ((3, ("i", "run")),)
    assert report.not_rerun == ((2, "timeout"), (5, "error"))
    assert report.missing == ("i", "run", "total")
    assert report.describe() == (
        "re-ran 2 rounds (1, 4) after the setup cell; round 3 was skipped (it reads i, run, now gone); "
        "round 2 was not re-run (it timed out); round 5 was not re-run (it raised an error); "
        "names now missing: i, run, total"
    )


def test_a_failed_rerun_loses_its_names_and_a_later_rebinding_restores_them() -> None:
    cells = [RebuildCell("df = load()", 1), RebuildCell("df = 3\nz = df", 2)]
    report = walk(cells, {1: "NameError: name 'load' is not defined"}).report()
    assert report.rerun == (2,) and report.failed == ((1, "NameError: name 'load' is not defined"),)
    assert report.missing == ()
    assert report.describe().endswith("no names are missing")
