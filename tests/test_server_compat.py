"""The DeepAnalyze-compatible surface through the real ``openai`` SDK: files, chat completions (plain and
streamed), a two-turn thread whose second turn uses a variable of the first, generated files to download."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from leaks import closed_by_their_owners
from openai_server import OpenAIServer, Reply, python_call
from service_server import ServiceServer

from kernel_agent.server.transcript import TagWriter

KEY = "compat-key"


@pytest.fixture(scope="module")
def server(model: OpenAIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceServer]:
    with ServiceServer(tmp_path_factory.mktemp("compat"), model.base_url, keys={KEY}) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: ServiceServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120) as sdk:
        yield sdk


def test_files_api_works_with_the_sdk(client: openai.OpenAI) -> None:
    created = client.files.create(file=("sales.csv", b"region,amount\nnorth,3\nsouth,5\n"), purpose="assistants")
    assert created.filename == "sales.csv" and created.bytes == 30 and created.id.startswith("file-")
    assert client.files.retrieve(created.id).filename == "sales.csv"
    assert created.id in [f.id for f in client.files.list()]
    assert client.files.content(created.id).read() == b"region,amount\nnorth,3\nsouth,5\n"
    assert client.files.delete(created.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(created.id)


@pytest.mark.kernel
def test_a_two_turn_thread_keeps_its_variables_and_lists_generated_files(
    client: openai.OpenAI, model: OpenAIServer, server: ServiceServer
) -> None:
    data = client.files.create(file=("sales.csv", b"region,amount\nnorth,3\nsouth,5\n"), purpose="assistants")
    code = "frame = pd.read_csv(data.sales)\ntotal = int(frame.amount.sum())\nframe.to_csv('summary.csv')\nprint(total)"
    model.add(Reply("Read and sum.", tool_calls=(python_call(code),)), Reply("The total is 8."))
    asked: list[Any] = [{"role": "user", "content": "Total amount?", "file_ids": [data.id]}]  # file_ids: ours
    first = client.chat.completions.create(model="DeepAnalyze-8B", messages=asked)
    message = first.choices[0].message
    content = message.content
    assert content is not None
    assert content.index("<Code>") < content.index("<Execute>\n8") < content.index("<Answer>")
    assert "The total is 8." in content
    extra = first.model_extra or {}
    thread_id = extra["thread_id"]
    assert (message.model_extra or {})["thread_id"] == thread_id
    [generated] = extra["generated_files"]
    assert generated["name"] == "summary.csv"
    download = httpx.get(generated["url"], headers={"Authorization": f"Bearer {KEY}"})
    assert download.status_code == 200 and "north" in download.text

    model.add(Reply("Double.", tool_calls=(python_call("print(total * 2)"),)), Reply("Doubled: 16."))
    follow_up: list[Any] = [  # thread_id: ours
        {"role": "user", "content": "Total amount?"},
        {"role": "assistant", "content": content},
        {"role": "user", "content": "Double it", "thread_id": thread_id},
    ]
    stream = client.chat.completions.create(model="DeepAnalyze-8B", stream=True, messages=follow_up)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "<Execute>\n16" in text and "Doubled: 16." in text
    assert (chunks[0].choices[0].delta.model_extra or {})["thread_id"] == thread_id
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert (chunks[-1].model_extra or {})["generated_files"] == []
    execute = [c for c in chunks if c.choices and "<Execute>" in (c.choices[0].delta.content or "")]
    assert len(execute) == 1 and "</Execute>" in (execute[0].choices[0].delta.content or "")  # one whole block


@pytest.mark.kernel
def test_deepanalyze_protocol_streams_the_models_own_tags(
    model: OpenAIServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # serve --model DeepAnalyze-8B alone: the model's name chooses its protocol
    agent = {"model": "DeepAnalyze-8B", "protocol": None}
    with ServiceServer(tmp_path_factory.mktemp("da"), model.base_url, keys={KEY}, agent=agent) as running:
        model.add(
            Reply("<Analyze>Compute.</Analyze>\n<Code>\nprint(6 * 7)\n", stop_reason="</Code>"),
            Reply("<Answer>It is 42.</Answer>"),
        )
        with openai.OpenAI(base_url=running.url + "/v1", api_key=KEY, max_retries=0) as sdk:
            reply = sdk.chat.completions.create(model="DeepAnalyze-8B", messages=[{"role": "user", "content": "6*7?"}])
    assert reply.choices[0].message.content == (
        "<Analyze>Compute.</Analyze>\n<Code>\nprint(6 * 7)\n</Code>\n<Execute>\n42\n</Execute>\n<Answer>It is "
        "42.</Answer>"
    )
    asked = model.requests[-1]
    assert asked["stop"] == ["</Code>"] and asked["messages"][0]["content"].startswith("# Instruction\n")


def body_of(error: openai.APIStatusError) -> dict[str, Any]:
    """The error's JSON body (the SDK types it as any object)."""
    assert isinstance(error.body, dict), error.body
    return error.body


