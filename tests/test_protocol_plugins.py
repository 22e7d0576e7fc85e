"""Plug-ins are found through the ``kernel_agent.*`` entry points: ours are registered there, and a third
party's package (a real distribution on ``sys.path``, written by the test: its module and its ``.dist-info``
with ``entry_points.txt``) adds a protocol, a model (written against the stream contract: text, reasoning
and a retry as pieces, then the reply), a kernel provider and a language; ``run --protocol theirs --model
theirs:x`` uses the first two, end to end."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click
import nbformat
import pytest
from click.testing import CliRunner
from openai_server import OpenAIServer, Reply

from kernel_agent import AsyncAgent, __version__, plugins
from kernel_agent.agent.config import AgentConfig
from kernel_agent.agent.languages import PYTHON, language_names, language_of
from kernel_agent.agent.names import PROTOCOLS, protocol_entry_points, protocol_names
from kernel_agent.agent.protocols import ProtocolSettings, TagsProtocol, ToolsProtocol, get_protocol
from kernel_agent.cli import cli
from kernel_agent.errors import ConfigError
from kernel_agent.kernel.providers.base import supports_sockets
from kernel_agent.kernel.providers.registry import PROVIDERS, ProviderSettings, make_provider, provider_names
from kernel_agent.kernel.session import AsyncKernelSession
from kernel_agent.model.llm import OpenAIChatModel
from kernel_agent.model.registry import ModelSettings, make_model, model_names
from kernel_agent.model.scripted import ScriptedChatModel
from kernel_agent.notebook.load import load_run

MARK = "THEIR-OWN-SYSTEM-PROMPT"
RETRY = "their backend hiccuped"
THOUGHT = "six times seven, in the kernel"

THEIR_MODULE = f'''
from dataclasses import dataclass, replace
from typing import ClassVar

from kernel_agent.agent.languages import PYTHON
from kernel_agent.agent.protocols import TagsProtocol
import json

from kernel_agent.kernel.kernelspec import KERNEL_NAME
from kernel_agent.kernel.providers.local import LocalProvider
from kernel_agent.model.chat import ModelReply, ReasoningPiece, Retry, TextPiece, ToolCall, ToolCallDelta

REPLIES = []  # what their model says next, in order (the test fills it)
SEEN = []  # (name, settings, messages) of every request their model was sent


@dataclass(frozen=True)
class TheirProtocol(TagsProtocol):
    name: ClassVar[str] = "theirs"

    def initial_messages(self, ctx):
        messages = super().initial_messages(ctx)
        return [{{"role": "system", "content": "{MARK}"}}, *messages[1:]]


def make(settings):
    return TheirProtocol(vision=settings.vision, language=settings.language)


def broken(settings):
    return "not a protocol"


def broken_model(name, settings):
    return "not a model"


class TheirModel:
    \"\"\"A model of their own, in process (as a local llama.cpp binding would be).\"\"\"

    scripted = False

    def __init__(self, name, settings):
        self.name = "theirs:" + name  # resumable: the prefix finds this plug-in again
        self.model = name
        self.settings = settings

    async def stream(self, messages, options=None):
        SEEN.append((self.model, self.settings, [dict(m) for m in messages]))
        text, thought = REPLIES.pop(0), ""
        if len(SEEN) == 1:  # the first request fails once: what came before the retry is void
            yield TextPiece("a false start")
            yield Retry("{RETRY}")
            thought = "{THOUGHT}"
            yield ReasoningPiece(thought)
        if (options or {{}}).get("tools") and text.startswith("CALL:"):  # the tools protocol: code as a tool call
            arguments = json.dumps({{"code": text[len("CALL:"):]}})
            for start in range(0, len(arguments), 7):
                yield ToolCallDelta(0, "execute_python", arguments[start : start + 7])
            call = ToolCall("call_1", "execute_python", arguments)
            yield ModelReply("", tool_calls=(call,), finish_reason="tool_calls", reasoning=thought)
            return
        for start in range(0, len(text), 5):
            yield TextPiece(text[start : start + 5])
        yield ModelReply(text, finish_reason="stop", reasoning=thought)

    async def aclose(self):
        pass


def model(name, settings):
    return TheirModel(name, settings)


STARTED = []  # the settings of every kernel their provider started


class TheirProvider(LocalProvider):
    """Their kernels: ours underneath (as a container runtime would be theirs), each start noted; as a subclass
    it inherits ``supports_sockets``, so it passes the sockets on."""

    def __init__(self, settings):
        self.settings = settings
        super().__init__(
            settings.workspace,
            kernel_name=settings.kernel_name or KERNEL_NAME,
            env=dict(settings.env),
            allow_env=settings.allow_env,
            startup_timeout=settings.startup_timeout,
            limits=settings.limits,
            python=settings.python,
            sockets=settings.sockets,
        )

    async def start(self):
        STARTED.append(self.settings)
        return await super().start()


def provider(settings):
    return TheirProvider(settings)


class TheirRemoteProvider:
    """Their kernels on another machine (here ours underneath, by delegation): it says nothing of sockets."""

    owns_kernel = True

    def __init__(self, settings):
        self._inner = TheirProvider(settings)
        self.limits = self._inner.limits

    client = property(lambda self: self._inner.client)
    workspace = property(lambda self: self._inner.workspace)
    dropped_messages = property(lambda self: self._inner.dropped_messages)

    async def start(self):
        return await self._inner.start()

    async def is_alive(self):
        return await self._inner.is_alive()

    async def interrupt(self):
        await self._inner.interrupt()

    async def restart(self):
        return await self._inner.restart()

    def describe_exit(self):
        return self._inner.describe_exit()

    async def close(self):
        await self._inner.close()


def remote_provider(settings):
    return TheirRemoteProvider(settings)


JULIA = replace(PYTHON, key="julia", name="Julia", fence="julia", fences=("julia", "jl"), tool="execute_julia")
'''


ENTRY_POINTS = """
[kernel_agent.protocols]
theirs = their_plugin:make
broken = their_plugin:broken

