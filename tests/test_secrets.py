"""The model API key never reaches a kernel, a notebook, an event, an error message or a log.

The end-to-end test runs the real CLI as a subprocess with ``--api-key-file``
against the scripted OpenAI server: round 1's model code dumps everything the
kernel can see (its environment, every readable ``/proc/*/cmdline`` and
``/proc/*/environ``) into the workspace, round 2 is a 401 whose body echoes the
key, as some servers do. Then every artifact of the run is searched for the key.
"""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from openai_server import HTTPError, OpenAIServer, Reply, python_call

from kernel_agent.cli import cli
from kernel_agent.errors import ConfigError
from kernel_agent.redact import REDACTED, RedactingFilter, read_secret, redact

KEY = "sk-test-7f3a9c2e5b1d4f6a8e0c"

DUMP = """\
import glob, os
parts = [repr(dict(os.environ))]
for name in glob.glob('/proc/[0-9]*/cmdline') + glob.glob('/proc/[0-9]*/environ'):
    try:
        parts.append(open(name, 'rb').read().decode('latin-1'))
    except OSError:
        pass
open('seen.txt', 'w').write('\\n'.join(parts))
print(len(parts), 'sources dumped')
"""


def test_redact_replaces_every_occurrence_and_ignores_tiny_values() -> None:
    assert redact(f"key={KEY}; again {KEY}", [KEY, None, "ab"]) == f"key={REDACTED}; again {REDACTED}"
    assert redact("a b ab", ["ab"]) == "a b ab"  # too short to be a key; scrubbing it would mangle text


def test_redacting_filter_scrubs_arguments_and_tracebacks() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter([KEY]))
    logger = logging.getLogger("kernel_agent.test_secrets")
    logger.addHandler(handler)
    try:
        logger.warning("sending %s", KEY)
        try:
            raise RuntimeError(f"401: bad key {KEY}")
        except RuntimeError:
            logger.exception("the request failed")
    finally:
        logger.removeHandler(handler)
    logged = stream.getvalue()
    assert KEY not in logged
    assert f"sending {REDACTED}" in logged and f"401: bad key {REDACTED}" in logged


def test_the_cli_log_handler_scrubs_the_key_from_any_logger(capsys: pytest.CaptureFixture[str]) -> None:
    from kernel_agent.cli import logs

    logs.install_log_handler()
    try:
        logs.hide_in_logs(KEY)
        logging.getLogger("openai._base_client").warning("retrying with Authorization: Bearer %s", KEY)
    finally:
        if logs._handler is not None:
            logging.getLogger().removeHandler(logs._handler)
        logs._handler = None
    logged = capsys.readouterr().err
    assert f"Bearer {REDACTED}" in logged and KEY not in logged


def test_a_model_error_echoing_the_key_carries_it_nowhere(openai_server: OpenAIServer) -> None:
    import asyncio
    import traceback

    from kernel_agent.errors import ModelError
    from kernel_agent.model.chat import complete
    from kernel_agent.model.llm import OpenAIChatModel

    openai_server.add(HTTPError(401, f"Incorrect API key provided: {KEY}.", type="invalid_request_error"))

    async def ask() -> None:
        async with OpenAIChatModel("m", base_url=openai_server.base_url, api_key=KEY, max_retries=0) as model:
            await complete(model, [{"role": "user", "content": "hi"}])

    with pytest.raises(ModelError) as caught:
        asyncio.run(ask())
    shown = "".join(traceback.format_exception(caught.value)) + repr(caught.value)
    assert "HTTP 401" in shown and REDACTED in shown
    assert KEY not in shown  # the SDK error (its body and repr hold the key) is not chained


def test_read_secret_from_a_file_and_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "key"
    path.write_text(f"\n  {KEY}  \n")
    assert read_secret(str(path)) == KEY
    monkeypatch.setattr(sys, "stdin", io.StringIO(KEY + "\n"))
    assert read_secret("-") == KEY
    path.write_text(f"{KEY}\nsecond line {KEY}\n")
    with pytest.raises(ConfigError, match="one line") as two_lines:
        read_secret(str(path))
    path.write_bytes(b"\xff" + KEY.encode())
    with pytest.raises(ConfigError) as undecodable:
        read_secret(str(path))
    for error in (two_lines.value, undecodable.value):
        assert KEY not in str(error) and error.__cause__ is None
        assert error.__context__ is None or error.__suppress_context__


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (("--api-key", "x" * 10, "--api-key-file", "f"), "", "one way"),
        (("--api-key-stdin",), "", "no API key in standard input"),
        (("--api-key-file", "/nonexistent/key"), "", "cannot read the API key from /nonexistent/key"),
    ],
)
def test_bad_key_options_exit_2_before_anything_starts(args: tuple[str, ...], stdin: str, message: str) -> None:
    result = CliRunner().invoke(cli, ["run", "task", "--model", "m", *args], input=stdin)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_task_and_key_cannot_both_come_from_stdin() -> None:
    result = CliRunner().invoke(cli, ["run", "-", "--model", "m", "--api-key-stdin"], input=KEY)
    assert result.exit_code == 2 and "both be read from stdin" in result.output


def test_help_steers_the_key_off_the_command_line() -> None:
    help_text = CliRunner().invoke(cli, ["run", "--help"]).output
    assert "--api-key-file" in help_text and "--api-key-stdin" in help_text and "ps" in help_text


@pytest.mark.kernel
def test_a_run_leaves_the_key_in_no_artifact(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(Reply("Look around.", tool_calls=(python_call(DUMP),)))
    openai_server.add(HTTPError(401, f"Incorrect API key provided: {KEY}.", type="invalid_request_error"))
    key_file = tmp_path / "key.txt"
    key_file.write_text(KEY + "\n")
    workspace, notebook = tmp_path / "ws", tmp_path / "run.ipynb"
    command = [
        sys.executable,
        "-m",
        "kernel_agent.cli",
        "run",
        "Find the key",
        "--model",
        "m",
        "--base-url",
        openai_server.base_url,
        "--api-key-file",
        str(key_file),
        "--workspace",
        str(workspace),
        "--out",
        str(notebook),
        "--json",
    ]
    environment = {k: v for k, v in __import__("os").environ.items() if k != "OPENAI_API_KEY"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment)

    assert done.returncode == 1, done.stderr  # the 401 ends the run without an answer
    assert all(h.get("authorization") == f"Bearer {KEY}" for h in openai_server.request_headers)
    seen = (workspace / "seen.txt").read_text(encoding="latin-1")
    assert "sources dumped" in notebook.read_text() and len(seen) > 1000  # the dump really ran
    assert "HTTP 401" in done.stdout and REDACTED in done.stdout  # the error is there, scrubbed
    artifacts = {"stdout": done.stdout, "stderr": done.stderr}
    for path in tmp_path.rglob("*"):
        if path.is_file() and path != key_file:
            artifacts[str(path)] = path.read_text(encoding="latin-1")
    leaked = [name for name, text in artifacts.items() if KEY in text]
    assert leaked == []
