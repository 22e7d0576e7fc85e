"""``kernel_agent.eval`` without kernels: suites in both layouts, answer parsing and the comparison rules,
the official metrics, the results file (torn last line), compare, and the report's escaping."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from evalsuite import DABENCH, GENERIC, write_dabench, write_generic

from kernel_agent.cli import cli
from kernel_agent.errors import ConfigError
from kernel_agent.eval import (
    Label,
    compare,
    load_suite,
    metrics,
    parse_answers,
    read_results,
    render_report,
    score,
    summarize,
)
from kernel_agent.eval.results import append_result
from kernel_agent.eval.runner import question_folder


def test_the_dabench_layout_is_found_by_its_names_and_the_task_is_question_constraints_and_format(
    tmp_path: Path,
) -> None:
    suite = load_suite(write_dabench(tmp_path / "dabench"))
    assert suite.layout == "dabench" and [q.id for q in suite.questions] == [c.id for c in DABENCH]
    first = suite.questions[0]
    assert first.task.startswith("What is the mean of x? (case 0)")
    assert (
        "Constraints: Use pandas." in first.task and "Answer format: @mean_x[mean] rounded to 4 decimals." in first.task
    )
    assert first.data == (tmp_path / "dabench" / "da-dev-tables" / "t1.csv",)
    assert first.level == "easy" and first.concepts == ("Summary Statistics",)
    assert suite.labels["1"] == (Label("corr", "0.9731", "dabench"), Label("kind", "quasilinear", "dabench"))
    assert not any(value in q.task for q in suite.questions for value in ("41.0873", "0.9731", "quasilinear"))
    assert [q.id for q in suite.select(("5", "1"))] == ["1", "5"] and len(suite.select(limit=2)) == 2
    with pytest.raises(ConfigError, match="no question 99"):
        suite.select(("99",))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="DABench"):
        load_suite(tmp_path / "empty")


def test_the_generic_layout_reads_rules_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    suite = load_suite(write_generic(tmp_path / "g"))
    assert suite.layout == "jsonl" and [q.id for q in suite.questions] == [c.id for c in GENERIC]
    assert suite.labels["g1"] == (Label("pi", "3.14", "numeric", None, "label"),)
    assert suite.labels["g3"][0].tolerance == 0.5
    assert suite.questions[0].data == (tmp_path / "g" / "tables" / "t1.csv",)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"id": "x", "task": "t", "answers": [{"name": "a", "value": "1", "rule": "fuzzy"}]}) + "\n"
    )
    with pytest.raises(ConfigError, match="fuzzy"):
        load_suite(bad)
    bad.write_text(json.dumps({"id": "x", "task": "t", "answers": []}) + "\n")
    with pytest.raises(ConfigError, match="no answers"):
        load_suite(bad)


def test_answers_are_parsed_and_compared_as_the_suite_says() -> None:
    assert parse_answers("@a[1] text @b[two words]\n@a[3]") == {"a": "3", "b": "two words"}
    assert parse_answers("@x[[1, 2]]") == {"x": "[1, 2"}  # DABench's own reading: the shortest text up to ]
    dab = (Label("m", "2.50", "dabench"), Label("k", "Yes", "dabench"))
    assert score("@m[2.5000001] @k[Yes]", dab).verdict == "correct"
    wrong = score("@m[2.51] @k[yes]", dab)
    assert wrong.verdict == "wrong" and wrong.correct == {"m": False, "k": False}
    assert "0.01" in wrong.why["m"] and "'yes' is not 'Yes'" in wrong.why["k"]
    assert score("It is 2.5", dab).verdict == "format" and score(None, dab).verdict == "no_answer"
    half = score("@m[2.50]", dab)
    assert half.correct == {"m": True, "k": False} and half.why == {"k": "not in the answer"}
    assert score("@p[3.1416]", [Label("p", "3.14", "numeric", precision="label")]).verdict == "correct"
    assert score("@p[3.146]", [Label("p", "3.14", "numeric", precision="label")]).verdict == "wrong"
    assert score("@n[10.4]", [Label("n", "10", "numeric", tolerance=0.5)]).verdict == "correct"
    assert score("@n[10.6]", [Label("n", "10", "numeric", tolerance=0.5)]).verdict == "wrong"
    assert score("@n[ten]", [Label("n", "10", "numeric")]).verdict == "wrong"
    assert score("@w[ ZEBRA ]", [Label("w", "zebra", "case-insensitive")]).verdict == "correct"
    assert score("@w[Zebra]", [Label("w", "zebra", "exact")]).verdict == "wrong"


def test_the_official_metrics() -> None:
    m = metrics([{"a": True}, {"a": True, "b": False}, {"a": False}, {"a": True, "b": True}])
    assert (m.questions, m.questions_correct, m.sub_answers, m.sub_answers_correct) == (4, 2, 6, 4)
    assert m.by_question == 0.5 and m.by_sub_answer == 4 / 6 and m.proportional == (1 + 0.5 + 0 + 1) / 4


def _row(qid: str, outcome: str, correct: dict[str, bool], **extra: object) -> dict[str, object]:
    return {
        "id": qid,
        "level": "easy",
        "concepts": ["C"],
        "outcome": outcome,
        "scored": outcome in ("correct", "wrong", "no_answer", "format"),
        "correct": correct,
        "expected": {k: "1" for k in correct},
        "parsed": {},
        "why": {},
        "raw_answer": None,
        "rounds": 1,
        "seconds": 1.0,
        "model_seconds": 0.5,
        "code_seconds": 0.2,
        "errors": [],
        "error": None,
        "notebook": f"questions/{qid}/notebook.ipynb",
        **extra,
    }


def test_a_torn_last_line_is_dropped_and_machinery_failures_are_never_scored(tmp_path: Path) -> None:
    append_result(tmp_path, _row("1", "correct", {"a": True}))
    append_result(tmp_path, _row("2", "timeout", {"a": False}))
    with (tmp_path / "results.jsonl").open("a") as file:
        file.write('{"id": "3", "outc')  # killed mid-write
    assert [r["id"] for r in read_results(tmp_path)] == ["1", "2"]
    assert (tmp_path / "results.jsonl").read_text().endswith('"outc')  # a reader never cuts a line being written
    rows = read_results(tmp_path, repair=True)
    assert [r["id"] for r in rows] == ["1", "2"]
    append_result(tmp_path, _row("3", "wrong", {"a": False}))
    rows = read_results(tmp_path)
    assert [r["id"] for r in rows] == ["1", "2", "3"]
    append_result(tmp_path, _row("2", "correct", {"a": True}))  # run again (--retry-failed): the last line counts
    assert [(r["id"], r["outcome"]) for r in read_results(tmp_path)] == [
        ("1", "correct"),
        ("3", "wrong"),
        ("2", "correct"),
    ]
    summary = summarize(rows)
    assert summary.overall.questions == 2 and summary.overall.by_question == 0.5 and summary.unscored == 1
    assert summary.outcomes["timeout"] == 1 and summary.by_concept["C"].questions == 2


def test_compare_names_the_flipped_questions_and_the_metric_differences(tmp_path: Path) -> None:
    a = [
        _row("1", "correct", {"a": True}),
        _row("2", "wrong", {"a": False}),
        _row("3", "format", {"a": False}),
        _row("4", "correct", {"a": True}),
    ]
    b = [
        _row("1", "wrong", {"a": False}),
        _row("2", "correct", {"a": True}),
        _row("3", "no_answer", {"a": False}),
        _row("4", "correct", {"a": True}),
        _row("5", "correct", {"a": True}),
    ]
    result = compare(a, b)
    assert result.fixed == ("2",) and result.broke == ("1",) and result.changed == (("3", "format", "no_answer"),)
    assert result.only_b == ("5",) and result.differences()["accuracy_by_question"] == 0.0
    for name, rows in (("A", a), ("B", b)):
        (tmp_path / name).mkdir()
        for row in rows:
            append_result(tmp_path / name, row)
    shown = CliRunner().invoke(cli, ["eval", "compare", str(tmp_path / "A"), str(tmp_path / "B" / "results.jsonl")])
    assert shown.exit_code == 0, shown.output
    assert "fixed in B (1): 2" in shown.output and "broken in B (1): 1" in shown.output
    assert "changed: 3 format → no_answer" in shown.output and "only in A: 0, only in B: 1" in shown.output
    assert "accuracy_by_question: 50.00% → 50.00% (+0.00%)" in shown.output
    missing = CliRunner().invoke(cli, ["eval", "compare", str(tmp_path / "A"), str(tmp_path / "nothing")])
    assert missing.exit_code == 2 and "no eval results in" in missing.output


def test_compare_of_runs_with_no_question_in_common_says_so_and_shows_each_runs_own_metrics(tmp_path: Path) -> None:
    runs = {
        "A": [_row("1", "wrong", {"a": False}), _row("2", "timeout", {"a": False})],
        "B": [_row("3", "correct", {"a": True}), _row("2", "correct", {"a": True})],
    }
    for name, rows in runs.items():
        (tmp_path / name).mkdir()
        for row in rows:
            append_result(tmp_path / name, row)
    result = compare(runs["A"], runs["B"])
    assert result.shared == () and result.b_own is not None and result.b_own.by_question == 1.0
    shown = CliRunner().invoke(cli, ["eval", "compare", str(tmp_path / "A"), str(tmp_path / "B")])
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines() == [
        "nothing to compare: A and B scored no question in common (only in A: 1, only in B: 1)",
        "A on its own: accuracy by question 0.00% (0/1), by sub-answer 0.00% (0/1), proportional 0.00%",
        "B on its own: accuracy by question 100.00% (2/2), by sub-answer 100.00% (2/2), proportional 100.00%",
    ]  # never "0.00% → 0.00%"


def test_a_name_the_labels_repeat_is_shown_with_every_value_and_scored_as_dabench_scores_it(tmp_path: Path) -> None:
    from kernel_agent.eval.runner import _expected

    labels = tuple(Label("outlier", v, "dabench") for v in ("12", "15", "40")) + (Label("count", "3", "dabench"),)
    assert _expected(labels) == {"outlier": "12, 15, 40 (scored against the last, as DABench scores)", "count": "3"}
    # DABench's script keeps a name's last label and the answer's last value: "40" against "40" is right.
    right = score("@outlier[12] @outlier[15] @outlier[40] @count[3]", labels)
    assert right.verdict == "correct" and right.correct == {"outlier": True, "count": True}
    wrong = score("@outlier[40] @outlier[12] @count[3]", labels)
    assert wrong.correct == {"outlier": False, "count": True} and wrong.why == {"outlier": "|12 - 40| = 28 > 1e-06"}
    page = render_report([_row("734", "correct", {"outlier": True}, expected=_expected(labels))], "t")
    assert "expected 12, 15, 40 (scored against the last, as DABench scores)" in page


def test_the_report_escapes_everything_it_did_not_write() -> None:
    hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    row = _row(hostile, "wrong", {hostile: False}, raw_answer=hostile, errors=[hostile], concepts=[hostile])
    row["notebook"] = 'questions/"><script>x</script>/notebook.ipynb'
    page = render_report([row], hostile)
    tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            tags.append((tag, attrs))

    Tags().feed(page)
    assert not [t for t, _ in tags if t in ("script", "img", "iframe", "object")]
    assert not [name for _, attrs in tags for name, _ in attrs if name.startswith("on")]
    assert all(v is None or not v.startswith(("javascript:", '"')) for _, attrs in tags for _, v in attrs)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "Content-Security-Policy" in page and "script-src" not in page  # default-src 'none' forbids scripts
    assert question_folder("../x/y") != "../x/y" and "/" not in question_folder("../x/y")
    assert question_folder("17") == "17"