[kernel_agent.models]
theirs = their_plugin:model
broken = their_plugin:broken_model

[kernel_agent.providers]
theirs = their_plugin:provider
remote = their_plugin:remote_provider
broken = their_plugin:broken
missing = their_plugin_gone:provider

[kernel_agent.languages]
julia = their_plugin:JULIA
broken = their_plugin:broken

[kernel_agent.themes]
dark = their_plugin:DARK
"""


@pytest.fixture
def their_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A third party's installed package: its module and dist-info on ``sys.path``, read afresh."""
    site = tmp_path / "site"
    (site / "their_plugin-0.1.dist-info").mkdir(parents=True)
    (site / "their_plugin.py").write_text(THEIR_MODULE)
    (site / "their_plugin-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: their-plugin\nVersion: 0.1\n"
    )
    (site / "their_plugin-0.1.dist-info" / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "their_plugin", raising=False)  # this test's copy, not an earlier one
    plugins.forget()
    yield site
    sys.modules.pop("their_plugin", None)
    plugins.forget()  # the next lookup reads sys.path without it


def test_our_protocols_are_registered_as_a_third_partys_are() -> None:
    assert protocol_names()[:3] == PROTOCOLS
    assert {
        name: entry.dist and entry.dist.name for name, entry in protocol_entry_points().items() if name in PROTOCOLS
    } == {name: "kernel-agent" for name in PROTOCOLS}
    assert isinstance(get_protocol("TOOLS"), ToolsProtocol)
    assert isinstance(get_protocol("tags", vision=True), TagsProtocol)
    with pytest.raises(ConfigError, match="cannot send images"):
        get_protocol("deepanalyze", vision=True)
    with pytest.raises(ConfigError, match="unknown protocol 'theirs'"):
        get_protocol("theirs")


def test_a_third_party_protocol_is_found_and_checked(their_package: Path) -> None:
    assert protocol_names() == (*PROTOCOLS, "broken", "theirs")
    protocol = get_protocol("theirs")
    assert protocol.name == "theirs" and isinstance(protocol, TagsProtocol)
    with pytest.raises(ConfigError, match="made a str, not a Protocol"):
        get_protocol("broken")
    assert isinstance(ProtocolSettings(), ProtocolSettings)


def test_the_cli_offers_the_registered_protocols(their_package: Path) -> None:
    protocol_option = next(p for p in cli.commands["run"].params if p.name == "protocol")
    assert isinstance(protocol_option.type, click.Choice)
    assert "theirs" in protocol_option.type.choices
    result = CliRunner().invoke(cli, ["run", "--help"])
    assert "theirs" in result.output