def test_bad_chat_requests_get_clear_errors(client: openai.OpenAI) -> None:
    """Each refusal reaches the SDK in OpenAI's error shape, so its exception prints the reason."""
    unknown: list[Any] = [{"role": "user", "content": "x", "thread_id": "thread-nope"}]
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="m", messages=unknown)
    assert str(missing.value) == "Error code: 404 - no thread thread-nope" and missing.value.code == "not_found"
    with pytest.raises(openai.UnprocessableEntityError) as unusable:
        client.chat.completions.create(model="m", messages=[{"role": "system", "content": "only a system message"}])
    assert "user" in body_of(unusable.value)["message"] and unusable.value.type == "invalid_request_error"
    with pytest.raises(openai.UnprocessableEntityError) as invalid:
        client.chat.completions.create(model="m", messages="not a list")  # type: ignore[arg-type]
    assert invalid.value.param == "messages" and body_of(invalid.value)["message"].startswith("messages: ")
    with (
        closed_by_their_owners(),
        pytest.raises(openai.AuthenticationError) as stranger,
        openai.OpenAI(base_url=str(client.base_url), api_key="wrong", max_retries=0) as wrong,
    ):
        wrong.models.list()
    assert "Authorization: Bearer KEY" in str(stranger.value) and stranger.value.code == "invalid_api_key"
    with pytest.raises(openai.NotFoundError) as nowhere:
        client.get("/nowhere", cast_to=object)
    assert body_of(nowhere.value)["message"] == "no such route: GET /v1/nowhere"


@pytest.mark.parametrize("protocol", ["tags", "deepanalyze"])
def test_a_tagged_protocol_passes_through_once(protocol: str) -> None:
    """The model already writes <Analyze>/<Code>/<Answer>: the transcript has each once, never nested."""
    writer = TagWriter(protocol)
    reply = "<Analyze>Look.</Analyze>\n<Code>\n```python\nprint(1)\n```\n</Code>"
    events: list[dict[str, Any]] = [
        {"event": "round_started"},
        {"event": "text_delta", "text": reply},
        {"event": "code_ready", "code": "print(1)", "reasoning": "Look."},
        {"event": "execution_finished", "result": {"text": "1\n"}},
        {"event": "round_started"},
        {"event": "text_delta", "text": "<Answer>one</Answer>"},
        {"event": "answer", "answer": "one"},
    ]
    text = "".join(writer.feed(event) for event in events)
    assert text.count("print(1)") == 1 and text.count("<Analyze>") == 1 and text.count("<Answer>") == 1
    assert "<Analyze>\n<Analyze>" not in text and "<Execute>" in text


