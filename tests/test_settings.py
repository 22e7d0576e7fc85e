"""Every agent setting is declared once, in ``agent/settings.py``'s table: the command line's options, the
``%%agent`` magic's flags, ``AgentConfig``'s fields and environment variables and the docs' configuration
reference are all made from it, with the same names, defaults and choices; a protocol a third party
registers (a real distribution on ``sys.path``, written by the test) is offered by the CLI and the magic."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import typing
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pytest
from click.testing import CliRunner
from IPython.core.error import UsageError
from IPython.core.magic_arguments import parse_argstring

from kernel_agent.agent.config import AgentConfig, KernelConfig, ModelConfig, ProtocolConfig, setting_fields
from kernel_agent.agent.settings import SETTINGS, Setting
from kernel_agent.cli import cli
from kernel_agent.cli.options import KERNEL_SETTINGS
from kernel_agent.errors import ConfigError
from kernel_agent.magic.cell import AgentMagics
from kernel_agent.plugins import forget

ROOT = Path(__file__).resolve().parent.parent
FLAGGED = [row for row in SETTINGS.values() if row.flag]
AGENT_COMMANDS = (("run",), ("resume",), ("plan",), ("demo",), ("serve",), ("eval", "run"))
KERNEL_COMMANDS = (("replay",), ("mcp",))
REQUIRED = {
    ("run",): ["task"],
    ("resume",): ["RUN.ipynb", "task"],
    ("eval", "run"): ["SUITE"],
    ("replay",): ["RUN.ipynb"],
}


def command(path: tuple[str, ...]) -> click.Command:
    found: click.Command = cli
    for name in path:
        assert isinstance(found, click.Group)
        found = found.commands[name]
    return found


def option_of(found: click.Command, row: Setting) -> click.Option:
    options = [p for p in found.params if isinstance(p, click.Option) and p.name == row.name]
    assert len(options) == 1, f"{found.name}: {row.name}"
    return options[0]


def magic_action(row: Setting) -> argparse.Action:
    parser = AgentMagics.agent.parser  # IPython's magic_arguments sets it
    actions = [action for action in parser._actions if action.dest == row.name]
    assert len(actions) == 1, row.name
    value: argparse.Action = actions[0]
    return value


def kinds(hint: Any) -> set[type]:
    """The runtime types an annotation allows: ``Literal['a'] | None`` is ``{str, NoneType}``."""
    if typing.get_origin(hint) is typing.Literal:
        return {type(value) for value in typing.get_args(hint)}
    if typing.get_args(hint):
        return set().union(*(kinds(arg) for arg in typing.get_args(hint)))
    return {hint}


def other_value(row: Setting) -> tuple[str, Any]:
    """A valid value of ``row`` that is not its default: as an environment string and as the value."""
    if row.choices is not None:
        value = next(name for name in row.choices() if name != row.default)
        return value, value
    if row.type is bool:
        return ("0", False) if row.default else ("1", True)
    if row.type in (int, float) and row.maximum is not None:  # inside its bounds: the middle
        middle = row.type(((row.minimum or 0) + row.maximum) / 2)
        return str(middle), middle
    if row.type in (int, float):
        other = row.type((row.default or row.minimum or 1) + 7)
        return str(other), other
    return ("http://gateway.invalid:8888", "http://gateway.invalid:8888") if row.name == "gateway_url" else ("x", "x")


def command_line(rows: list[Setting]) -> list[str]:
    """The flags that give each row its ``other_value``."""
    words = []
    for row in rows:
        raw, value = other_value(row)
        flag = row.flag or ""
        words += ([flag] if value else [f"--no-{flag[2:]}"]) if row.type is bool else [flag, raw]
    return words


# -- AgentConfig ---------------------------------------------------------------------------------------


def test_agent_configs_fields_are_the_tables_rows() -> None:
    assert setting_fields() == {row.name: row.attribute for row in SETTINGS.values()}
    defaults = AgentConfig()
    for row in SETTINGS.values():
        part = {"model": ModelConfig, "protocol": ProtocolConfig, "kernel": KernelConfig}[row.part]
        f = next(f for f in dataclasses.fields(part) if f.name == row.field)
        assert getattr(getattr(defaults, row.part), row.field) == row.default, row.name
        assert f.repr is not row.secret, row.name
        hint = typing.get_type_hints(part)[row.field]
        assert kinds(hint) == {row.type} | ({type(None)} if row.optional else set()), (row.name, hint)


def test_secrets_stay_out_of_the_repr() -> None:
    config = AgentConfig.resolve({}, model="m", api_key="SECRET-KEY", gateway_token="SECRET-TOKEN")
    assert "SECRET" not in repr(config)
    assert config.model.api_key == "SECRET-KEY" and config.kernel.gateway_token == "SECRET-TOKEN"


def test_precedence_is_explicit_then_environment_then_default() -> None:
    with_env = [row for row in SETTINGS.values() if row.env]
    assert {row.name for row in with_env} >= {"model", "base_url", "api_key", "sandbox", "gateway_token"}
    for row in with_env:
        raw, value = other_value(row)
        from_env = AgentConfig.resolve({row.env or "": raw}).keywords()[row.name]
        assert from_env == value, row.name
        chosen = (
            row.default
            if row.default is not None
            else row.choices()[-1]
            if row.choices is not None
            else row.type("http://explicit.invalid:1" if row.type is str else row.maximum or 99)
        )
        explicit = AgentConfig.resolve({row.env or "": raw}, **{row.name: chosen}).keywords()[row.name]
        assert explicit == chosen, row.name
    assert AgentConfig.resolve({}).keywords() == {row.name: row.default for row in SETTINGS.values()}


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"max_rounds": 0}, "max_rounds must be at least 1, not 0"),
        ({"exec_timeout": 0}, "exec_timeout must be positive"),
        ({"temperature": 3.0}, "temperature must be between 0 and 2"),
        ({"protocol": "nope"}, "unknown protocol 'nope'; choose one of tools, tags, deepanalyze"),
        ({"data_format": "xml"}, "unknown data format 'xml'; choose one of files, rich"),
        ({"sandbox": "loose"}, "unknown sandbox 'loose'; choose one of strict, off"),
        ({"max_rounds": "3"}, "max_rounds must be an integer, not '3'"),
        ({"vision": 1}, "vision must be true or false"),
        ({"no_such_setting": 1}, "unknown agent option"),
    ],
)
def test_invalid_values_are_refused_by_the_tables_rules(keywords: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        AgentConfig.resolve({}, **keywords)


def test_an_environment_value_of_the_wrong_type_names_its_variable() -> None:
    with pytest.raises(ConfigError, match="KERNEL_AGENT_REQUEST_TIMEOUT must be a number, not 'soon'"):
        AgentConfig.resolve({"KERNEL_AGENT_REQUEST_TIMEOUT": "soon"})


# -- the command line ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", AGENT_COMMANDS + KERNEL_COMMANDS, ids=" ".join)
def test_the_commands_options_are_the_tables_rows(path: tuple[str, ...]) -> None:
    found = command(path)
    rows = FLAGGED if path in AGENT_COMMANDS else [row for row in FLAGGED if row.name in KERNEL_SETTINGS]
    for row in rows:
        option = option_of(found, row)
        assert row.flag in option.opts and (row.short is None or row.short in option.opts), row.name
        assert option.secondary_opts == ([f"--no-{row.flag[2:]}"] if row.negatable else []), row.name
        assert option.help is not None and row.default_text() in option.help, row.name
        assert row.env is None or f"env: {row.env}" in option.help, row.name
        if row.choices is not None:
            assert isinstance(option.type, click.Choice)
            assert tuple(option.type.choices) == row.choices(), row.name
    assert [p.name for p in found.params if p.name in {"api_key_file", "gateway_token_file"}]
    given = found.make_context(path[-1], list(REQUIRED.get(path, ()))).params
    assert {row.name: given[row.name] for row in rows} == dict.fromkeys(r.name for r in rows)  # the env decides


def test_every_table_row_with_a_flag_reaches_the_agent_from_the_command_line() -> None:
    from kernel_agent.cli.options import agent_arguments

    context = command(("run",)).make_context("run", ["task", *command_line(FLAGGED)])
    given = agent_arguments(dict(context.params))
    expected = {row.name: other_value(row)[1] for row in FLAGGED}
    assert {name: given[name] for name in expected} == expected


def test_seconds_per_execution_is_one_option_everywhere() -> None:
    from kernel_agent.cli.options import SettingOption

    for path in AGENT_COMMANDS + KERNEL_COMMANDS:
        timeouts = [p for p in command(path).params if "--timeout" in getattr(p, "opts", ())]
        assert len(timeouts) == 1 and isinstance(timeouts[0], SettingOption), path
        assert timeouts[0].setting is SETTINGS["exec_timeout"] and timeouts[0].name == "exec_timeout", path


def test_seconds_per_execution_has_one_default_everywhere() -> None:
    """The row's default, replay's functions' and the MCP server's: one value, declared below them all."""
    import inspect

    from kernel_agent.kernel.interface import EXEC_TIMEOUT_S
    from kernel_agent.mcp.connections import Workbenches
    from kernel_agent.mcp.server import McpOptions
    from kernel_agent.mcp.workbench import Workbench
    from kernel_agent.notebook.replay import async_replay, replay

    assert SETTINGS["exec_timeout"].default == EXEC_TIMEOUT_S == 120
    assert McpOptions(workspace=ROOT).exec_timeout == EXEC_TIMEOUT_S
    for function in (replay, async_replay, Workbench, Workbenches):
        assert inspect.signature(function).parameters["timeout"].default == EXEC_TIMEOUT_S, function


# -- the service's and the MCP server's tables ---------------------------------------------------------


def test_the_service_config_is_made_from_its_table(tmp_path: Path) -> None:
    from kernel_agent._connections import ConnectionLimits
    from kernel_agent.server.config import SERVE, ServerConfig

    made = {f.name: f for f in dataclasses.fields(ServerConfig) if "setting" in f.metadata}
    assert {f.name: f.metadata["setting"] for f in made.values()} == {name: name for name in made}
    assert set(made) >= {"max_running", "max_live_kernels", "idle_ttl", "max_upload_mb", "pool", "database"}
    config = ServerConfig(tmp_path)
    for name in made:
        assert getattr(config, name) == SERVE[name].default, name
    for f in dataclasses.fields(ConnectionLimits):
        assert f.name not in SERVE or SERVE[f.name].default == f.default, f.name
    option = option_of(command(("serve",)), SERVE["max_live_kernels"])
    assert option.opts == ["--max-live-kernels"] and option.default == 8
    with pytest.raises(ConfigError, match="max_live_kernels must be at least 1, not 0"):
        ServerConfig(tmp_path, max_live_kernels=0)
    assert ServerConfig(tmp_path, max_upload_mb=2).max_upload_bytes == 2 * 1024 * 1024


def test_the_mcp_options_are_made_from_its_table(tmp_path: Path) -> None:
    from kernel_agent.mcp.server import McpOptions
    from kernel_agent.mcp.settings import MCP

    defaults = McpOptions(tmp_path)
    mcp = command(("mcp",))
    for row in MCP.values():
        assert option_of(mcp, row).default == row.default, row.name
        if row.name not in ("workspace", "data", "key_file"):  # the command's: McpOptions holds what they give
            assert getattr(defaults, row.name) == row.default, row.name
    assert defaults.exec_timeout == SETTINGS["exec_timeout"].default
    with pytest.raises(ConfigError, match="max_sessions must be at least 1, not 0"):
        McpOptions(tmp_path, max_sessions=0)
    with pytest.raises(ConfigError, match="session_idle must be between 0 and 604800"):
        McpOptions(tmp_path, session_idle=float("inf"))


# -- the magic ----------------------------------------------------------------------------------------


def test_the_magics_flags_are_the_tables_rows() -> None:
    for row in FLAGGED:
        action = magic_action(row)
        assert row.flag in action.option_strings and (row.short is None or row.short in action.option_strings)
        assert (f"--no-{row.flag[2:]}" in action.option_strings) == row.negatable, row.name  # type: ignore[index]
        assert action.default is None, row.name
        assert action.help is not None and row.default_text() in action.help, row.name
        assert row.env is None or f"env: {row.env}" in action.help, row.name
        assert (None if action.choices is None else tuple(action.choices)) == (row.choices and row.choices())
    from kernel_agent.magic.cell import _agent_options

    options, _ = _agent_options(parse_argstring(AgentMagics.agent, " ".join(command_line(FLAGGED))))
    expected = {row.name: other_value(row)[1] for row in FLAGGED}
    assert {name: options[name] for name in expected} == expected
    defaults, _ = _agent_options(parse_argstring(AgentMagics.agent, ""))
    assert AgentConfig.resolve({}, **defaults).keywords() == AgentConfig.resolve({}).keywords()


def test_plan_modes_budgets_are_one_table_for_the_options_and_plan_options() -> None:
    from kernel_agent.agent.plan.runner import PlanOptions
    from kernel_agent.agent.settings import PLAN

    defaults = PlanOptions()
    plan = command(("plan",))
    for row in PLAN.values():
        assert getattr(defaults, row.name) == row.default == option_of(plan, row).default, row.name
    with pytest.raises(ConfigError, match="max_fix_attempts must be at least 0, not -1"):
        PlanOptions(max_fix_attempts=-1)


# -- the JupyterLab chat persona ----------------------------------------------------------------------


def test_the_personas_settings_are_the_tables_rows() -> None:
    import traitlets

    from kernel_agent.jupyter.persona import KernelAgentPersona

    names = KernelAgentPersona.setting_names()
    assert set(names) == {"model", "base_url", "api_key", "max_rounds", "exec_timeout", "template"}
    kinds = {str: traitlets.Unicode, int: traitlets.Integer, float: traitlets.Float, bool: traitlets.Bool}
    for name, trait in KernelAgentPersona.class_traits(setting=True).items():
        row = SETTINGS[name]
        assert isinstance(trait, traitlets.TraitType)
        assert type(trait) is kinds[row.type] and trait.metadata["config"] is True, name
        assert trait.default_value is None and trait.allow_none, name  # unset: the environment or the default
        assert trait.help.startswith(row.help) and row.described().rstrip(".").split(" [")[-1] in trait.help, name


# -- one kernel setting, end to end -------------------------------------------------------------------


@pytest.mark.parametrize("template", [True, False])
def test_the_template_setting_reaches_the_provider_of_every_local_kernel(template: bool, tmp_path: Path) -> None:
    from kernel_agent.agent.run.agent import AsyncAgent
    from kernel_agent.cli.commands.mcp import _session_builder
    from kernel_agent.kernel.providers.local import LocalProvider
    from kernel_agent.server.config import ServerConfig
    from kernel_agent.server.runtimes import pool_for

    environ = {"KERNEL_AGENT_TEMPLATE": "1" if template else "off"}
    kernels = AgentConfig.resolve(environ).kernel
    assert kernels.template is template
    assert AgentConfig.resolve(environ, template=not template).kernel.template is not template  # explicit wins
    # run, resume, plan, eval, the chat persona and the service's threads: the agent's own sessions
    agent = AsyncAgent(model="m", base_url="http://127.0.0.1:9/v1", template=template)
    for provider in (
        agent.new_session(tmp_path).provider,
        _session_builder(kernels.session_options())(tmp_path).provider,  # the MCP server's sessions
    ):
        assert isinstance(provider, LocalProvider) and provider.template is template
    pool = pool_for(ServerConfig(tmp_path, agent={"template": template}))  # the service's warm pool (and eval's)
    assert pool._options.get("template", True) is template


def test_a_template_value_that_is_no_boolean_names_its_variable() -> None:
    with pytest.raises(ConfigError, match="KERNEL_AGENT_TEMPLATE must be 0 or 1 \\(or true/false\\), not 'cold'"):
        AgentConfig.resolve({"KERNEL_AGENT_TEMPLATE": "cold"})


# -- the docs -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def docs_reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "tools" / "docs_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_configuration_reference_lists_every_row(docs_reference: ModuleType) -> None:
    page = docs_reference.configuration_page().split("## Every command's options")[0]
    lines = {line.split(" | ")[0].strip("| `"): line for line in page.splitlines() if line.startswith("| `")}
    assert list(lines) == list(SETTINGS)
    for row in SETTINGS.values():
        cells = [cell.strip() for cell in lines[row.name].strip("|").split(" | ")]
        assert cells[1] == f"`{row.attribute}`"
        assert cells[3].startswith(f"`{row.default!r}`")
        assert cells[4] == (f"`{row.env}`" if row.env else "")
        assert (row.flag or "--").split("/")[0] in cells[5] or not row.flag
        for name in row.choices() if row.choices else ():
            assert f"`{name}`" in cells[6]
    assert "`--api-key-file`" in lines["api_key"] and "`--gateway-token-file`" in lines["gateway_token"]


def test_the_configuration_reference_lists_every_option_of_every_command(docs_reference: ModuleType) -> None:
    page = docs_reference.configuration_page().split("## Every command's options")[1]
    sections = dict(section.split("`\n", 1) for section in page.split("### `kernel-agent ")[1:])
    listed = list(docs_reference.commands(cli))
    assert list(sections) == [" ".join(path) for path, _ in listed]
    assert {"serve", "mcp", "replay", "keys add", "eval run", "kernelspec install"} <= set(sections)
    for path, found in listed:
        rows = [line for line in sections[" ".join(path)].splitlines() if line.startswith("| `")]
        options = [p for p in found.params if isinstance(p, click.Option) and p.name != "help"]
        assert len(rows) == len(options), path
        for row, option in zip(rows, options, strict=True):
            flags = row.split(" | ")[0]
            assert all(f"`{flag}`" in flags for flag in (*option.opts, *option.secondary_opts)), (path, flags)


def test_an_option_without_a_row_fails_the_reference(docs_reference: ModuleType) -> None:
    @click.command()
    @click.option("--unlisted", help="An option no table declares.")
    def new(unlisted: str | None) -> None:
        """A command given an option by hand."""

    with pytest.raises(ValueError, match="kernel-agent new: `--unlisted` is no settings row's option"):
        docs_reference.command_section(("new",), new)


# -- a third party's protocol -------------------------------------------------------------------------


@pytest.fixture
def their_protocol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An installed distribution that registers the protocol ``theirs`` (only its name is read here)."""
    info = tmp_path / "their_protocol-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: their-protocol\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[kernel_agent.protocols]\ntheirs = their_protocol:make\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    forget()
    yield
    forget()


def test_a_registered_protocol_is_a_choice_of_the_cli_and_the_magic(their_protocol: None) -> None:
    row = SETTINGS["protocol"]
    assert "theirs" in row.choices()  # type: ignore[misc]
    for path in AGENT_COMMANDS:
        option = option_of(command(path), row)
        assert isinstance(option.type, click.Choice) and "theirs" in option.type.choices
    assert "theirs" in CliRunner().invoke(cli, ["run", "--help"]).output
    assert "theirs" in magic_action(row).choices  # type: ignore[operator]
    assert parse_argstring(AgentMagics.agent, "--protocol theirs").protocol == "theirs"
    with pytest.raises(UsageError, match="'theirs'"):  # the refusal lists the registered names
        parse_argstring(AgentMagics.agent, "--protocol nope")


def test_without_it_the_name_is_refused() -> None:
    forget()
    with pytest.raises(UsageError, match="invalid choice: 'theirs'"):
        parse_argstring(AgentMagics.agent, "--protocol theirs")
    result = CliRunner().invoke(cli, ["run", "task", "--protocol", "theirs"])
    assert result.exit_code == 2 and "theirs" in result.output
