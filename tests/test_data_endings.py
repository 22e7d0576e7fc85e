"""Files pandas reads are described whatever their line endings; a file that cannot be read gets a short
reason; one size rule everywhere; resume's ``run_started`` names the follow-up and absolute paths."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from openai_server import OpenAIServer, Reply, python_call

from kernel_agent.agent.datafiles.data import summarize
from kernel_agent.agent.datafiles.summaries import FULL_READ_BYTES, human_size
from kernel_agent.agent.protocols import FileInfo, PromptContext, get_protocol
from kernel_agent.cli import cli
from kernel_agent.errors import DataFileError


def table(rows: int, newline: str) -> str:
    return newline.join(["id,name,score", *(f"{n},name {n},{n * 0.5}" for n in range(rows))]) + newline


@pytest.mark.parametrize("newline", ["\r", "\r\n", "\n"], ids=["old-mac", "windows", "unix"])
def test_a_csv_is_described_whatever_its_line_endings(tmp_path: Path, newline: str) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(table(120, newline).encode())
    text = summarize(path)
    assert "120 rows × 3 columns" in text, text
    assert "`id`" in text and "`name`" in text and "`score`" in text
    assert ("carriage return only" in text) == (newline == "\r")


def test_a_big_old_mac_csv_is_sampled_and_its_lines_counted(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    rows = 0
    with open(path, "wb") as handle:
        handle.write(b"id,name,score\r")
        while handle.tell() <= FULL_READ_BYTES:
            handle.write("".join(f"{n},name {n},{n * 0.5}\r" for n in range(rows, rows + 10_000)).encode())
            rows += 10_000
    text = summarize(path)
    assert "Usecols" not in text and "`score`" in text, text
    counted = int(re.search(r"([\d,]+) rows", text).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert abs(counted - rows) <= rows * 0.01


def test_a_file_that_cannot_be_read_gets_a_short_reason_never_a_list_of_column_numbers(tmp_path: Path) -> None:
    path = tmp_path / "odd.csv"  # one quoted header holding 2,000 commas: pandas finds one column, not 1,000
    path.write_text('"' + ",".join(f"c{n}" for n in range(2001)) + '"\n1\n2\n')
    with pytest.raises(DataFileError) as caught:
        summarize(path)
    message = str(caught.value)
    assert message.startswith("cannot read odd.csv as csv:")
    assert len(message) < 300 and not re.search(r"\d+, \d+, \d+", message), message


def test_one_size_rule_for_the_summary_and_deepanalyzes_rich_block(tmp_path: Path) -> None:
    path = tmp_path / "sales.csv"
    path.write_bytes(table(900, "\n").encode()[:21_606].rsplit(b"\n", 1)[0] + b"\n")
    size = path.stat().st_size
    summary = summarize(path)
    shown = human_size(size)
    assert f"CSV · {shown}" in summary
    ctx = PromptContext(task="Sum it", files=(FileInfo("sales.csv", size, summary),))
    message = get_protocol("deepanalyze", data_format="rich").initial_messages(ctx)[0]["content"]
    assert isinstance(message, str)
    block = json.loads(message.split("File 1:\n", 1)[1].split("\n}\n", 1)[0] + "\n}")
    assert block["size"] == shown.replace(" ", "")  # "21.1KB" over "CSV · 21.1 KB"
    assert [human_size(n) for n in (1023, 1024, 21_606, 5 << 20)] == ["1023 B", "1.0 KB", "21.1 KB", "5.0 MB"]


@pytest.mark.kernel
def test_resumes_run_started_names_the_follow_up_and_absolute_paths(
    openai_server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths on the command line, as a user types them
    openai_server.add(Reply("Set it.", tool_calls=(python_call("kept = 21"),)), Reply("Done: 21."))
    openai_server.add(Reply("Doubled: 42."))
    base = ["--model", "m", "--base-url", openai_server.base_url]
    runner = CliRunner()
    first = runner.invoke(cli, ["run", "Set kept", *base, "--workspace", "ws", "--out", "run.ipynb", "--json"])
    assert first.exit_code == 0, first.output
    again = runner.invoke(cli, ["resume", "run.ipynb", "Now double it", *base, "--json"])
    assert again.exit_code == 0, again.output
    runs = [json.loads(line) for line in first.stdout.splitlines()[:1] + again.stdout.splitlines()[:1]]
    assert [r["event"] for r in runs] == ["run_started", "run_started"]
    assert runs[0]["question"] == runs[0]["task"] == "Set kept"
    assert runs[1]["question"] == "Now double it" and runs[1]["task"].startswith("Set kept")
    for started in runs:
        assert Path(started["notebook_path"]).is_absolute() and Path(started["workspace"]).is_absolute()
        assert Path(started["notebook_path"]) == tmp_path / "run.ipynb"
