"""The bundled demo: its dataset, its scripted replies (run for real in a kernel), ScriptedChatModel."""

from __future__ import annotations

import ast
import asyncio
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from jupyter_client.manager import start_new_kernel

from kernel_agent.agent.datafiles.data import preload_code
from kernel_agent.demo import dataset_path, demo_model, demo_replies, demo_task
from kernel_agent.demo.make_dataset import COLUMNS, write_dataset
from kernel_agent.errors import ConfigError
from kernel_agent.model.chat import ChatModel, ModelReply, Piece, TextPiece, complete
from kernel_agent.model.scripted import END_OF_SCRIPT, ScriptedChatModel

TAGS = ("Analyze", "Understand", "Code", "Answer")
CODE = re.compile(r"<Code>\s*```python\n(.*?)\n```\s*</Code>", re.DOTALL)
ANSWER = re.compile(r"<Answer>(.*?)</Answer>", re.DOTALL)


def code_of(reply: str) -> str | None:
    match = CODE.search(reply)
    return match.group(1) if match else None


# --- the dataset -----------------------------------------------------------------------------


def test_dataset_is_small_and_as_described() -> None:
    path = dataset_path()
    assert path.name == "sales.csv" and path.is_file()
    assert path.stat().st_size < 500_000
    frame = pd.read_csv(path)
    assert tuple(frame.columns) == COLUMNS
    assert len(frame) == 3000
    assert frame[["region", "units", "discount", "revenue"]].isna().sum().to_dict() == {
        "region": 18,
        "units": 12,
        "discount": 25,
        "revenue": 12,
    }
    assert frame.duplicated().sum() == 4
    assert frame["units"].max() > 20 * frame["units"].median()  # outliers left for the cleaning round


def test_dataset_regenerates_byte_for_byte(tmp_path: Path) -> None:
    assert write_dataset(tmp_path / "sales.csv").read_bytes() == dataset_path().read_bytes()


# --- the script ------------------------------------------------------------------------------


def test_task_names_the_file_and_the_goals() -> None:
    task = demo_task()
    assert "sales.csv" in task
    for word in ("Clean", "region", "category", "month", "discount", "charts"):
        assert word in task


def test_every_reply_has_balanced_known_tags_and_one_action() -> None:
    replies = demo_replies()
    assert 5 <= len(replies) <= 7
    for index, reply in enumerate(replies):
        names = re.findall(r"</?([A-Za-z]+)>", reply)
        assert set(names) <= set(TAGS), f"reply {index}: unknown tags {set(names) - set(TAGS)}"
        for tag in TAGS:
            assert reply.count(f"<{tag}>") == reply.count(f"</{tag}>"), f"reply {index}: <{tag}> unbalanced"
        actions = reply.count("<Code>") + reply.count("<Answer>")
        assert actions == 1, f"reply {index} has {actions} <Code>/<Answer> blocks"
        assert reply.lstrip().startswith(("<Analyze>", "<Understand>"))
    assert all(code_of(reply) for reply in replies[:-1])
    assert ANSWER.search(replies[-1]) and code_of(replies[-1]) is None


def test_code_is_python_that_builds_on_the_setup_and_earlier_rounds() -> None:
    blocks = [code for reply in demo_replies() if (code := code_of(reply))]
    for block in blocks:
        ast.parse(block)
        assert not re.search(r"^\s*(import|from) (pandas|numpy|matplotlib)", block, re.MULTILINE)
    assert "data.sales" in blocks[0]
    assert all("read_csv" not in block for block in blocks[1:]), "state persists: load the CSV once"
    assert sum(block.count("plt.show()") for block in blocks) >= 2
    assert "savefig(" in "".join(blocks)


def test_replies_parse_with_the_tags_protocols() -> None:
    from kernel_agent.agent.protocols import get_protocol

    replies = demo_replies()
    for name in ("tags", "deepanalyze"):
        protocol = get_protocol(name)
        model = ScriptedChatModel(replies)
        steps = [protocol.parse(asyncio.run(complete(model, [], protocol.request_options()))) for _ in replies]
        assert [step.problem for step in steps] == [None] * len(replies), name
        assert [step.code for step in steps[:-1]] == [code_of(reply) for reply in replies[:-1]], name
        assert steps[-1].answer and steps[-1].code is None, name


