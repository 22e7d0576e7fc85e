"""Issue 48 in ``eval``: someone else's ``--out`` folder, a hostile suite and someone else's ``results.jsonl``
are data. Planted links, a dangling link, a FIFO and a hard link never lead the host (often root) to
write, truncate, delete or read anything outside; a suite's data paths are plain claims; an ``--out``
inside the tree bound into every kernel is refused; what a results file says reaches the terminal
escaped and the report as text; any id sorts. No kernel: every refusal comes before one would start."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from evalsuite import DABENCH, write_dabench, write_generic

from kernel_agent.cli import cli
from kernel_agent.errors import ConfigError
from kernel_agent.eval import load_suite, read_results, render_report
from kernel_agent.eval.report import notebook_link
from kernel_agent.eval.results import append_result, id_order
from kernel_agent.eval.runner import _StagedData, check_out_of_kernels, question_folder
from kernel_agent.kernel.sandbox import bwrap

OSC52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"
SECRET = "HOST-SECRET-zq81\n"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A folder outside every run, holding a file the host must never touch."""
    folder = tmp_path / "victim"
    folder.mkdir()
    (folder / "secret.txt").write_text(SECRET)
    (folder / "0").mkdir()
    (folder / "0" / "keep.txt").write_text(SECRET)
    return folder


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"" for p in sorted(folder.rglob("*"))}


def row(qid: str, outcome: str = "correct", **extra: Any) -> dict[str, Any]:
    return {
        "id": qid,
        "level": "easy",
        "concepts": ["C"],
        "outcome": outcome,
        "scored": outcome in ("correct", "wrong"),
        "correct": {"a": outcome == "correct"},
        "expected": {"a": "1"},
        "parsed": {},
        "why": {},
        "raw_answer": None,
        "rounds": 1,
        "seconds": 1.0,
        "errors": [],
        "error": None,
        "notebook": f"questions/{question_folder(qid)}/notebook.ipynb",
        **extra,
    }


