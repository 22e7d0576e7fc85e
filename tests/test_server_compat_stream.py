"""The DeepAnalyze-compatible stream is live: a real ``openai`` SDK client against the service (real uvicorn)
receives the model's text and the start of its code while the model is still writing that code, with the
``tools`` protocol (text and tool-call arguments translated into DeepAnalyze's tags as they come) and with
``tags`` (the model's own tags passed through); and the stream, put together, is the non-streamed reply."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai_server import OpenAIServer, Reply, python_call
from service_server import ServiceServer

from kernel_agent import Agent
from kernel_agent.agent.protocols.codestream import CodeStream
from kernel_agent.events import CodeDelta
from kernel_agent.model.chat import ToolCallDelta
from kernel_agent.server.transcript import TagWriter

KEY = "stream-key"
CODE = "frame = pd.read_csv(data.sales)\ntotal = int(frame.amount.sum())\nprint(f'total: {total}')\n"
PIECE = 4  # characters per streamed chunk of the scripted model


def _round_one(protocol: str, hold: threading.Event | None) -> Reply:
    """The first reply, held (when ``hold`` is given) with about a third of its code sent."""
    if protocol == "tools":
        text, arguments = "Let me read the file and sum the amounts.", len(python_call(CODE)["arguments"])
        before_code = 1 + -(-len(text) // PIECE) + 1  # role chunk, text chunks, the call's head
        return Reply(
            text,
            tool_calls=(python_call(CODE),),
            chunk_size=PIECE,
            hold_after=before_code + arguments // PIECE // 3,
            hold=hold,
        )
    reply = f"<Analyze>Let me read the file and sum the amounts.</Analyze>\n<Code>\n```python\n{CODE}```\n"
    return Reply(reply, chunk_size=PIECE, stop_reason="</Code>", hold_after=len(reply) // PIECE * 2 // 3, hold=hold)


def _answer(protocol: str) -> Reply:
    text = "The total is 8.\nNorth 3, south 5."
    return Reply(text if protocol == "tools" else f"<Answer>{text}</Answer>", chunk_size=PIECE)


@pytest.fixture
def running(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, OpenAIServer, openai.OpenAI, str]]:
    protocol = request.param
    with (
        OpenAIServer() as model,
        ServiceServer(tmp_path, model.base_url, keys={KEY}, agent={"protocol": protocol}) as server,
        openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120) as client,
    ):
        sales = client.files.create(file=("sales.csv", b"region,amount\nnorth,3\nsouth,5\n"), purpose="assistants")
        yield protocol, model, client, sales.id


@pytest.mark.kernel
@pytest.mark.parametrize("running", ["tools", "tags"], indirect=True)
def test_the_stream_carries_the_code_while_the_model_still_writes_it(
    running: tuple[str, OpenAIServer, openai.OpenAI, str],
) -> None:
    protocol, model, client, file_id = running
    messages: list[Any] = [{"role": "user", "content": "Total amount?", "file_ids": [file_id]}]  # file_ids: ours
    hold = threading.Event()
    model.add(_round_one(protocol, hold), _answer(protocol))
    stream = client.chat.completions.create(model="DeepAnalyze-8B", messages=messages, stream=True)
    seen = ""
    with stream:
        chunks = iter(stream)
        for chunk in chunks:  # the model is held mid-code: what arrives now was streamed, not sent at the round's end
            seen += chunk.choices[0].delta.content or "" if chunk.choices else ""
            if "```python\nframe = pd" in seen:
                break
        assert seen.count("<Analyze>") == 1 and "Let me read the file" in seen
        assert "print(f'total" not in seen and "</Code>" not in seen  # the model has not written it yet
        hold.set()
        streamed = seen + "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    model.add(_round_one(protocol, None), _answer(protocol))
    whole = client.chat.completions.create(model="DeepAnalyze-8B", messages=messages)
    assert streamed == whole.choices[0].message.content
    assert streamed.index("</Analyze>") < streamed.index("<Code>") < streamed.index("</Code>")
    assert streamed.index("</Code>") < streamed.index("<Execute>\ntotal: 8\n</Execute>") < streamed.index("<Answer>")
    assert "North 3, south 5." in streamed[streamed.index("<Answer>") :]
    assert streamed.count(CODE.strip()) == 1  # the code once, whole, as it ran


def test_code_arguments_decode_as_they_stream() -> None:
    """``CodeStream`` gives the code of the first ``execute_python`` call piece by piece, escapes included,
    never a half escape; other tools and a second call give nothing."""
    arguments = python_call('print("é\\t😀")\n')["arguments"]
    code = CodeStream("execute_python")
    pieces = [code.feed(ToolCallDelta(0, "execute_python", arguments[i : i + 3])) for i in range(0, len(arguments), 3)]
    assert "".join(pieces) + code.flush() == 'print("é\\t😀")\n'
    assert sum(1 for p in pieces if p) > 3  # it came in pieces, not at the end
    assert code.feed(ToolCallDelta(1, "execute_python", '{"code": "print(2)"}')) == ""
    other = CodeStream("execute_python")
    assert other.feed(ToolCallDelta(0, "search", '{"code": "x"}')) == "" and other.flush() == ""
    assert CodeStream(None).feed(ToolCallDelta(0, "execute_python", '{"code": "x"}')) == ""


def test_long_arguments_are_decoded_in_growing_steps_and_flushed_whole() -> None:
    """A hostile model's huge call in one-character pieces costs a bounded number of reads, and the code
    given out, with the flush, is the whole code."""
    body = "x = 1\n" * 20_000
    arguments = python_call(body)["arguments"]
    code = CodeStream("execute_python")
    given = [code.feed(ToolCallDelta(0, "execute_python", ch)) for ch in arguments]
    reads = sum(1 for p in given if p)
    assert "".join(given) + code.flush() == body
    assert reads < 5_000  # every piece up to 4 KB, then one read per 1/8 growth


def test_tools_transcript_streams_analysis_and_code_as_they_come() -> None:
    writer = TagWriter("tools")
    feed = writer.feed
    assert feed({"event": "round_started"}) == ""
    assert feed({"event": "text_delta", "text": "\n"}) == ""  # leading blank text waits
    assert feed({"event": "text_delta", "text": "Sum it."}) == "<Analyze>\nSum it."
    assert feed({"event": "code_delta", "text": "print("}) == "\n</Analyze>\n<Code>\n```python\nprint("
    assert feed({"event": "code_delta", "text": "1)"}) == "1)"
    assert feed({"event": "code_ready", "code": "print(1)", "reasoning": "Sum it."}) == "\n```\n</Code>"
    assert feed({"event": "execution_finished", "result": {"text": "1\n"}}) == "\n<Execute>\n1\n</Execute>\n"
    feed({"event": "round_started"})
    assert feed({"event": "code_delta", "text": "print(2"}) == "<Code>\n```python\nprint(2"
    feed({"event": "round_finished", "round": {"status": "no-code", "problem": "malformed tool arguments"}})
    feed({"event": "round_started"})
    assert feed({"event": "text_delta", "text": "Half"}) == "<Analyze>\nHalf"
    reset = feed({"event": "text_reset", "reason": "connection dropped"})
    assert reset == "\n</Analyze>\n\n[the model's reply broke off; it starts over]\n"
    assert feed({"event": "text_delta", "text": "It is 1."}) == "<Analyze>\nIt is 1."
    assert feed({"event": "answer", "answer": "It is 1."}) == "\n</Analyze>\n<Answer>\nIt is 1.\n</Answer>\n"


def test_a_rejected_tool_call_closes_its_code_block() -> None:
    writer = TagWriter("tools")
    events: list[dict[str, Any]] = [
        {"event": "round_started"},
        {"event": "code_delta", "text": "print(2"},
        {"event": "round_finished", "round": {"status": "no-code", "problem": "malformed tool arguments"}},
    ]
    text = "".join(writer.feed(e) for e in events)
    assert text == "<Code>\n```python\nprint(2\n```\n</Code>\n[reply rejected: malformed tool arguments]\n"


@pytest.mark.kernel
def test_a_reply_broken_off_mid_code_streams_its_retry_from_the_start(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    """The model's stream drops halfway through the tool call's code: the front ends are told the code so far
    is void, the retried reply's code streams whole from its start, and the compat transcript says so."""
    first = "print('a broken reply that never ran')\n"
    arguments = len(python_call(first)["arguments"])
    openai_server.add(
        Reply("", tool_calls=(python_call(first),), chunk_size=PIECE, die_after=2 + arguments // PIECE // 2),
        Reply("", tool_calls=(python_call("print(6 * 7)\n"),), chunk_size=PIECE),
        Reply("It is 42."),
    )
    options = {"max_retries": 2, "backoff": 0.01}
    with Agent(model="m", base_url=openai_server.base_url, protocol="tools", model_options=options) as agent:
        events = list(agent.stream("6*7?", workspace=tmp_path / "ws"))
    kinds = [e.kind for e in events]
    reset = kinds.index("text_reset")
    before = "".join(e.text for e in events[:reset] if isinstance(e, CodeDelta))
    after = "".join(e.text for e in events[reset:] if isinstance(e, CodeDelta) and e.round == 1)
    assert before and first.startswith(before) and before != first  # it had started, and broke off
    assert after == "print(6 * 7)\n"
    writer = TagWriter("tools")
    text = "".join(writer.feed(e.to_dict()) for e in events)
    assert text.startswith(
        f"<Code>\n```python\n{before}\n```\n</Code>\n[the model's reply broke off; it starts over]\n"
    )
    assert "<Code>\n```python\nprint(6 * 7)\n```\n</Code>\n<Execute>\n42\n</Execute>" in text
