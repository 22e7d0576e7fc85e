"""OpenAIChatModel through the real ``openai`` SDK against the local scripted server."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Sequence
from typing import Any

import openai
import pytest
from openai_server import HTTPError, OpenAIServer, Reply, context_length_error, python_call, tool_call
from ports import closed_port

from kernel_agent.errors import (
    ConfigError,
    ContextLengthError,
    ModelError,
    ModelTimeoutError,
    ModelUnreachableError,
)
from kernel_agent.model.chat import (
    ChatModel,
    ModelReply,
    Piece,
    ReasoningPiece,
    Retry,
    TextPiece,
    ToolCall,
)
from kernel_agent.model.chat import (
    complete as complete_reply,
)
from kernel_agent.model.llm import OpenAIChatModel, endpoint_host
from kernel_agent.model.messages import ChatMessage
from kernel_agent.records import Usage

MESSAGES: list[ChatMessage] = [{"role": "user", "content": "Which region sells most?"}]


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


async def pieces_of(server: OpenAIServer, *, options: dict[str, Any] | None = None, **model_kw: Any) -> list[Piece]:
    """Every piece of one reply's stream, the ``ModelReply`` last."""
    model_kw.setdefault("backoff", 0.01)
    async with OpenAIChatModel("test-model", base_url=server.base_url, **model_kw) as model:
        return [piece async for piece in model.stream(MESSAGES, options)]


async def complete(
    server: OpenAIServer, *, deltas: list[str] | None = None, options: dict[str, Any] | None = None, **model_kw: Any
) -> ModelReply:
    pieces = await pieces_of(server, options=options, **model_kw)
    if deltas is not None:
        deltas += [piece.text for piece in pieces if isinstance(piece, TextPiece)]
    reply = pieces[-1]
    assert isinstance(reply, ModelReply)
    return reply


def fail(server: OpenAIServer, **model_kw: Any) -> ModelError:
    with pytest.raises(ModelError) as info:
        run(complete(server, **model_kw))
    return info.value


# -- replies -----------------------------------------------------------------------


def test_streamed_text(openai_server: OpenAIServer) -> None:
    text = "<Analyze>Look at the data.</Analyze>\n<Code>\nprint(df.head())\n"
    openai_server.add(Reply(text, usage=(120, 30), chunk_size=5))
    deltas: list[str] = []
    reply = run(complete(openai_server, deltas=deltas))
    assert reply == ModelReply(text, finish_reason="stop", usage=Usage(120, 30, 150))
    assert len(deltas) > 5 and "".join(deltas) == text
    [request] = openai_server.requests
    assert request["model"] == "test-model" and request["messages"] == MESSAGES
    assert request["stream"] is True and request["stream_options"] == {"include_usage": True}
    assert "temperature" not in request and "stop" not in request


def test_non_streamed_text(openai_server: OpenAIServer) -> None:
    openai_server.add(Reply("<Answer>East</Answer>", usage=(50, 8)))
    deltas: list[str] = []
    reply = run(complete(openai_server, deltas=deltas, stream=False))
    assert reply == ModelReply("<Answer>East</Answer>", finish_reason="stop", usage=Usage(50, 8, 58))
    assert deltas == []
    assert not openai_server.requests[0].get("stream") and "stream_options" not in openai_server.requests[0]


def test_missing_usage_is_none(openai_server: OpenAIServer) -> None:
    openai_server.add(Reply("a", usage=None), Reply("b", usage=None))
    assert run(complete(openai_server)).usage is None
    assert run(complete(openai_server, stream=False)).usage is None


@pytest.mark.parametrize("stream", [True, False])
def test_tool_calls_are_assembled(openai_server: OpenAIServer, stream: bool) -> None:
    calls = (
        python_call("import pandas as pd\nprint(pd.__version__)", id="call_1"),
        tool_call("execute_python", '{"code": "x', id="call_2"),
    )
    openai_server.add(Reply("Checking versions.", tool_calls=calls, chunk_size=3))
    deltas: list[str] = []
    reply = run(complete(openai_server, deltas=deltas, stream=stream))
    assert reply.text == "Checking versions." and reply.finish_reason == "tool_calls"
    assert reply.tool_calls == (
        ToolCall("call_1", "execute_python", json.dumps({"code": "import pandas as pd\nprint(pd.__version__)"})),
        ToolCall("call_2", "execute_python", '{"code": "x'),
    )
    assert "".join(deltas) == ("Checking versions." if stream else "")