def claimed(out: Path, suite: str = "dabench", layout: str = "dabench") -> Path:
    """``out`` as a run of ``suite`` with the model ``m`` (what ``eval`` writes first)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps({"suite": suite, "layout": layout, "model": "m"}))
    return out


def run(suite: Path, out: Path | None, *extra: str) -> Result:
    args = ["eval", str(suite), "--model", "m", "--base-url", "http://127.0.0.1:9/v1"]
    return CliRunner().invoke(cli, [*args, *(["--out", str(out)] if out else []), *extra])


# --- 4: someone else's --out folder -------------------------------------------------------------------


def test_a_results_file_linked_to_a_victim_is_neither_truncated_nor_appended_to(tmp_path: Path, victim: Path) -> None:
    suite = write_dabench(tmp_path / "dabench")
    (victim / "secret.txt").write_text(SECRET + '{"id": "torn')  # a "torn last line" resume would cut
    before = listing(victim)
    out = claimed(tmp_path / "out")
    (out / "results.jsonl").symlink_to(victim / "secret.txt")
    result = run(suite, out)
    assert result.exit_code == 2 and "results.jsonl" in result.output and "link" in result.output
    assert listing(victim) == before
    with pytest.raises(ConfigError, match="results.jsonl"):
        append_result(out, row("0"))
    with pytest.raises(ConfigError, match="results.jsonl"):
        read_results(out, repair=True)
    assert listing(victim) == before


def test_a_linked_report_is_replaced_never_written_through(tmp_path: Path, victim: Path) -> None:
    suite = write_dabench(tmp_path / "dabench")
    before = listing(victim)
    out = claimed(tmp_path / "out")
    for case in DABENCH:  # every question done: no kernel starts, the report is written
        append_result(out, row(case.id))
    (out / "report.html").symlink_to(victim / "secret.txt")
    result = run(suite, out)
    assert result.exit_code == 0, result.output
    assert listing(victim) == before
    assert not (out / "report.html").is_symlink() and "<html" in (out / "report.html").read_text()


def test_a_questions_link_and_a_dangling_manifest_lead_nowhere(tmp_path: Path, victim: Path) -> None:
    suite = write_dabench(tmp_path / "dabench")
    before = listing(victim)
    out = claimed(tmp_path / "out")
    (out / "questions").symlink_to(victim)
    result = run(suite, out)
    assert result.exit_code == 2 and "questions" in result.output and "link" in result.output
    assert listing(victim) == before

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "eval.json").symlink_to(victim / "made-by-eval.json")  # dangling: a plain write creates its target
    result = run(suite, fresh)
    assert result.exit_code == 2 and "eval.json" in result.output
    assert listing(victim) == before and not (victim / "made-by-eval.json").exists()


@pytest.mark.timeout(60)
def test_a_fifo_results_file_is_refused_at_once(tmp_path: Path) -> None:
    suite = write_dabench(tmp_path / "dabench")
    out = claimed(tmp_path / "out")
    os.mkfifo(out / "results.jsonl")  # open() would wait for a writer forever, past SIGTERM
    command = [sys.executable, "-m", "kernel_agent.cli", "eval", str(suite), "--model", "m"]
    command += ["--base-url", "http://127.0.0.1:9/v1", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=45)
    assert done.returncode == 2, done.stderr
    assert "results.jsonl" in done.stderr and "not a regular file" in done.stderr
    shown = CliRunner().invoke(cli, ["eval", "compare", str(out), str(out)])
    assert shown.exit_code == 2 and "not a regular file" in shown.output


# --- 5: a hostile suite --------------------------------------------------------------------------------


def test_a_suites_data_paths_are_plain_claims(tmp_path: Path, victim: Path) -> None:
    suite = write_dabench(tmp_path / "dabench")
    questions = suite / "da-dev-questions.jsonl"
    lines = questions.read_text().splitlines()
    for claim in ("../da-dev-labels.jsonl", str(victim / "secret.txt"), "sub/t1.csv", ".hidden.csv"):
        first = {**json.loads(lines[0]), "file_name": claim}
        questions.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
        with pytest.raises(ConfigError, match="claims the data file"):
            load_suite(suite)
        result = run(suite, tmp_path / "out")
        assert result.exit_code == 2 and "claims the data file" in result.output
        assert "HOST-SECRET" not in result.output and "common_answers" not in result.output
    assert not (tmp_path / "out").exists()

    generic = write_generic(tmp_path / "generic")
    text = generic.read_text()
    for claim in ("../victim/secret.txt", str(victim / "secret.txt"), "suite.jsonl", "./suite.jsonl", ".x/a.csv"):
        generic.write_text(text.replace('"tables/t1.csv"', json.dumps(claim), 1))
        with pytest.raises(ConfigError, match=r"claims the data file|suite file itself"):
            load_suite(generic)


def test_a_suite_names_live_sources_by_name_only_and_a_connection_in_it_is_refused(tmp_path: Path) -> None:
    generic = write_generic(tmp_path / "generic")
    lines = [json.loads(line) for line in generic.read_text().splitlines()]
    lines[0]["sources"] = ["shop", "shop", "ware_house2"]
    generic.write_text("".join(json.dumps(line) + "\n" for line in lines))
    suite = load_suite(generic)
    assert suite.questions[0].sources == ("shop", "ware_house2") and suite.questions[1].sources == ()

    # A connection chosen by the suite would be made with the runner's own ~/.pgpass: refused, never shown whole.
    uri = "postgresql://ann:hunter2@evil.example/shop"
    for key, value in (
        ("sources", [uri]),
        ("data", ["host=evil.example dbname=shop password=hunter2"]),
        ("sources", ["shop=" + uri]),
        ("data", [uri]),
        ("data", ["tables/t1.csv", uri]),
    ):
        generic.write_text("".join(json.dumps({**line, key: value}) + "\n" for line in lines))
        with pytest.raises(ConfigError, match=r'by name only \("sources": \["shop"\]\)') as refused:
            load_suite(generic)
        assert "hunter2" not in str(refused.value) and "evil.example" not in str(refused.value)
        result = run(generic, tmp_path / "out")
        assert result.exit_code == 2 and "--data shop=postgresql://" in result.output, result.output
        assert "hunter2" not in result.output
    bad: object
    for bad in ("shop", [1], ["a b"], ["../x"], [""], ["a-b"], ["2x"]):
        generic.write_text("".join(json.dumps({**line, "sources": bad}) + "\n" for line in lines))
        with pytest.raises(ConfigError, match="sources must be a list|is not a name"):
            load_suite(generic)
    assert not (tmp_path / "out").exists()

    # A named source nobody gave: refused before a folder is made or a kernel starts, naming it.
    generic.write_text("".join(json.dumps({**line, "sources": ["shop"]}) + "\n" for line in lines[:2]))
    result = run(generic, tmp_path / "out")
    assert result.exit_code == 2 and "live source shop: give its connection with --data shop=" in result.output
    assert "question g1, g2" in result.output and not (tmp_path / "out").exists()

    # eval --data gives live sources only, each once, never with a password (which is not echoed).
    for given, said in (
        (["tables/t1.csv"], "eval's --data gives the live sources a suite names"),
        (["shop=" + uri], "must not carry a password"),
        (["shop=postgresql://ann@a/x", "shop=postgresql://ann@b/y"], "two --data sources are named 'shop'"),
    ):
        result = run(generic, tmp_path / "out", *[arg for value in given for arg in ("--data", value)])
        assert result.exit_code == 2 and said in result.output and "hunter2" not in result.output, result.output
    assert not (tmp_path / "out").exists()


def test_a_link_fifo_or_labels_in_the_tables_are_refused_before_anything_runs(tmp_path: Path, victim: Path) -> None:
    suite = write_dabench(tmp_path / "dabench")
    tables = suite / "da-dev-tables"
    loaded = load_suite(suite)
    staged = _StagedData.of(loaded, loaded.questions)
    try:
        assert {p.name for p in staged.copies} == {"t1.csv", "t2.csv"}
        assert all(copy.read_text() == path.read_text() for path, copy in staged.copies.items())
    finally:
        staged.remove()
    assert not staged.folder.exists()

    (tables / "t1.csv").unlink()
    for plant in ("link", "fifo", "labels"):
        if (tables / "t1.csv").exists() or (tables / "t1.csv").is_symlink():
            (tables / "t1.csv").unlink()
        if plant == "link":
            (tables / "t1.csv").symlink_to(victim / "secret.txt")
        elif plant == "fifo":
            os.mkfifo(tables / "t1.csv")
        else:
            os.link(suite / "da-dev-labels.jsonl", tables / "t1.csv")
        with pytest.raises(ConfigError, match="t1.csv"):
            _StagedData.of(loaded, loaded.questions)
        result = run(suite, tmp_path / "out")
        assert result.exit_code == 2 and "t1.csv" in result.output, result.output
        assert "HOST-SECRET" not in result.output and not list((tmp_path / "out" / "questions").iterdir())


def test_an_out_folder_inside_the_tree_every_kernel_reads_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = write_dabench(tmp_path / "dabench")
    root = bwrap._PACKAGE_ROOT.parent  # the checkout (or site-packages), on sys.path: bound into every kernel
    tree = bwrap.bound_into_kernels(root / "eval-runs" / "x")
    assert tree is not None and str(root).startswith(tree)
    assert bwrap.bound_into_kernels(tmp_path / "out") is None
    inside = root / "eval-runs" / "issue-48-test"
    result = run(suite, inside)
    assert result.exit_code == 2 and f"inside {tree}" in result.output and "outside it" in result.output
    assert not inside.exists()
    monkeypatch.chdir(root)  # the default ./eval-runs/<suite>-<model> from a checkout: refused, not made
    made_before = (root / "eval-runs").exists()
    result = run(suite, None)
    assert result.exit_code == 2 and "--out" in result.output and "outside it" in result.output
    assert (root / "eval-runs").exists() == made_before
    labels_inside = load_suite(suite)
    labels_inside = type(labels_inside)(**{**labels_inside.__dict__, "records": (root / "labels.jsonl",)})
    with pytest.raises(ConfigError, match="labels"):
        check_out_of_kernels(tmp_path / "out", labels_inside)


# --- 8: someone else's results.jsonl reaches the terminal and the report -------------------------------


def test_what_a_results_file_says_is_printed_escaped_and_never_linked_outside(tmp_path: Path) -> None:
    suite = write_dabench(tmp_path / "dabench")
    out = claimed(tmp_path / "out")
    with (out / "results.jsonl").open("w") as file:
        file.write(json.dumps(row("0", outcome=OSC52)) + "\n")  # not a result line of ours: left out
        file.write(json.dumps({"id": 7, "outcome": "correct"}) + "\n")
        file.write("not json\n")
        for case in DABENCH:
            line = row(case.id, level=OSC52, concepts=[OSC52], notebook="//evil.example/x", error=OSC52)
            file.write(json.dumps(line) + "\n")
    result = run(suite, out)
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output and "␛]52" in result.output
    page = (out / "report.html").read_text()
    assert "\x1b" not in page and "evil.example" in page  # shown as text
    hrefs: list[str | None] = []

    class Links(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            hrefs.extend(value for name, value in attrs if name == "href")

    Links().feed(page)
    assert hrefs == []
    shown = CliRunner().invoke(cli, ["eval", "compare", str(out), str(out)])
    assert shown.exit_code == 0 and "\x1b" not in shown.output
    for bad in ("//evil.example/x", "/etc/passwd", "../x/notebook.ipynb", "https://e.example/x", "a/.git/x", ""):
        assert notebook_link(bad) is None, bad
    assert notebook_link("questions/q 1/notebook.ipynb") == "questions/q%201/notebook.ipynb"
    assert notebook_link("javascript:alert(1)") is None


# --- 9: any id the suite says ---------------------------------------------------------------------------


def test_ids_of_any_kind_sort_naturally_and_report_without_crashing(tmp_path: Path) -> None:
    huge = "7" * 5000  # int() refuses 4,301+ digits
    ids = ["²", "10", "9", "a", huge, "q2", "q10", "٣"]
    assert sorted(ids, key=id_order) == ["٣", "9", "10", huge, "a", "q2", "q10", "²"]  # ٣ is a decimal 3
    page = render_report([row(qid) for qid in ids], "ids")
    assert page.index(">9<") < page.index(">10<") and "²" in page
    assert len(question_folder(huge)) < 100 and "/" not in question_folder("²")

    cases = [{"id": qid, "task": f"t {qid}", "answers": [{"name": "a", "value": "1"}]} for qid in ids]
    folder = tmp_path / "ids"
    folder.mkdir()
    (folder / "ids.jsonl").write_text("".join(json.dumps(case) + "\n" for case in cases))
    out = claimed(tmp_path / "out", suite="ids", layout="jsonl")
    for qid in ids:
        append_result(out, row(qid))
    for _ in range(2):  # and every resume of that folder
        result = run(folder / "ids.jsonl", out)
        assert result.exit_code == 0, result.output
        assert (out / "report.html").is_file() and "accuracy by question" in result.output


def test_a_killed_runs_data_copies_are_swept_and_nothing_else(tmp_path: Path, victim: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    top = Path(tempfile.gettempdir())
    left = top / f"kernel-agent-eval-{pid}-ab12"
    (left / "0").mkdir(parents=True)
    (left / "0" / "t1.csv").write_text("x\n")
    planted = top / f"kernel-agent-eval-{pid}-link"
    planted.symlink_to(victim)
    mine = top / f"kernel-agent-eval-{os.getpid()}-live"
    mine.mkdir()
    try:
        suite = write_dabench(tmp_path / "dabench")
        loaded = load_suite(suite)
        _StagedData.of(loaded, loaded.questions[:1]).remove()
        assert not left.exists() and planted.is_symlink() and mine.is_dir()
        assert listing(victim) == {"0": b"", "0/keep.txt": SECRET.encode(), "secret.txt": SECRET.encode()}
    finally:
        planted.unlink()
        mine.rmdir()
        if left.exists():
            shutil.rmtree(left)