@pytest.mark.kernel
def test_a_deepanalyze_thread_replays_its_turns_and_marks_a_rejected_reply(
    model: OpenAIServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The stream says a reply was rejected instead of gluing it to the next; the follow-up's request carries
    the first turn as DeepAnalyze's server sends it: the question, then the assistant's own tagged turn."""
    agent = {"model": "DeepAnalyze-8B", "protocol": None}
    with ServiceServer(tmp_path_factory.mktemp("da2"), model.base_url, keys={KEY}, agent=agent) as running:
        model.add(
            Reply("I will just think about it."),
            Reply("<Analyze>Compute.</Analyze>\n<Code>\nanswer = 6 * 7\nprint(answer)\n", stop_reason="</Code>"),
            Reply("<Answer>It is 42.</Answer>"),
        )
        with openai.OpenAI(base_url=running.url + "/v1", api_key=KEY, max_retries=0) as sdk:
            chunks = list(
                sdk.chat.completions.create(
                    model="DeepAnalyze-8B", stream=True, messages=[{"role": "user", "content": "6*7?"}]
                )
            )
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            thread_id = (chunks[-1].model_extra or {})["thread_id"]
            model.add(Reply("<Answer>Doubled: 84.</Answer>"))
            again: list[Any] = [  # thread_id: ours
                {"role": "user", "content": "6*7?"},
                {"role": "assistant", "content": text},
                {"role": "user", "content": "Double it", "thread_id": thread_id},
            ]
            sdk.chat.completions.create(model="DeepAnalyze-8B", messages=again)
    assert text.startswith("I will just think about it.\n[reply rejected: no <Code> or <Answer> tag]\n<Analyze>")
    follow_up = model.requests[-1]["messages"]
    assert [m["role"] for m in follow_up] == ["user", "assistant", "user"]
    assert follow_up[0]["content"] == "6*7?"
    assert follow_up[1]["content"] == (
        "<Analyze>Compute.</Analyze>\n<Code>\nanswer = 6 * 7\nprint(answer)\n</Code>\n"
        "<Execute>\n42\n</Execute>\n<Answer>It is 42.</Answer>"
    )
    assert follow_up[2]["content"].startswith("# Instruction\nDouble it")


@pytest.mark.parametrize("protocol", ["tags", "tools"])
def test_a_rejected_reply_is_marked_not_glued_to_the_next(protocol: str) -> None:
    writer = TagWriter(protocol)
    events: list[dict[str, Any]] = [
        {"event": "round_started"},
        {"event": "text_delta", "text": "Let me think."},
        {"event": "notice", "message": "round 1: no <Code> or <Answer> tag", "round": 1},
        {"event": "round_finished", "round": {"status": "no-code", "problem": "no <Code> or <Answer> tag"}},
        {"event": "round_started"},
        {"event": "text_delta", "text": "<Answer>done</Answer>" if protocol == "tags" else "done"},
        {"event": "answer", "answer": "done"},
    ]
    text = "".join(writer.feed(event) for event in events)
    assert (
        text.index("Let me think.") < text.index("\n[reply rejected: no <Code> or <Answer> tag]\n") < text.index("done")
    )
    assert "Let me think.<Answer>" not in text and text.count("<Answer>done") + text.count("<Answer>\ndone") == 1
    # tools: the reply's text streams as analysis before it is known to be the answer, which then comes whole
    assert text.count("done") == (1 if protocol == "tags" else 2)


def test_a_partly_used_reply_is_marked_before_its_output() -> None:
    writer = TagWriter("deepanalyze")
    problem = "a second <Code> block was not run"
    reply = "<Code>\nprint(1)\n</Code>\n<Code>\nprint(2)\n</Code>"
    events: list[dict[str, Any]] = [
        {"event": "round_started"},
        {"event": "text_delta", "text": reply},
        {"event": "notice", "message": f"round 1: {problem}", "round": 1},
        {"event": "code_ready", "code": "print(1)", "reasoning": ""},
        {"event": "execution_finished", "result": {"text": "1\n"}},
    ]
    text = "".join(writer.feed(event) for event in events)
    assert text.endswith(f"</Code>\n[about this reply: {problem}]\n\n<Execute>\n1\n</Execute>\n")