@pytest.mark.parametrize("stream", [True, False])
def test_vllm_stop_reason_is_passed_through(openai_server: OpenAIServer, stream: bool) -> None:
    openai_server.add(Reply("<Code>\n", stop_reason="</Code>"), Reply("eos", stop_reason=151645), Reply("plain"))
    assert run(complete(openai_server, stream=stream)).stop_reason == "</Code>"
    assert run(complete(openai_server, stream=stream)).stop_reason == 151645
    assert run(complete(openai_server, stream=stream)).stop_reason is None


def test_finish_reason_length(openai_server: OpenAIServer) -> None:
    openai_server.add(Reply("cut", finish_reason="length"))
    assert run(complete(openai_server)).finish_reason == "length"


def test_request_fields_reach_the_server(openai_server: OpenAIServer) -> None:
    openai_server.add(Reply("ok"))
    tools = [{"type": "function", "function": {"name": "execute_python", "parameters": {"type": "object"}}}]
    options = {"stop": ["</Code>"], "tools": tools, "tool_choice": "auto", "extra_body": {"min_p": 0.1}}
    run(complete(openai_server, options=options, temperature=0.3, extra_body={"top_k": 20, "max_tokens": 512}))
    request = openai_server.last_request
    assert request["stop"] == ["</Code>"] and request["tools"] == tools and request["tool_choice"] == "auto"
    assert request["temperature"] == 0.3
    assert (request["top_k"], request["max_tokens"], request["min_p"]) == (20, 512, 0.1)


def test_callable_entry_sees_what_was_sent(openai_server: OpenAIServer) -> None:
    def check(body: dict[str, Any]) -> Reply:
        assert body["messages"][-1]["content"].startswith("Which region")
        return Reply("seen " + str(len(body["messages"])))

    openai_server.add(check)
    assert run(complete(openai_server)).text == "seen 1"


# -- keys -------------------------------------------------------------------------


