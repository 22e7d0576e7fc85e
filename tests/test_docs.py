"""The docs say what the code does: the CLI reference holds every command and option, and the README's
quick-start commands run as written.

The CLI reference (``docs/reference/cli.md``) is rendered here exactly as the site renders it (the
``mkdocs-click`` Markdown extension over the click commands), and every command and every option of each
must appear in its own command's section. Every ``kernel-agent`` command line in the README parses against
the real click commands (a renamed or removed option fails here), the ``%%agent`` lines against the magic's
own parser, and its relative links point at files that exist. The README's Python blocks that need no model
run as written, against real kernels (the ``kernel`` tests). The strict site build itself is ``make docs``,
a step of ``make test``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import click
import markdown
import pytest

from kernel_agent.cli.app import cli

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def commands(group: click.Command, path: tuple[str, ...] = ("kernel-agent",)) -> Iterator[tuple[str, click.Command]]:
    """Every command under ``group`` (itself first), by its full name: ``kernel-agent keys add``."""
    yield " ".join(path), group
    if isinstance(group, click.Group):
        for name, command in sorted(group.commands.items()):
            yield from commands(command, (*path, name))


def rendered_cli_reference() -> dict[str, str]:
    """The CLI reference page's HTML, cut into one section per command (keyed by the full name)."""
    text = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    html = markdown.markdown(text, extensions=["attr_list", "tables", "mkdocs-click"])
    parts = re.split(r'<h[2-6][^>]* id="(kernel-agent[\w-]*)"[^>]*>', html)
    return {anchor: body for anchor, body in zip(parts[1::2], parts[2::2], strict=True)}


def test_every_cli_command_and_option_is_in_the_reference() -> None:
    sections = rendered_cli_reference()
    seen = 0
    for name, command in commands(cli):
        anchor = name.replace(" ", "-")
        assert anchor in sections, f"{name} is not in docs/reference/cli.md"
        body = sections[anchor]
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                for flag in param.opts + param.secondary_opts:
                    assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", body), f"{name}: {flag} is missing"
                    seen += 1
            elif isinstance(param, click.Argument):
                assert param.make_metavar(click.Context(command)) in body, f"{name}: argument {param.name}"
    assert seen > 100  # the run, plan, serve, mcp … options, each with its short form


def readme_blocks() -> list[tuple[str, str]]:
    """The README's code: (language, text) per fenced block, ("", text) per indented one."""
    text = README.read_text(encoding="utf-8")
    blocks = [(lang, body) for lang, body in re.findall(r"```(\w*)\n(.*?)```", text, re.S)]
    unfenced = re.sub(r"```.*?```", "", text, flags=re.S)
    indented = re.findall(r"(?:^    .*\n)+", unfenced, re.M)
    return blocks + [("", "\n".join(line[4:] for line in block.splitlines())) for block in indented]


def readme_command_lines() -> list[list[str]]:
    """Every ``kernel-agent …`` line of the README's code, as argv (comments and ``VAR=value`` prefixes off)."""
    lines = []
    for _, block in readme_blocks():
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                words = words[1:]
            if words and words[0] == "kernel-agent":
                lines.append(words[1:])
    return lines


def parse(argv: list[str]) -> None:
    """Parse ``argv`` as ``kernel-agent`` would, down to the last subcommand, without running anything.
    Raises ``click.UsageError`` for an unknown command or option, or a bad value."""
    command: click.Command = cli
    context = command.make_context("kernel-agent", list(argv), resilient_parsing=False)
    while isinstance(command, click.Group):
        with warnings.catch_warnings():  # click 8.2 deprecates protected_args; 9.0 folds them into args
            warnings.simplefilter("ignore", DeprecationWarning)
            rest = [*context.protected_args, *context.args]
        if not rest:
            return
        name, found, remaining = command.resolve_command(context, rest)
        assert found is not None and name is not None
        command = found
        context = command.make_context(name, remaining, parent=context)


def test_the_readme_fits_on_a_screen_or_two() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200


def test_every_kernel_agent_command_in_the_readme_parses() -> None:
    argvs = readme_command_lines()
    assert len(argvs) >= 10, argvs
    for argv in argvs:
        try:
            parse(argv)
        except click.ClickException as exc:
            raise AssertionError(f"kernel-agent {shlex.join(argv)}: {exc.format_message()}") from exc
    subcommands = {argv[0] for argv in argvs}
    assert {"demo", "plan", "run", "serve", "mcp", "show", "replay", "resume"} <= subcommands


def test_a_wrong_option_would_fail_that_check() -> None:
    with pytest.raises(click.NoSuchOption):
        parse(["run", "task", "--no-such-option"])
    with pytest.raises(click.UsageError):
        parse(["no-such-command"])


def test_the_readmes_agent_magic_lines_parse() -> None:
    from IPython.core.magic_arguments import parse_argstring

    from kernel_agent.magic.cell import AgentMagics

    lines = [line for _, block in readme_blocks() for line in block.splitlines() if line.startswith("%%agent")]
    lines += re.findall(r"`(%%agent [^`]*)`", README.read_text(encoding="utf-8"))
    assert any("--scripted-demo" in line for line in lines), lines
    for line in lines:
        args = parse_argstring(AgentMagics.agent, line.removeprefix("%%agent"))
        assert args is not None


def test_the_readmes_links_point_at_files_that_exist() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    local = [link for link in links if "://" not in link]
    assert local and all((ROOT / link).exists() for link in local), [x for x in local if not (ROOT / x).exists()]
    assert not any(link.startswith("..") for link in local)  # nothing outside the repository


def python_block(marker: str) -> str:
    found = [body for lang, body in readme_blocks() if lang == "python" and marker in body]
    assert len(found) == 1, marker
    return found[0]


@pytest.mark.kernel
def test_the_readmes_python_demo_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(python_block("chat_model=demo_model()"), namespace)
    run = namespace["run"]
    assert run.stop_reason == "answer" and run.answer  # type: ignore[attr-defined]
    assert (tmp_path / "try-python").is_dir() and Path(run.notebook_path).is_file()  # type: ignore[attr-defined]


@pytest.mark.kernel
def test_the_readmes_mcp_client_runs_as_written(tmp_path: Path) -> None:
    script = tmp_path / "try_mcp.py"
    script.write_text(python_block("stdio_client"), encoding="utf-8")
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # kernel-agent, as installed
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env={**os.environ, "PATH": path}, capture_output=True, timeout=90
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert "42" in done.stdout.decode()


@pytest.mark.kernel
def test_the_readmes_r_session_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(python_block('kernel_name="ir"'), {})
    assert printed.getvalue().strip() == "[1] 6"


def test_the_site_builds_offline() -> None:
    """No font, script or stylesheet from elsewhere: the theme's web fonts off, no extra assets by URL."""
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8").replace("!!python", "#"))
    assert config["theme"]["font"] is False
    extras = config.get("extra_javascript", []) + config.get("extra_css", [])
    assert not any("://" in str(asset) for asset in extras)
    assert "strict: true" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
