"""``replay --check``'s rule list (pure), and a statsmodels ``summary()`` recorded by a scripted run, replayed.

The kernel test records a real run (scripted model, real kernel) whose code prints an OLS summary,
moves the recorded clock and date as a later replay would see them, and replays with ``--check``: it
passes; the same notebook with one changed coefficient fails, naming the line.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner
from openai_server import OpenAIServer, Reply, python_call

from kernel_agent.cli import cli
from kernel_agent.notebook import normalise
from kernel_agent.notebook.normalise import RULES, normalise_text
from kernel_agent.notebook.replay import compare_outputs

ANCHOR = datetime(2026, 11, 27, 2, 30, tzinfo=UTC)


@pytest.mark.parametrize("rule", RULES, ids=[rule.name for rule in RULES])
def test_every_documented_rule_does_what_its_example_says(rule) -> None:  # type: ignore[no-untyped-def]
    text, normalised = rule.example
    assert normalise_text(text, anchors=[ANCHOR]) == normalised
    assert f"``{rule.name}``" in (normalise.__doc__ or "")  # documented in the module's list


def test_a_statsmodels_summary_normalises_its_clock_and_date_but_not_its_numbers() -> None:
    recorded = (
        "Date:                Fri, 27 Nov 2026   Prob (F-statistic):           1.04e-21\n"
        "Time:                        02:31:07   Log-Likelihood:                -62.212\n"
        "x1             2.0143      0.071     28.231      0.000       1.871       2.158\n"
    )
    later = recorded.replace("02:31:07", "14:02:59").replace("Fri, 27 Nov", "Sat, 28 Nov")
    anchors = [ANCHOR, datetime(2026, 11, 28, 14, 3, tzinfo=UTC)]
    assert normalise_text(recorded, anchors=anchors) == normalise_text(later, anchors=anchors)
    assert "Time:                        <time>" in normalise_text(recorded, anchors=anchors)
    changed = recorded.replace("2.0143", "2.0144")
    difference = compare_outputs(
        [{"output_type": "stream", "name": "stdout", "text": recorded}],
        [{"output_type": "stream", "name": "stdout", "text": changed}],
        anchors=anchors,
    )
    assert difference is not None and "2.0144" in difference


def test_data_that_merely_looks_like_a_time_or_an_old_date_is_kept() -> None:
    text = "hour 08:00:00 and 2019-06-30 08:00:00 and Mon, 01 Jan 2018 and 3.5 seconds-ish 42"
    assert normalise_text(text, anchors=[ANCHOR]) == (
        "hour 08:00:00 and 2019-06-30 08:00:00 and Mon, 01 Jan 2018 and <duration>-ish 42"
    )
    assert normalise_text("[12:01:02] INFO fit done", anchors=[ANCHOR]) == "[<time>] INFO fit done"
    assert normalise_text("2026-11-27 02:31:07,123 INFO x", anchors=[ANCHOR]) == "<now> INFO x"
    assert normalise_text("saved /tmp/tmpq9x_z1/model.pkl; kept /tmpfoo/x", anchors=[]) == (
        "saved <tmp>/model.pkl; kept /tmpfoo/x"
    )


OLS = (
    "import numpy as np\nimport statsmodels.api as sm\n"
    "rng = np.random.default_rng(0)\nx = rng.normal(size=50)\ny = 2 * x + rng.normal(size=50)\n"
    "print(sm.OLS(y, sm.add_constant(x)).fit().summary())"
)


@pytest.mark.kernel
def test_a_statsmodels_summary_replays_with_check(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(Reply("Fit it.", tool_calls=(python_call(OLS),)), Reply("The slope is about 2."))
    notebook = tmp_path / "run.ipynb"
    ran = CliRunner().invoke(
        cli,
        ["run", "Fit y on x", "--model", "m", "--base-url", openai_server.base_url, "--workspace",
         str(tmp_path / "ws"), "--out", str(notebook), "--json"],
        catch_exceptions=False,
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.stdout.splitlines()[-1])["run"]["stop_reason"] == "answer"

    def rewrite(name: str, change) -> Path:  # type: ignore[no-untyped-def]
        nb = nbformat.read(notebook, as_version=4)
        cell = next(c for c in nb.cells if c.cell_type == "code" and "OLS" in c.source)
        stream = next(out for out in cell.outputs if out.output_type == "stream")
        assert "Time:" in stream.text and "Date:" in stream.text
        stream.text = change(stream.text)
        path = tmp_path / name
        nbformat.write(nb, path)
        return path

    def earlier(text: str) -> str:  # the recording's clock an hour and a bit before the replay's
        lines = text.splitlines(keepends=True)
        for i, line in enumerate(lines):
            if line.startswith("Time:"):
                clock = line.split()[1]
                lines[i] = line.replace(clock, f"{(int(clock[:2]) + 1) % 24:02d}{clock[2:]}")
        return "".join(lines)

    def changed_number(text: str) -> str:
        line = next(line for line in text.splitlines() if line.startswith("x1"))
        coef = line.split()[1]
        return text.replace(line, line.replace(coef, f"{float(coef) + 0.0001:.4f}", 1))

    passed = CliRunner().invoke(cli, ["replay", str(rewrite("later.ipynb", earlier)), "--check"])
    assert passed.exit_code == 0, passed.output
    assert "ok" in passed.output and "mismatch" not in passed.output
    failed = CliRunner().invoke(cli, ["replay", str(rewrite("edited.ipynb", changed_number)), "--check"])
    assert failed.exit_code != 0
    assert "mismatch" in failed.output and "x1" in failed.output