def test_no_api_key_uses_a_placeholder(openai_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    openai_server.add(Reply("a"), Reply("b"))
    run(complete(openai_server))
    run(complete(openai_server, api_key="sk-explicit"))
    auth = [headers["authorization"] for headers in openai_server.request_headers]
    assert auth == ["Bearer not-needed", "Bearer sk-explicit"]


def test_api_key_falls_back_to_the_environment(openai_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    openai_server.add(Reply("a"))
    run(complete(openai_server))
    assert openai_server.request_headers[0]["authorization"] == "Bearer sk-from-env"


# -- retries and errors -----------------------------------------------------------


def test_server_error_then_success_is_retried(openai_server: OpenAIServer) -> None:
    openai_server.add(HTTPError(500), HTTPError(503), Reply("recovered"))
    assert run(complete(openai_server)).text == "recovered"
    assert len(openai_server.requests) == 3


def test_rate_limit_is_retried(openai_server: OpenAIServer) -> None:
    openai_server.add(HTTPError(429, "slow down", type="rate_limit_error", headers={"retry-after": "0"}), Reply("ok"))
    assert run(complete(openai_server, stream=False)).text == "ok"
    assert len(openai_server.requests) == 2


def test_persistent_server_error_gives_up_after_the_retries(openai_server: OpenAIServer) -> None:
    openai_server.add(*[HTTPError(500, "engine overloaded")] * 4, Reply("too late"))
    error = fail(openai_server, max_retries=2)
    assert type(error) is ModelError and error.status_code == 500
    assert "engine overloaded" in str(error) and "HTTP 500" in str(error) and "3 attempts" in str(error)
    assert isinstance(error.__cause__, openai.InternalServerError)
    assert len(openai_server.requests) == 3 and openai_server.remaining == 2


def test_context_length_is_not_retried(openai_server: OpenAIServer) -> None:
    openai_server.add(context_length_error(), Reply("never"))
    error = fail(openai_server)
    assert isinstance(error, ContextLengthError) and error.status_code == 400
    assert "maximum context length" in str(error)
    assert isinstance(error.__cause__, openai.BadRequestError)
    assert len(openai_server.requests) == 1 and openai_server.remaining == 1


def test_vllm_style_context_error_without_a_code(openai_server: OpenAIServer) -> None:
    message = "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens."
    openai_server.add(HTTPError(400, message, type="BadRequestError"))
    assert isinstance(fail(openai_server, stream=False), ContextLengthError)


@pytest.mark.parametrize("status", [400, 401, 404])
def test_other_client_errors_are_not_retried(openai_server: OpenAIServer, status: int) -> None:
    openai_server.add(HTTPError(status, "bad model name", type="invalid_request_error"), Reply("never"))
    error = fail(openai_server)
    assert type(error) is ModelError and error.status_code == status and "bad model name" in str(error)
    assert ("check the API key" in str(error)) == (status == 401)
    assert len(openai_server.requests) == 1


async def complete_at(base_url: str, **model_kw: Any) -> ModelReply:
    async with OpenAIChatModel("m", base_url=base_url, **model_kw) as model:
        return await complete_reply(model, MESSAGES)


def test_connection_refused_is_unreachable() -> None:
    with closed_port() as port, pytest.raises(ModelUnreachableError) as info:  # bound here, nobody listens
        run(complete_at(f"http://user:secret@127.0.0.1:{port}/v1", max_retries=1, backoff=0.01))
    message = str(info.value)
    assert f"http://127.0.0.1:{port}/v1" in message and "secret" not in message
    assert "connection refused" in message and "2 attempts" in message and "server is running" in message
    assert isinstance(info.value.__cause__, openai.APIConnectionError)


def test_a_server_that_takes_the_request_but_never_answers_is_a_timeout_not_retried() -> None:
    with socket.socket() as silent:  # accepts connections (backlog) but never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        with pytest.raises(ModelTimeoutError) as info:
            run(complete_at(f"http://127.0.0.1:{port}/v1", max_retries=3, backoff=0.01, request_timeout=0.2))
    message = str(info.value)
    assert "did not start replying within 0.2 s" in message and "--request-timeout" in message
    assert "cannot reach" not in message and "server is running" not in message
    assert info.value.timeout == 0.2 and isinstance(info.value, TimeoutError)
    assert isinstance(info.value.__cause__, openai.APITimeoutError)


def test_stream_dying_midway_is_retried(openai_server: OpenAIServer) -> None:
    openai_server.add(Reply("partial answer text", chunk_size=4, die_after=3), Reply("full answer"))
    *pieces, reply = run(pieces_of(openai_server))
    assert isinstance(reply, ModelReply) and reply.text == "full answer" and reply.finish_reason == "stop"
    # the broken attempt's pieces, the retry with its reason (what came before it is void), the retried reply
    assert pieces[:2] == [TextPiece("part"), TextPiece("ial ")] and pieces[3:] == [TextPiece("full answer")]
    assert isinstance(pieces[2], Retry) and "closed the stream early" in pieces[2].reason
    assert len(openai_server.requests) == 2


def test_stream_that_keeps_dying_is_a_model_error(openai_server: OpenAIServer) -> None:
    openai_server.add(*[Reply("abcdefgh", chunk_size=2, die_after=2)] * 2)
    error = fail(openai_server, max_retries=1)
    assert type(error) is ModelError and "closed the stream early" in str(error)
    assert isinstance(error.__cause__.__cause__, openai.APIConnectionError)  # type: ignore[union-attr]
    assert len(openai_server.requests) == 2


def test_non_streamed_body_cut_short_is_retried(openai_server: OpenAIServer) -> None:
    openai_server.add(Reply("x" * 200, die_after=0), Reply("whole"))
    assert run(complete(openai_server, stream=False)).text == "whole"
    assert len(openai_server.requests) == 2


def test_script_running_out_fails_loudly(openai_server: OpenAIServer) -> None:
    error = fail(openai_server, max_retries=0)
    assert error.status_code == 500 and "script ran out" in str(error)


# -- the model object --------------------------------------------------------------


def test_model_is_a_chat_model() -> None:
    model = OpenAIChatModel("gpt-x", base_url="http://localhost:8000/v1")
    assert isinstance(model, ChatModel)
    assert model.name == "gpt-x" and model.scripted is False and model.endpoint == "localhost:8000"
    assert repr(model) == "<OpenAIChatModel gpt-x @ localhost:8000>"
    run(model.aclose())  # never opened: a no-op


def test_aclose_is_idempotent_and_the_model_reopens(openai_server: OpenAIServer) -> None:
    openai_server.add(Reply("one"), Reply("two"))

    async def go() -> list[str]:
        model = OpenAIChatModel("m", base_url=openai_server.base_url)
        first = await complete_reply(model, MESSAGES)
        await model.aclose()
        await model.aclose()
        second = await complete_reply(model, MESSAGES)
        await model.aclose()
        return [first.text, second.text]

    assert run(go()) == ["one", "two"]


@pytest.mark.parametrize("kwargs", [{"max_retries": -1}, {"backoff": -0.1}, {"request_timeout": 0}])
def test_bad_settings_are_config_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        OpenAIChatModel("m", **kwargs)
    with pytest.raises(ConfigError):
        OpenAIChatModel("")


@pytest.mark.parametrize(
    ("url", "host"),
    [
        (None, "api.openai.com"),
        ("https://api.openai.com/v1", "api.openai.com"),
        ("http://localhost:8000/v1", "localhost:8000"),
        ("http://user:pa55@10.0.0.5:8000/v1?key=k", "10.0.0.5:8000"),
        ("localhost:11434/v1", "localhost:11434"),
        ("http://[::1]:8000/v1", "[::1]:8000"),
        ("http://host:notaport/v1", "host"),
    ],
)
def test_endpoint_host(url: str | None, host: str) -> None:
    assert endpoint_host(url) == host


def test_importing_the_package_modules_does_not_load_openai() -> None:
    code = (
        "import sys, kernel_agent.model.llm, kernel_agent.agent.protocols;"
        "assert 'openai' not in sys.modules, 'openai'; assert 'PIL' not in sys.modules, 'PIL'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the test server itself ------------------------------------------------------


def test_server_shuts_down_without_leftover_threads() -> None:
    before = set(threading.enumerate())
    with OpenAIServer([Reply("a"), Reply("b", die_after=1)]) as server:
        run(complete(server, max_retries=0))
        with pytest.raises(ModelError):
            run(complete(server, max_retries=0))
        # a client that never closes its connection must not keep a thread alive
        dangling = socket.create_connection(("127.0.0.1", server.port))
        try:
            server.close()
        finally:
            dangling.close()
    assert set(threading.enumerate()) - before == set()


def test_server_reraises_a_failing_callable() -> None:
    def check(body: dict[str, Any]) -> Reply:
        raise AssertionError("the traceback never reached the model")

    server = OpenAIServer([check]).start()
    error = fail(server, max_retries=0)
    assert error.status_code == 500
    with pytest.raises(AssertionError, match="traceback never reached"):
        server.close()
    server.close()  # idempotent once the error was raised


# -- reasoning models and slow models ------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_reasoning_content_is_kept_apart_from_the_text(openai_server: OpenAIServer, stream: bool) -> None:
    openai_server.add(
        Reply(
            "<Answer>42</Answer>",
            reasoning="The user wants 6*7. That is 42.",
            usage=(50, 30),
            reasoning_tokens=12,
            chunk_size=5,
        )
    )
    *pieces, reply = run(pieces_of(openai_server, stream=stream))
    thoughts = [piece.text for piece in pieces if isinstance(piece, ReasoningPiece)]
    deltas = [piece.text for piece in pieces if isinstance(piece, TextPiece)]
    assert (
        isinstance(reply, ModelReply)
        and reply.text == "<Answer>42</Answer>"
        and reply.reasoning == "The user wants 6*7. That is 42."
    )
    assert reply.usage == Usage(50, 30, 80, 12)
    if stream:
        assert "".join(thoughts) == reply.reasoning and len(thoughts) > 1 and "".join(deltas) == reply.text


def test_a_slow_prefill_is_a_timeout_that_is_not_retried(openai_server: OpenAIServer) -> None:
    openai_server.add(Reply("late", pause=1.0), Reply("never sent"))
    error = fail(openai_server, request_timeout=0.3, max_retries=3)
    assert isinstance(error, ModelTimeoutError) and error.received == 0
    assert "did not start replying within 0.3 s" in str(error) and "--request-timeout" in str(error)
    assert "cannot reach" not in str(error)
    assert len(openai_server.requests) == 1  # no second request piled on a server still generating


def test_a_stream_that_keeps_producing_tokens_never_times_out(openai_server: OpenAIServer) -> None:
    # 12 chunks 0.1 s apart: the whole reply takes ~1.2 s, four times the timeout.
    openai_server.add(Reply("slow but steady", chunk_size=2, chunk_pause=0.1))
    reply = run(complete(openai_server, request_timeout=0.3))
    assert reply.text == "slow but steady" and len(openai_server.requests) == 1


def test_a_stream_that_stalls_is_a_timeout_naming_what_arrived(openai_server: OpenAIServer) -> None:
    openai_server.add(Reply("abcdefgh", chunk_size=4, stall_after=2), Reply("never sent"))
    error = fail(openai_server, request_timeout=0.3, max_retries=2)
    assert isinstance(error, ModelTimeoutError) and error.received == 4
    assert "streamed 4 characters of its reply, then sent nothing for 0.3 s" in str(error)
    assert len(openai_server.requests) == 1


def test_request_timeout_and_extras_come_from_flags_or_the_environment() -> None:
    from click.testing import CliRunner

    from kernel_agent.agent.config import AgentConfig
    from kernel_agent.agent.run.agent import AsyncAgent
    from kernel_agent.cli.app import cli

    env = {"KERNEL_AGENT_REQUEST_TIMEOUT": "900", "KERNEL_AGENT_VLLM_EXTRAS": "0", "KERNEL_AGENT_DATA_FORMAT": "rich"}
    config = AgentConfig.resolve(env)
    assert (config.model.request_timeout, config.protocol.vllm_extras, config.protocol.data_format) == (
        900.0,
        False,
        "rich",
    )
    assert AgentConfig.resolve(env, request_timeout=5.0, vllm_extras=True).model.request_timeout == 5.0
    with pytest.raises(ConfigError, match="KERNEL_AGENT_REQUEST_TIMEOUT"):
        AgentConfig.resolve({"KERNEL_AGENT_REQUEST_TIMEOUT": "soon"})
    with pytest.raises(ConfigError, match="KERNEL_AGENT_VLLM_EXTRAS"):
        AgentConfig.resolve({"KERNEL_AGENT_VLLM_EXTRAS": "maybe"})
    agent = AsyncAgent(model="m", base_url="http://127.0.0.1:9/v1", request_timeout=42.0)
    assert agent.chat_model.request_timeout == 42.0  # type: ignore[attr-defined]
    assert AsyncAgent(model="m").chat_model.request_timeout == 600.0  # type: ignore[attr-defined]
    help_text = CliRunner().invoke(cli, ["run", "--help"]).output
    assert "--request-timeout" in help_text and "--no-vllm-extras" in help_text and "--data-format" in help_text


def test_the_users_extra_body_wins_over_the_protocols(openai_server: OpenAIServer) -> None:
    openai_server.add(Reply("ok"))
    protocol = {"stop": ["</Code>"], "extra_body": {"max_new_tokens": 32768, "add_generation_prompt": False}}
    run(complete(openai_server, options=protocol, extra_body={"max_new_tokens": 512, "top_k": 20}))
    sent = openai_server.requests[0]
    assert (sent["max_new_tokens"], sent["top_k"], sent["add_generation_prompt"]) == (512, 20, False)


# -- the stream ---------------------------------------------------------------------


def test_a_consumer_that_stops_early_closes_the_request(openai_server: OpenAIServer) -> None:
    """Closing the stream after its first piece drops the HTTP request: the server, which goes on writing
    the rest of the reply once the client has stopped reading, finds the connection closed."""
    release = threading.Event()
    openai_server.add(Reply("x" * 2000, chunk_size=4, hold_after=3, hold=release))

    async def go() -> tuple[Piece, bool]:
        async with OpenAIChatModel("m", base_url=openai_server.base_url) as model:
            pieces = model.stream(MESSAGES)
            assert isinstance(pieces, AsyncGenerator)
            first = await anext(pieces)
            await pieces.aclose()
            release.set()  # the server writes the rest now, to a connection the client has closed
            # while the model (and its connection pool) is still open: the stream's close is what hung up
            return first, await asyncio.to_thread(openai_server.hung_up.wait, 30)

    assert run(go()) == (TextPiece("xxxx"), True)


class _Mute:
    """A broken plug-in: its stream ends without the reply."""

    name = "mute"
    scripted = False

    async def stream(
        self, messages: Sequence[ChatMessage], options: dict[str, Any] | None = None
    ) -> AsyncIterator[Piece]:
        yield TextPiece("thinking...")

    async def aclose(self) -> None:
        pass


def test_a_stream_that_ends_without_its_reply_is_a_model_error() -> None:
    model = _Mute()
    assert isinstance(model, ChatModel)
    with pytest.raises(ModelError, match="'mute' ended its stream without a reply"):
        run(complete_reply(model, MESSAGES))
