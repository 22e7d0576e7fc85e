"""``kernel-agent serve`` refuses to start unsafely or half-configured, with a clear message and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_agent.cli import cli


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--model", "m"], "the service needs at least one key"),
        (["--model", "m", "--no-auth", "--host", "0.0.0.0"], "--no-auth is allowed only on a loopback address"),
        (["--no-auth"], "no model configured"),
        (["--model", "m", "--keys-file", "missing-keys.txt"], "cannot read the keys file"),
        (["--demo", "--model", "m"], "serve --demo plays the scripted demo replies; drop --model"),
        (["--demo", "--protocol", "tools"], "the scripted demo replies use the tags protocol"),
        (["--demo", "--host", "0.0.0.0"], "the service needs at least one key"),  # no key needed on loopback only
    ],
)
def test_serve_refuses_to_start_unsafely(arguments: list[str], message: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["serve", "--data-dir", str(tmp_path / "data"), *arguments])
    assert result.exit_code == 2 and message in result.output, result.output


def test_serve_reads_keys_from_a_file_and_never_prints_them(tmp_path: Path) -> None:
    from kernel_agent.server.config import load_keys

    keys = tmp_path / "keys.txt"
    keys.write_text("# service keys\nfirst-secret\n\n second-secret \n")
    assert load_keys(keys) == {"first-secret", "second-secret"}
    assert load_keys(None, {"KERNEL_AGENT_SERVER_KEYS": "a, b,,"}) == {"a", "b"}
    from kernel_agent.server.config import ServerConfig

    assert "first-secret" not in repr(ServerConfig(tmp_path, keys=load_keys(keys)))


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("shop=postgresql://ann:hunter2@db/shop", "~/.pgpass"),
        ("shop=postgresql://ann@db/shop?password=hunter2", "~/.pgpass"),
        ("sales.csv", "not a file"),
    ],
)
def test_serve_refuses_a_source_with_a_password_or_a_file_and_never_echoes_it(
    given: str, message: str, tmp_path: Path
) -> None:
    arguments = ["serve", "--data-dir", str(tmp_path / "data"), "--model", "m", "--no-auth"]
    by_flag = CliRunner().invoke(cli, [*arguments, "--source", given])
    by_env = CliRunner().invoke(cli, arguments, env={"KERNEL_AGENT_SERVER_SOURCES": given})
    for result in (by_flag, by_env):
        assert result.exit_code == 2 and message in result.output, result.output
        assert "hunter2" not in result.output


def test_serve_refuses_two_sources_of_one_name(tmp_path: Path) -> None:
    from kernel_agent.errors import ConfigError
    from kernel_agent.server.config import ServerConfig

    with pytest.raises(ConfigError, match="two data sources are named 'shop'"):
        ServerConfig(tmp_path, sources=("shop=postgresql://ann@a/shop", "shop=postgresql://bob@b/shop"))
    with pytest.raises(ConfigError, match="--source needs kernels on this machine"):
        ServerConfig(tmp_path, agent={"gateway_url": "http://gw:8888"}, sources=("postgresql://ann@a/shop",))
    offered = ServerConfig(tmp_path, sources=("postgresql://ann@a/shop", "crm=postgresql:///?service=crm"))
    assert {name: spec.kind for name, spec in offered.source_specs().items()} == {
        "shop": "postgresql",
        "crm": "postgresql",
    }
