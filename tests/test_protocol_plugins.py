"""Protocols are found through the ``kernel_agent.protocols`` entry points: ours are registered there, and a
third party's package (a real distribution on ``sys.path``, written by the test: its module and its
``.dist-info`` with ``entry_points.txt``) adds one that ``run --protocol theirs`` uses, end to end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import nbformat
import pytest
from click.testing import CliRunner
from openai_server import OpenAIServer, Reply

from kernel_agent.agent.names import PROTOCOLS, protocol_entry_points, protocol_names
from kernel_agent.agent.protocols import ProtocolSettings, TagsProtocol, ToolsProtocol, get_protocol
from kernel_agent.cli import cli
from kernel_agent.errors import ConfigError

MARK = "THEIR-OWN-SYSTEM-PROMPT"

THEIR_MODULE = f'''
from dataclasses import dataclass
from typing import ClassVar

from kernel_agent.agent.protocols import TagsProtocol


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
'''


@pytest.fixture
def their_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A third party's installed package: its module and dist-info on ``sys.path``, read afresh."""
    site = tmp_path / "site"
    (site / "their_protocol-0.1.dist-info").mkdir(parents=True)
    (site / "their_protocol.py").write_text(THEIR_MODULE)
    (site / "their_protocol-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: their-protocol\nVersion: 0.1\n"
    )
    (site / "their_protocol-0.1.dist-info" / "entry_points.txt").write_text(
        "[kernel_agent.protocols]\ntheirs = their_protocol:make\nbroken = their_protocol:broken\n"
    )
    monkeypatch.syspath_prepend(str(site))
    protocol_entry_points.cache_clear()
    yield site
    protocol_entry_points.cache_clear()  # the next lookup reads sys.path without it


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
        ["run", "Compute 6 x 7", "--model", "m", "--protocol", "theirs", "--workspace", str(tmp_path / "ws")]
        + ["--out", str(notebook), "--quiet"],
        catch_exceptions=False,
    )

    assert result.exit_code == 0, result.output
    first = openai_server.requests[0]["messages"]
    assert first[0] == {"role": "system", "content": MARK}  # their prompt, not ours
    assert "tools" not in openai_server.requests[0]  # a tags protocol: no function calling
    assert "42" in str(openai_server.requests[1]["messages"][-1]["content"])  # the kernel's output fed back
    meta = nbformat.read(notebook, as_version=4).metadata["kernel_agent"]
    assert meta["protocol"] == "theirs" and meta["answer"] == "The answer is 42."
