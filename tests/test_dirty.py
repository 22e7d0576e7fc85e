"""Summaries name dirty columns: text columns that are mostly numbers (with the values that are not, and their
counts) and missing-like tokens stored as text; a scripted run's first request carries them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from openai_server import OpenAIServer, Reply

from kernel_agent.agent.datafiles.data import summarize
from kernel_agent.agent.datafiles.dirty import dirty_lines
from kernel_agent.cli import cli

ROWS = 92


def dirty_csv(path: Path) -> Path:
    """Like the benchmark's 2014_q4.csv: two numeric-looking columns are text because of a few cells."""
    lines = ["day,trips,fare,city"]
    for n in range(ROWS):
        trips = "undefined" if n in (5, 40, 77) else "\t456\t41" if n == 12 else str(100 + n)
        fare = "13\t741" if n == 3 else f"{n * 1.5:.1f}"
        city = "-" if n % 30 == 0 else "Oslo"
        lines.append(f"2014-10-{n % 28 + 1:02d},{trips},{fare},{city}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_numeric_looking_text_columns_and_missing_like_tokens_are_named(tmp_path: Path) -> None:
    text = summarize(dirty_csv(tmp_path / "2014_q4.csv"))
    assert "No missing values." not in text
    assert "No missing values as pandas reads them, but some cells hold missing-like text" in text
    line = next(line for line in text.splitlines() if line.startswith("Text columns holding mostly numbers"))
    assert "`trips` (88 of 92 values are numbers; the others: 'undefined' ×3 (missing-like), '\\t456\\t41' ×1)" in line
    assert "`fare` (91 of 92 values are numbers; the others: '13\\t741' ×1)" in line
    assert "Missing-like values stored as text: `city` '-' ×4 (missing-like)" in text


def test_clean_frames_say_nothing_more() -> None:
    frame = pd.DataFrame({"a": [1, 2], "b": ["x", "y"], "c": ["1", "2"]})
    assert dirty_lines(frame) == []
    words = pd.DataFrame({"w": ["apple", "pear", "-", "plum"]})  # mostly words: only the token is named
    assert dirty_lines(words) == ["Missing-like values stored as text: `w` '-' ×1 (missing-like)"]
    many = pd.DataFrame({f"c{n}": ["1", "2", "3", "4", "5", f"x{n}" * 40] for n in range(15)})
    (line,) = dirty_lines(many)
    assert line.endswith("… 5 more") and len(line) < 2_000 and "…'" in line  # bounded: values clipped, columns cut


@pytest.mark.kernel
def test_a_runs_first_request_names_the_dirty_columns(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(Reply("The trips column needs cleaning first."))
    data = dirty_csv(tmp_path / "2014_q4.csv")
    ran = CliRunner().invoke(
        cli,
        ["run", "Total trips", "--data", str(data), "--model", "m", "--base-url", openai_server.base_url,
         "--workspace", str(tmp_path / "ws"), "--out", str(tmp_path / "run.ipynb"), "--quiet"],
        catch_exceptions=False,
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output
    prompt = "\n".join(str(m.get("content")) for m in openai_server.requests[0]["messages"])
    assert "'undefined' ×3 (missing-like)" in prompt and "'13\\t741' ×1" in prompt
