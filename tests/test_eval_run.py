"""``kernel-agent eval`` end to end: real sandboxed kernels from the warm pool, the real openai SDK against
the scripted server, both suite layouts. Metrics exact, labels out of every request, kernel and workspace,
``--concurrency 3`` the same as 1, a SIGKILLed run resumed with each question run to its end once, and the
machinery's failures (timeout, unreachable model, missing data, a dying kernel) recorded as what they are."""

from __future__ import annotations

import asyncio
import html
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from evalsuite import DABENCH, GENERIC, ScriptedAnalyst, entries, label_values, write_dabench, write_generic
from leaks import kernels_of, our_kernel_pids, process_gone
from openai_server import OpenAIServer

from kernel_agent.cli import cli
from kernel_agent.eval import load_suite, read_results, run_eval, summarize
from kernel_agent.kernel.session import sweep_stale_runtime_dirs

pytestmark = pytest.mark.kernel

_SAME = ("id", "level", "concepts", "outcome", "scored", "expected", "correct", "parsed", "why", "raw_answer", "rounds")


def _eval(suite: Path, out: Path, server: OpenAIServer, *extra: str) -> Any:
    args = [
        "eval",
        str(suite),
        "--model",
        "m",
        "--base-url",
        server.base_url,
        "--request-timeout",
        "1",
        "--out",
        str(out),
    ]
    return CliRunner().invoke(cli, [*args, *extra], catch_exceptions=False)


def _lines(out: Path) -> list[dict[str, Any]]:
    """Every line of the results file, as written (``read_results`` keeps only each question's last)."""
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def _by_id(out: Path) -> dict[str, dict[str, Any]]:
    rows = _lines(out)
    assert len(rows) == len({r["id"] for r in rows}), "a question recorded twice"
    return {r["id"]: r for r in rows}