@pytest.mark.kernel
def test_run_with_a_third_party_protocol(
    their_package: Path, openai_server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    openai_server.add(Reply("Compute it.\n<Code>\n```python\nprint(6 * 7)\n```\n</Code>"))
    openai_server.add(Reply("<Answer>The answer is 42.</Answer>"))
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    notebook = tmp_path / "run.ipynb"

    result = CliRunner().invoke(
        cli,
        ["run", "Compute 6 x 7", "--model", "qwen2.5:7b", "--protocol", "theirs"]
        + ["--workspace", str(tmp_path / "ws"), "--out", str(notebook), "--quiet"],
        catch_exceptions=False,
    )

    assert result.exit_code == 0, result.output
    assert openai_server.requests[0]["model"] == "qwen2.5:7b"  # no plug-in is called qwen2.5: the endpoint's, whole
    first = openai_server.requests[0]["messages"]
    assert first[0] == {"role": "system", "content": MARK}  # their prompt, not ours
    assert "tools" not in openai_server.requests[0]  # a tags protocol: no function calling
    assert "42" in str(openai_server.requests[1]["messages"][-1]["content"])  # the kernel's output fed back
    meta = nbformat.read(notebook, as_version=4).metadata["kernel_agent"]
    assert meta["protocol"] == "theirs" and meta["answer"] == "The answer is 42."


@pytest.mark.kernel
def test_run_with_a_third_party_protocol_and_model(
    their_package: Path, openai_server: OpenAIServer, tmp_path: Path
) -> None:
    import their_plugin  # type: ignore[import-not-found]  # the package this test installed

    their_plugin.REPLIES[:] = ["Compute it.\n<Code>\n```python\nprint(6 * 7)\n```\n</Code>", "<Answer>42.</Answer>"]
    notebook = tmp_path / "run.ipynb"

    result = CliRunner().invoke(
        cli,
        ["run", "Compute 6 x 7", "--model", "theirs:x", "--protocol", "theirs", "--request-timeout", "42"]
        + ["--base-url", openai_server.base_url, "--workspace", str(tmp_path / "ws"), "--out", str(notebook)],
        catch_exceptions=False,
    )

    assert result.exit_code == 0, result.output
    assert f"model request failed: {RETRY}" in result.output  # their Retry piece, as the front end shows it
    assert openai_server.requests == []  # their model answered, not the OpenAI-compatible client
    (name, settings, first), (_, _, second) = their_plugin.SEEN
    assert name == "x" and isinstance(settings, ModelSettings)
    assert settings.base_url == openai_server.base_url and settings.request_timeout == 42
    assert first[0] == {"role": "system", "content": MARK}  # their protocol's prompt
    assert "42" in str(second[-1]["content"])  # the kernel's output fed back through their protocol
    meta = nbformat.read(notebook, as_version=4).metadata["kernel_agent"]
    assert meta["protocol"] == "theirs" and meta["model"] == "theirs:x" and meta["answer"] == "42."
    first_round = load_run(notebook).run.rounds[0]
    assert first_round.reasoning_content == THOUGHT
    assert first_round.result is not None and first_round.result.stdout == "42\n"


@pytest.mark.kernel
def test_a_third_party_models_streamed_tool_call_reaches_the_event_stream(
    their_package: Path, openai_server: OpenAIServer, tmp_path: Path
) -> None:
    """Their model with our ``tools`` protocol: its ``ToolCallDelta`` pieces stream as the round's code, its
    ``Retry`` and ``ReasoningPiece`` as events, in ``run --json``'s lines."""
    import their_plugin  # the package this test installed

    their_plugin.REPLIES[:] = ["CALL:print(6 * 7)", "It is 42."]
    notebook = tmp_path / "run.ipynb"

    result = CliRunner().invoke(
        cli,
        ["run", "Compute 6 x 7", "--model", "theirs:x", "--protocol", "tools", "--json"]
        + ["--base-url", openai_server.base_url, "--workspace", str(tmp_path / "ws"), "--out", str(notebook)],
        catch_exceptions=False,
    )

    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    kinds = [event["event"] for event in events]
    assert kinds.index("text_reset") < kinds.index("reasoning_delta") < kinds.index("code_delta")
    assert [e["reason"] for e in events if e["event"] == "text_reset"] == [RETRY]
    assert "".join(e["text"] for e in events if e["event"] == "reasoning_delta") == THOUGHT
    streamed = [e["text"] for e in events if e["event"] == "code_delta" and e["round"] == 1]
    assert len(streamed) > 1 and "".join(streamed) == "print(6 * 7)"  # decoded from the pieces as they came
    (output,) = [e for e in events if e["event"] == "execution_finished"]
    assert output["result"]["stdout"] == "42\n"
    assert openai_server.requests == []
    assert load_run(notebook).run.answer == "It is 42."


def test_a_model_name_goes_to_a_plug_in_only_by_its_registered_prefix(their_package: Path) -> None:
    assert model_names() == ("openai", "broken", "theirs")
    theirs = make_model("Theirs:llama3:8b", ModelSettings(temperature=0.1))
    assert theirs.name == "theirs:llama3:8b" and type(theirs).__name__ == "TheirModel"
    for plain in ("qwen2.5:7b", "ollama/llama3:8b", "gpt-4o", "theirs", "theirs:", "openai/theirs:x"):
        made = make_model(plain, ModelSettings())
        assert isinstance(made, OpenAIChatModel) and made.name == plain, plain
    explicit = make_model("openai:gpt-4o", ModelSettings(request_timeout=5, options={"max_retries": 0}))
    assert isinstance(explicit, OpenAIChatModel) and (explicit.name, explicit.request_timeout) == ("gpt-4o", 5)
    with pytest.raises(ConfigError, match="made a str, not a ChatModel"):
        make_model("broken:x", ModelSettings())
    agent = AsyncAgent(model="theirs:x", protocol="theirs", api_key="sk-not-for-their-model")
    settings = vars(agent.chat_model)["settings"]  # their model keeps what it was made with
    assert agent.chat_model.name == "theirs:x" and settings.api_key == "sk-not-for-their-model"
    assert "sk-not" not in repr(settings)  # a secret is never in a repr


def test_a_third_party_kernel_provider_is_made_by_name(their_package: Path, tmp_path: Path) -> None:
    from kernel_agent.kernel.session import AsyncKernelSession

    assert provider_names() == (*PROVIDERS, "broken", "missing", "remote", "theirs")
    session = AsyncKernelSession(tmp_path, provider="theirs", kernel_name="their-spec", env={"A": "1"})
    assert type(session.provider).__name__ == "TheirProvider" and session.kernel_name == "their-spec"
    made = session.provider.settings  # type: ignore[attr-defined]
    assert (made.workspace, made.kernel_name, dict(made.env)) == (tmp_path, "their-spec", {"A": "1"})
    with pytest.raises(ConfigError, match="made a str, not a KernelProvider"):
        make_provider("broken", ProviderSettings())
    with pytest.raises(ConfigError, match="'missing' .*their_plugin_gone.* cannot be loaded"):
        make_provider("missing", ProviderSettings())


def test_a_third_party_language_is_the_kernels_by_its_name(their_package: Path) -> None:
    assert language_names() == ("python", "r", "broken", "julia")
    julia = language_of({"name": "Julia"})
    assert (julia.key, julia.tool) == ("julia", "execute_julia")
    assert language_of({"name": "python"}) is PYTHON
    with pytest.raises(ConfigError, match="is a function, not a Language"):
        language_of({"name": "broken"})


def test_the_plugins_command_lists_every_groups_entries_and_where_they_come_from(their_package: Path) -> None:
    said = CliRunner().invoke(cli, ["plugins"], catch_exceptions=False)
    assert said.exit_code == 0, said.output
    lines = [line.split() for line in said.output.splitlines()]
    groups = [line[0] for line in lines if len(line) == 1]
    ours = ("languages", "models", "protocols", "providers", "sources")
    assert groups == [f"kernel_agent.{group}" for group in (*ours, "themes")]
    assert ["theirs", "their_plugin:provider", "their-plugin", "0.1"] in lines
    assert ["dark", "their_plugin:DARK", "their-plugin", "0.1"] in lines  # a group we do not know of, too
    assert ["tools", "kernel_agent.agent.protocols.tools:tools_protocol", "kernel-agent", __version__] in lines

    listed = json.loads(CliRunner().invoke(cli, ["plugins", "--json"], catch_exceptions=False).output)
    assert {
        "group": "kernel_agent.models",
        "name": "theirs",
        "object": "their_plugin:model",
        "distribution": "their-plugin",
        "version": "0.1",
    } in listed
    assert {(row["group"], row["name"]) for row in listed if row["distribution"] == "kernel-agent"} == {
        *(("kernel_agent.protocols", name) for name in PROTOCOLS),
        ("kernel_agent.models", "openai"),
        *(("kernel_agent.providers", name) for name in PROVIDERS),
        ("kernel_agent.languages", "python"),
        ("kernel_agent.languages", "r"),
        ("kernel_agent.sources", "postgresql"),
    }


@pytest.mark.kernel
def test_run_on_a_third_party_kernel_provider_chosen_from_the_command_line(
    their_package: Path, openai_server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import their_plugin  # the package this test installed

    openai_server.add(Reply("Compute it.\n<Code>\n```python\nprint(6 * 7)\n```\n</Code>"))
    openai_server.add(Reply("<Answer>The answer is 42.</Answer>"))
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    their_plugin.STARTED.clear()

    result = CliRunner().invoke(
        cli,
        ["run", "Compute 6 x 7", "--model", "m", "--protocol", "tags", "--provider", "theirs"]
        + ["--workspace", str(tmp_path / "ws"), "--out", str(tmp_path / "run.ipynb"), "--quiet"],
        catch_exceptions=False,
    )

    assert result.exit_code == 0, result.output
    (settings,) = their_plugin.STARTED  # their provider started the run's kernel
    assert settings.workspace == tmp_path / "ws" and settings.limits.sandbox == "strict"  # our settings, carried
    assert "42" in str(openai_server.requests[1]["messages"][-1]["content"])  # the kernel's output fed back
    meta = nbformat.read(tmp_path / "run.ipynb", as_version=4).metadata["kernel_agent"]
    assert meta["answer"] == "The answer is 42."


def test_an_unknown_kernel_provider_is_a_usage_error_naming_the_installed_ones(
    their_package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # never asked: refused before any request
    run = ["run", "t", "--model", "m", "--workspace", str(tmp_path / "ws")]
    flagged = CliRunner().invoke(cli, [*run, "--provider", "nope"])
    assert flagged.exit_code == 2 and "'nope' is not one of 'local', 'gateway', 'attached'" in flagged.output
    assert "'theirs'" in flagged.output
    monkeypatch.setenv("KERNEL_AGENT_PROVIDER", "nope")
    from_environment = CliRunner().invoke(cli, run)
    assert from_environment.exit_code == 2
    assert "unknown provider 'nope'; choose one of local, gateway, attached, broken, missing, remote, theirs" in (
        from_environment.output
    )
    assert not (tmp_path / "ws").exists()  # nothing was started


def test_a_live_source_on_a_provider_that_does_not_bind_sockets_is_refused_before_any_model_call(
    their_package: Path, tmp_path: Path, refused_port: int
) -> None:
    assert type(make_provider("remote", ProviderSettings(workspace=tmp_path))).__name__ == "TheirRemoteProvider"
    assert supports_sockets(make_provider("theirs", ProviderSettings())) and not supports_sockets(object())
    with pytest.raises(ConfigError, match="the kernel provider 'remote' cannot give its kernel a socket"):
        make_provider("remote", ProviderSettings(sockets={"KERNEL_AGENT_SQL": tmp_path / "sql.sock"}))
    made = make_provider("theirs", ProviderSettings(workspace=tmp_path))
    with pytest.raises(ConfigError, match="a kernel provider already made cannot be given sockets"):
        AsyncKernelSession(tmp_path, provider=made, sockets={"KERNEL_AGENT_SQL": tmp_path / "sql.sock"})
    model = ScriptedChatModel(["<Answer>never</Answer>"])

    async def run() -> None:
        async with AsyncAgent(chat_model=model, provider="remote") as agent:
            await agent.run("t", data=[f"shop=postgresql://ann@127.0.0.1:{refused_port}/shop"], workspace=tmp_path)

    with pytest.raises(ConfigError, match=r"'remote' cannot give its kernel a socket .*\(--provider local\)"):
        asyncio.run(run())
    assert model.remaining == 1  # no model call
    assert not list(Path(tempfile.gettempdir()).glob("kernel-agent-sql-*"))  # the broker's folder is gone


def test_the_provider_setting_reaches_the_sessions_of_every_front_end(their_package: Path, tmp_path: Path) -> None:
    agent = AsyncAgent(model="m", base_url="http://127.0.0.1:9/v1", provider="theirs")
    session = agent.new_session(tmp_path)  # run, resume, plan, eval and the service's threads start theirs so
    assert type(session.provider).__name__ == "TheirProvider" and session.provider.settings.limits is not None  # type: ignore[attr-defined]
    kernels = AgentConfig.resolve({"KERNEL_AGENT_PROVIDER": "theirs"}).kernel
    assert kernels.session_options()["provider"] == "theirs"  # what mcp's sessions and the service's pool are made with
    assert kernels.ahead() is None and AgentConfig.resolve({}).kernel.ahead() is not None  # theirs: unknown ahead
    assert "provider" not in AgentConfig.resolve({}).kernel.session_options()  # unset: the session's default
    with pytest.raises(ConfigError, match="the local provider runs no kernel on a gateway"):
        AgentConfig.resolve({}, provider="local", gateway_url="http://gw:8888")
