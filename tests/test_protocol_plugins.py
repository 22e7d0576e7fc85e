"""Plug-ins are found through the ``kernel_agent.*`` entry points: ours are registered there, and a third
party's package (a real distribution on ``sys.path``, written by the test: its module and its ``.dist-info``
with ``entry_points.txt``) adds a protocol, a model, a kernel provider and a language; ``run --protocol theirs
--model theirs:x`` uses the first two, end to end."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click
import nbformat
import pytest
from click.testing import CliRunner
from openai_server import OpenAIServer, Reply

from kernel_agent import AsyncAgent, plugins
from kernel_agent.agent.languages import PYTHON, language_names, language_of
from kernel_agent.agent.names import PROTOCOLS, protocol_entry_points, protocol_names
from kernel_agent.agent.protocols import ProtocolSettings, TagsProtocol, ToolsProtocol, get_protocol
from kernel_agent.cli import cli
from kernel_agent.errors import ConfigError
from kernel_agent.kernel.providers.registry import PROVIDERS, ProviderSettings, make_provider, provider_names
from kernel_agent.model.llm import OpenAIChatModel
from kernel_agent.model.registry import ModelSettings, make_model, model_names

MARK = "THEIR-OWN-SYSTEM-PROMPT"

THEIR_MODULE = f'''
from dataclasses import dataclass, replace
from typing import ClassVar

from kernel_agent.agent.languages import PYTHON
from kernel_agent.agent.protocols import TagsProtocol
from kernel_agent.kernel.sandbox.limits import Limits
from kernel_agent.model.chat import ModelReply

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

    async def complete(
        self, messages, *, options=None, on_delta=None, on_retry=None, on_reasoning=None, on_tool_delta=None
    ):
        SEEN.append((self.model, self.settings, [dict(m) for m in messages]))
        return ModelReply(REPLIES.pop(0), finish_reason="stop")

    async def aclose(self):
        pass


def model(name, settings):
    return TheirModel(name, settings)


class TheirProvider:
    owns_kernel = True
    limits = Limits.off()
    client = None
    workspace = None
    dropped_messages = 0

    def __init__(self, settings):
        self.settings = settings

    async def start(self):
        raise RuntimeError("never started in these tests")

    async def is_alive(self):
        return False

    async def interrupt(self):
        pass

    async def restart(self):
        return {{}}

    def describe_exit(self):
        return "never started"

    async def close(self):
        pass


def provider(settings):
    return TheirProvider(settings)


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
broken = their_plugin:broken
missing = their_plugin_gone:provider

[kernel_agent.languages]
julia = their_plugin:JULIA
broken = their_plugin:broken
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
        + ["--base-url", openai_server.base_url, "--workspace", str(tmp_path / "ws"), "--out", str(notebook)]
        + ["--quiet"],
        catch_exceptions=False,
    )

    assert result.exit_code == 0, result.output
    assert openai_server.requests == []  # their model answered, not the OpenAI-compatible client
    (name, settings, first), (_, _, second) = their_plugin.SEEN
    assert name == "x" and isinstance(settings, ModelSettings)
    assert settings.base_url == openai_server.base_url and settings.request_timeout == 42
    assert first[0] == {"role": "system", "content": MARK}  # their protocol's prompt
    assert "42" in str(second[-1]["content"])  # the kernel's output fed back through their protocol
    meta = nbformat.read(notebook, as_version=4).metadata["kernel_agent"]
    assert meta["protocol"] == "theirs" and meta["model"] == "theirs:x" and meta["answer"] == "42."


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

    assert provider_names() == (*PROVIDERS, "broken", "missing", "theirs")
    session = AsyncKernelSession(tmp_path, provider="theirs", kernel_name="their-spec", env={"A": "1"})
    assert type(session.provider).__name__ == "TheirProvider" and session.kernel_name == "their-spec"
    made = session.provider.settings  # type: ignore[attr-defined]
    assert (made.workspace, made.kernel_name, dict(made.env)) == (tmp_path, "their-spec", {"A": "1"})
    with pytest.raises(ConfigError, match="made a str, not a provider"):
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
