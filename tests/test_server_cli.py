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