@pytest.mark.kernel
def test_script_runs_in_one_kernel_and_its_answer_is_true(tmp_path: Path) -> None:
    shutil.copy(dataset_path(), tmp_path / "sales.csv")
    replies = demo_replies()
    blocks = [preload_code(["sales.csv"])] + [code for reply in replies if (code := code_of(reply))]
    outputs: list[dict[str, Any]] = []
    manager, client = start_new_kernel(
        kernel_name="python3", cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for block in blocks:
            reply = client.execute_interactive(block, output_hook=outputs.append, allow_stdin=False, timeout=60)
            errors = [m["content"] for m in outputs if m["msg_type"] == "error"]
            assert reply["content"]["status"] == "ok", (block[:80], errors)
        facts = {
            "rows": "f'{len(df):,}'",
            "total": "f'{df.revenue.sum():,.0f}'",
            "growth": "f'{by_year[2024] / by_year[2023] - 1:.1%}'",
            "west": 'f\'+{by_region.loc["West", "growth_%"]:.1f}%\'',
            "south": 'f\'{by_region.loc["South", "growth_%"]:.1f}%\'',
            "trend": "f'+{trend:,.0f} per month'",
            "r2": "f'R² = {r2:.2f}'",
            "elasticity": "f'{elasticity:.2f}'",
        }
        reply = client.execute_interactive("", user_expressions=facts, timeout=30)
        values = reply["content"]["user_expressions"]
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert not [m for m in outputs if m["msg_type"] == "error"]
    streams = [m["content"] for m in outputs if m["msg_type"] == "stream"]
    stderr = "".join(content["text"] for content in streams if content["name"] == "stderr")
    assert stderr == "", stderr  # no warnings from the scripted code either
    pngs = [m for m in outputs if m["msg_type"] == "display_data" and "image/png" in m["content"]["data"]]
    assert len(pngs) >= 2
    assert (tmp_path / "monthly_revenue.png").stat().st_size > 1000
    answer = ANSWER.search(replies[-1]).group(1)  # type: ignore[union-attr]
    assert set(values) == set(facts)
    for name, value in values.items():
        assert value["status"] == "ok", (name, value)
        text = ast.literal_eval(value["data"]["text/plain"])
        assert text in answer, f"{name}: the answer does not say {text!r}"


# --- ScriptedChatModel -----------------------------------------------------------------------


def test_scripted_model_streams_chunks_and_plays_in_order() -> None:
    model = ScriptedChatModel(["first reply, long enough to be split", "second"], chunk_size=8)
    assert isinstance(model, ChatModel) and model.scripted and model.name == "scripted-demo"

    async def play() -> list[tuple[ModelReply, list[str]]]:
        results = []
        for _ in range(4):
            *pieces, reply = [piece async for piece in model.stream([{"role": "user", "content": "hi"}])]
            assert isinstance(reply, ModelReply) and all(isinstance(piece, TextPiece) for piece in pieces)
            results.append((reply, [piece.text for piece in pieces if isinstance(piece, TextPiece)]))
        await model.aclose()
        await model.aclose()
        return results

    results = asyncio.run(play())
    texts = [reply.text for reply, _ in results]
    assert texts == ["first reply, long enough to be split", "second", END_OF_SCRIPT, END_OF_SCRIPT]
    first, chunks = results[0]
    assert len(chunks) == 5 and all(len(chunk) <= 8 for chunk in chunks)
    assert "".join(chunks) == first.text
    assert all(reply.usage is None and reply.finish_reason == "stop" for reply, _ in results)
    assert "<Answer>" in END_OF_SCRIPT and "</Answer>" in END_OF_SCRIPT
    assert model.remaining == 0
    assert repr(model) == "<ScriptedChatModel scripted-demo [2/2 replies played]>"


def test_scripted_model_honours_stop_strings_like_a_server() -> None:
    model = ScriptedChatModel(["<Code>\nprint(1)\n</Code> trailing", "no stop here"], name="t")

    async def pieces() -> list[Piece]:
        return [piece async for piece in model.stream([], {"stop": ["</Code>"]})]

    *chunks, cut = asyncio.run(pieces())
    assert isinstance(cut, ModelReply) and cut.text == "<Code>\nprint(1)\n" and cut.stop_reason == "</Code>"
    assert "".join(chunk.text for chunk in chunks if isinstance(chunk, TextPiece)) == cut.text
    whole = asyncio.run(complete(model, [], {"stop": "</Code>"}))
    assert whole.text == "no stop here" and whole.stop_reason is None


def test_scripted_model_rejects_bad_settings() -> None:
    with pytest.raises(ConfigError):
        ScriptedChatModel([], chunk_size=0)
    with pytest.raises(ConfigError):
        ScriptedChatModel([], delay=-1)


def test_demo_model_plays_the_demo_without_openai() -> None:
    model = demo_model(chunk_size=64)
    assert model.remaining == len(demo_replies()) and model.chunk_size == 64
    probe = (
        "import sys, kernel_agent.agent.datafiles.data, kernel_agent.demo, kernel_agent.model.scripted; "
        "print('openai' in sys.modules, 'pandas' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"]