def test_a_dabench_suite_is_scored_exactly_leaks_no_label_and_concurrency_changes_nothing(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    suite = write_dabench(tmp_path / "dabench")
    openai_server.add(*entries(ScriptedAnalyst(DABENCH, suite / "da-dev-labels.jsonl")))
    first = _eval(suite, tmp_path / "one", openai_server, "--concurrency", "1")
    assert first.exit_code == 0, first.output

    rows = _by_id(tmp_path / "one")
    assert {q: r["outcome"] for q, r in rows.items()} == {
        "0": "correct",
        "1": "wrong",
        "2": "format",
        "3": "wrong",
        "4": "timeout",
        "5": "correct",
    }
    assert rows["1"]["correct"] == {"corr": True, "kind": False}
    assert rows["1"]["why"] == {"kind": "'nonlinear' is not 'quasilinear'"}
    assert rows["1"]["parsed"] == {"corr": "0.9731000", "kind": "nonlinear"}
    assert rows["2"]["raw_answer"] == "There are 6174 outliers." and rows["2"]["parsed"] == {}
    assert not rows["4"]["scored"] and rows["4"]["error"] and rows["4"]["stop_reason"] == "llm_error"
    assert rows["0"]["rounds"] == 2 and rows["0"]["stop_reason"] == "answer" and rows["0"]["tokens"]["total_tokens"] > 0
    summary = summarize(rows.values())
    assert (summary.overall.questions, summary.overall.questions_correct) == (5, 2)
    assert (summary.overall.sub_answers, summary.overall.sub_answers_correct) == (7, 4)
    assert summary.overall.proportional == pytest.approx((1 + 0.5 + 0 + 0 + 1) / 5)
    assert summary.by_level["easy"].questions_correct == 2 and summary.by_concept["Summary Statistics"].questions == 2
    assert "accuracy by question         40.00%  (2/5)" in first.stdout
    assert "accuracy by sub-answer       57.14%  (4/7)" in first.stdout
    assert "outcomes: correct 2, wrong 2, format 1, timeout 1" in first.stdout

    for qid, row in rows.items():  # every question reviewable on its own
        here = tmp_path / "one" / row["notebook"]
        assert here.is_file() and json.loads((here.parent / "answer.json").read_text())["outcome"] == row["outcome"]
        table = DABENCH[int(qid)].file
        assert (here.parent / "workspace" / table).read_text().startswith(("x\n", "a,b\n"))
    assert (tmp_path / "one" / "report.html").is_file()

    # Labels: in no request, not in the kernel's reach, in no workspace.
    sent = [json.dumps(body) for body in openai_server.requests]
    assert not [v for v in label_values(DABENCH) for body in sent if v in body]
    assert sum("LABELS-VISIBLE False" in body for body in sent) >= 4
    assert not any("LABELS-VISIBLE True" in body for body in sent)
    for path in (tmp_path / "one" / "questions").glob("*/workspace/**/*"):
        if path.is_file():
            text = path.read_bytes().decode("utf-8", "replace")
            assert not [v for v in label_values(DABENCH) if v in text], path
            assert "common_answers" not in text

    assert not [body for body in openai_server.requests if "temperature" in body or "top_p" in body]
    before_third = len(openai_server.requests)
    third = _eval(
        suite, tmp_path / "three", openai_server, "--concurrency", "3", "--temperature", "0.4", "--top-p", "0.9"
    )
    assert third.exit_code == 0, third.output
    sampled = openai_server.requests[before_third:]  # the settings reach every request the model seam sends
    assert sampled and all(body["temperature"] == 0.4 and body["top_p"] == 0.9 for body in sampled)
    again = _by_id(tmp_path / "three")
    assert {q: {k: r[k] for k in _SAME} for q, r in again.items()} == {
        q: {k: r[k] for k in _SAME} for q, r in rows.items()
    }

    asked = len(openai_server.requests)
    rerun = _eval(suite, tmp_path / "one", openai_server)  # everything done: nothing runs again
    assert rerun.exit_code == 0 and len(openai_server.requests) == asked and len(_lines(tmp_path / "one")) == 6
    shown = CliRunner().invoke(cli, ["eval", "compare", str(tmp_path / "one"), str(tmp_path / "three")])
    assert "fixed in B (0): -" in shown.output and "accuracy_by_question: 40.00% → 40.00% (+0.00%)" in shown.output
    assert not our_kernel_pids()


def test_the_generic_layout_rules_and_the_machinerys_failures_are_recorded_as_what_they_are(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    suite_file = write_generic(tmp_path / "generic")
    analyst = ScriptedAnalyst(GENERIC, tmp_path / "nowhere")
    openai_server.add(*entries(analyst))
    suite = load_suite(suite_file)
    options = {"model": "m", "base_url": openai_server.base_url}
    done = asyncio.run(run_eval(suite, suite.questions, tmp_path / "out", options, concurrency=2))
    rows = {r["id"]: r for r in done.results}
    assert {q: r["outcome"] for q, r in rows.items()} == {
        "g1": "correct",
        "g2": "wrong",
        "g3": "correct",
        "g4": "missing_data",
        "g5": "correct",
    }
    assert rows["g2"]["correct"] == {"animal": True, "code": False}
    assert "gone.csv" in rows["g4"]["error"] and "g4" not in analyst.asked  # no model call, no kernel
    assert any("the kernel died" in e for e in rows["g5"]["errors"]) and rows["g5"]["rounds"] == 2
    summary = summarize(rows.values())
    assert (summary.overall.questions_correct, summary.overall.questions) == (3, 4)
    assert (summary.overall.sub_answers_correct, summary.overall.sub_answers) == (4, 5)
    assert summary.overall.proportional == pytest.approx(0.875) and summary.unscored == 1

    down = {"model": "m", "base_url": "http://127.0.0.1:9/v1", "model_options": {"max_retries": 0}}
    failed = asyncio.run(run_eval(suite, suite.select(("g1",)), tmp_path / "down", down, concurrency=1))
    (row,) = failed.ran
    assert row["outcome"] == "model_error" and not row["scored"] and row["error"]
    assert summarize([row]).overall.questions == 0  # never a wrong answer of the model's
    retried = asyncio.run(run_eval(suite, suite.select(("g1",)), tmp_path / "down", options, retry_failed=True))
    assert [r["outcome"] for r in retried.ran] == ["correct"] and len(_lines(tmp_path / "down")) == 2
    assert [r["outcome"] for r in read_results(tmp_path / "down")] == ["correct"]  # the last line counts
    again = asyncio.run(run_eval(suite, suite.select(("g1",)), tmp_path / "down", options))
    assert again.ran == () and [r["outcome"] for r in again.results] == ["correct"]
    assert not our_kernel_pids()


def test_eval_against_an_unreachable_model_exits_1_and_says_every_question_failed(tmp_path: Path) -> None:
    from ports import closed_port

    from kernel_agent.cli.drive import EXIT_NO_ANSWER

    suite = write_dabench(tmp_path / "dabench")
    with closed_port() as port:  # every connection refused: the model is unreachable
        done = subprocess.run(
            [sys.executable, "-m", "kernel_agent.cli", "eval", str(suite), "--ids", "0,1", "--model", "m"]
            + ["--base-url", f"http://127.0.0.1:{port}/v1", "--out", str(tmp_path / "out")],
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == EXIT_NO_ANSWER, done.stdout + done.stderr
    assert "0.00%" not in done.stdout and "accuracy: none (no question was scored)" in done.stdout
    assert "Error: all 2 questions failed to run: model_error ×2 — " in done.stderr
    report = (tmp_path / "out" / "report.html").read_text()
    rows = read_results(tmp_path / "out")
    assert len(rows) == 2 and all(r["outcome"] == "model_error" and r["error"] in r["errors"] for r in rows)
    for row in rows:  # the run's own error (in errors and in error) is listed once a question, not twice
        assert report.count(html.escape(row["error"][:150], quote=True)) == sum(
            r["error"] == row["error"] for r in rows
        )
    assert not our_kernel_pids()


def test_a_killed_run_resumes_and_runs_every_question_to_its_end_once(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    suite = write_dabench(tmp_path / "dabench")
    analyst = ScriptedAnalyst(DABENCH, suite / "da-dev-labels.jsonl")
    openai_server.add(*entries(analyst))
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "kernel_agent.cli",
        "eval",
        str(suite),
        "--model",
        "m",
        "--base-url",
        openai_server.base_url,
        "--request-timeout",
        "1",
        "--concurrency",
        "1",
        "--out",
        str(out),
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(read_results(out)) < 2 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        kernels = kernels_of(process.pid)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    before = {r["id"] for r in read_results(out)}
    assert 2 <= len(before) < 6, "the run was not killed mid-way"
    deadline = time.monotonic() + 60
    while not all(process_gone(k) for k in kernels) and time.monotonic() < deadline:
        time.sleep(0.05)
    sweep_stale_runtime_dirs()
    asked_before = len(analyst.asked)

    resumed = CliRunner().invoke(cli, command[3:], catch_exceptions=False)
    assert resumed.exit_code == 0, resumed.output
    rows = _lines(out)
    assert sorted(r["id"] for r in rows) == sorted(c.id for c in DABENCH)  # each once
    assert not before & set(analyst.asked[asked_before:])  # a finished question never runs twice
    assert {r["id"]: r["outcome"] for r in rows}["5"] == "correct"
    assert not our_kernel_pids()


def test_a_question_folder_taken_by_a_link_gets_a_fresh_name_and_the_victim_is_untouched(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    suite = write_dabench(tmp_path / "dabench")
    openai_server.add(*entries(ScriptedAnalyst(DABENCH, suite / "da-dev-labels.jsonl")))
    victim = tmp_path / "victim"
    (victim / "workspace").mkdir(parents=True)
    (victim / "workspace" / "t1.csv").write_text("victim's own\n")
    (victim / "secret.txt").write_text("HOST SECRET\n")
    before = {str(p.relative_to(victim)): p.read_bytes() for p in victim.rglob("*") if p.is_file()}
    out = tmp_path / "out"
    (out / "questions").mkdir(parents=True)
    (out / "questions" / "0").symlink_to(victim)  # a planted question folder: never made into or deleted
    (out / "report.html").symlink_to(victim / "secret.txt")
    result = _eval(suite, out, openai_server, "--ids", "0")
    assert result.exit_code == 0, result.output
    assert {str(p.relative_to(victim)): p.read_bytes() for p in victim.rglob("*") if p.is_file()} == before
    (row,) = _lines(out)
    assert row["outcome"] == "correct" and row["notebook"] == "questions/0~2/notebook.ipynb"
    assert (out / "questions" / "0~2" / "workspace" / "t1.csv").read_text() == "x\n1\n2\n3\n4\n5\n"
    assert (out / "questions" / "0").is_symlink() and not (out / "report.html").is_symlink()
    assert 'href="questions/0~2/notebook.ipynb"' in (out / "report.html").read_text()
    assert not our_kernel_pids()
