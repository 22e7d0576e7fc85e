"""The docs site's generated reference pages (run by mkdocs-gen-files at every `mkdocs build`).

Each page is written from the code it documents, so it cannot drift: the events from
``kernel_agent.events``, the HTTP API from the FastAPI app's OpenAPI schema, the MCP tools from the
server's own tool list, the configuration from the settings tables (``agent/settings.py``, each flag checked
against the ``run`` command's; then every command's options, each from the row click knows it by), the exit
codes from ``cli/drive.py``. The CLI reference is mkdocs-click's
(``docs/reference/cli.md``); the Python API is mkdocstrings' (``docs/reference/python.md``). A name this
script cannot place fails the build (an exception), never a silent gap.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import re
import tempfile
import typing
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import click
import mkdocs_gen_files

import kernel_agent.events as events_module
from kernel_agent.agent.settings import SETTINGS, Setting
from kernel_agent.cli import drive
from kernel_agent.cli.app import cli
from kernel_agent.cli.options import SettingOption, secret_flags

GENERATED = "*This page is generated from the code at every build (`tools/docs_reference.py`).*\n\n"


def write(path: str, text: str) -> None:
    with mkdocs_gen_files.open(path, "w") as out:
        out.write(text)
    if path.endswith(".md"):
        mkdocs_gen_files.set_edit_path(path, "../tools/docs_reference.py")


def cell(text: object) -> str:
    """``text`` fit for one cell of a Markdown table."""
    return " ".join(str(text).split()).replace("|", "\\|")


def table(header: Iterable[str], rows: Iterable[Iterable[object]]) -> str:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def type_name(annotation: object) -> str:
    """``int``, ``str | None``, ``Literal['tools', 'tags']``, ``tuple[Artifact, ...]``: module paths left out."""
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_])", "", text)


# -- events ----------------------------------------------------------------------------------------


def events_page() -> str:
    run_events = typing.get_args(events_module.Event)
    plan_only = [e for e in typing.get_args(events_module.PlanEvent) if e not in run_events]
    out = [
        "# Events\n\n",
        GENERATED,
        "Every front end renders one stream of typed events (`kernel_agent.events`): `Agent.stream()` and "
        "`AsyncAgent.stream()` yield them, `kernel-agent run --json` prints `event.to_dict()` one a line "
        '(`{"event": kind, ...fields}`), the service sends them as server-sent events '
        "(`GET /v1/runs/{id}/events`), the magic and the chat draw them. In JSON, an `ExecutionResult` becomes "
        "its status, counts, text and error name (images as a count), a `Round` its index, status, code, answer, "
        "usage, timings and artifacts, a `Run` its answer, stop reason, error, round count, usage and notebook "
        "path.\n\n",
        "## A run's events\n\n",
        "In the order a run sends them: `run_started`, then per round `round_started`, streamed `text_delta` "
        "(and `reasoning_delta`; with `tools`, `code_delta` as the tool call's code streams), `code_ready`, "
        "`execution_started`, `execution_output`…, `execution_finished`, "
        "`round_finished`; `answer` once the model answers; `notice` and `error` when they happen; `finished` "
        "last.\n\n",
    ]
    out += [_event_section(event) for event in run_events]
    out.append(
        "## Plan mode's events\n\n`Agent.stream_plan()` and `kernel-agent plan --json` send these, and also "
        "`notice` and `error`.\n\n"
    )
    out += [_event_section(event) for event in plan_only]
    return "".join(out)


def _event_section(event: type) -> str:
    doc = (event.__doc__ or "").strip()
    if doc.startswith(event.__name__ + "("):  # a dataclass' generated signature is not a description
        doc = ""
    hints = typing.get_type_hints(event)
    comments = dict(re.findall(r"^    (\w+): [^#\n]*#\s*(.*)$", inspect.getsource(event), re.M))
    rows = []
    for f in dataclasses.fields(event):
        default = "" if f.default is dataclasses.MISSING else f"`{f.default!r}`"
        rows.append((f"`{f.name}`", f"`{type_name(hints[f.name])}`", default, comments.get(f.name, "")))
    text = f"### `{event.kind}`\n\n`{event.__name__}`" + (f": {' '.join(doc.split())}" if doc else "") + "\n\n"
    return text + table(["field", "type", "default", "note"], rows) + "\n"


# -- HTTP API --------------------------------------------------------------------------------------


def openapi_schema() -> dict[str, Any]:
    from kernel_agent.server.app import create_app
    from kernel_agent.server.config import ServerConfig

    with tempfile.TemporaryDirectory() as folder:  # the app is built, never started: nothing is written
        return create_app(ServerConfig(data_dir=Path(folder), auth=False)).openapi()


def http_page(schema: dict[str, Any]) -> str:
    out = [
        "# HTTP API\n\n",
        GENERATED,
        f"`kernel-agent serve` (FastAPI, version {schema['info']['version']}). Under `/v1/*` every request "
        "carries `Authorization: Bearer KEY` (unless the server runs with `--no-auth`), and every refusal has "
        'OpenAI\'s error body, `{"error": {"message", "type", "param", "code"}}`. `/health`, `/ready`, '
        "`/metrics` and `/v1/info` need no key. The whole schema: [openapi.json](openapi.json). How to run the "
        "service: [Run the service](../how-to/service.md).\n\n",
    ]
    rows = []
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            description = operation.get("description") or operation.get("summary", "")
            rows.append((f"`{method.upper()} {path}`", _parameters(operation), _body(operation), description))
    out.append(table(["endpoint", "parameters", "body", "what it does"], rows))
    out.append("\n## Request bodies\n\n")
    for name, component in sorted(schema.get("components", {}).get("schemas", {}).items()):
        if name in {"HTTPValidationError", "ValidationError"} or "properties" not in component:
            continue
        required = set(component.get("required", []))
        out.append(f"### `{name}`\n\n")
        if component.get("description"):
            out.append(" ".join(component["description"].split()) + "\n\n")
        props = component["properties"].items()
        out.append(
            table(
                ["field", "type", "required"],
                ((f"`{key}`", f"`{_json_type(value)}`", "yes" if key in required else "") for key, value in props),
            )
        )
        out.append("\n")
    return "".join(out)


def _parameters(operation: dict[str, Any]) -> str:
    params = [f"`{p['name']}` ({p['in']})" for p in operation.get("parameters", [])]
    return ", ".join(params)


def _body(operation: dict[str, Any]) -> str:
    content = operation.get("requestBody", {}).get("content", {})
    names = []
    for media, spec in content.items():
        ref = spec.get("schema", {}).get("$ref", "")
        names.append(f"`{ref.rsplit('/', 1)[-1]}`" if ref and media == "application/json" else f"`{media}`")
    return ", ".join(names)


def _json_type(spec: dict[str, Any]) -> str:
    if "anyOf" in spec:
        return " | ".join(_json_type(s) for s in spec["anyOf"])
    if "enum" in spec:
        return " | ".join(json.dumps(v) for v in spec["enum"])
    if spec.get("type") == "array":
        return f"array of {_json_type(spec.get('items', {}))}"
    return str(spec.get("type", spec.get("$ref", "any").rsplit("/", 1)[-1]))


# -- MCP tools -------------------------------------------------------------------------------------


def mcp_tools() -> list[Any]:
    from kernel_agent.mcp.server import McpOptions, build_server

    with tempfile.TemporaryDirectory() as folder:  # the server is built, never run: no kernel starts
        server = build_server(McpOptions(workspace=Path(folder)))
        return list(asyncio.run(server.list_tools()))


def mcp_page(tools: list[Any]) -> str:
    out = [
        "# MCP tools\n\n",
        GENERATED,
        "`kernel-agent mcp` serves one live, confined kernel over the Model Context Protocol; these are the "
        "tools it lists to a client (`tools/list`), with their arguments. How to register it: "
        "[A tool for your own agent]"
        "(../tutorials/own-agent.md#mcp-server-the-live-kernel-as-a-tool-for-any-agent).\n\n",
    ]
    for tool in tools:
        schema = tool.input_schema if hasattr(tool, "input_schema") else tool.inputSchema
        required = set(schema.get("required", []))
        out.append(f"## `{tool.name}`\n\n{' '.join((tool.description or '').split())}\n\n")
        props = schema.get("properties", {})
        if props:
            rows = (
                (
                    f"`{name}`",
                    f"`{_json_type(spec)}`",
                    "yes" if name in required else "",
                    "" if "default" not in spec else f"`{json.dumps(spec['default'])}`",
                    spec.get("description", ""),
                )
                for name, spec in props.items()
            )
            out.append(table(["argument", "type", "required", "default", "meaning"], rows) + "\n")
        else:
            out.append("No arguments.\n\n")
    return "".join(out)


# -- configuration ---------------------------------------------------------------------------------


def _option_flags(row: Setting) -> list[str]:
    """The command line's flags that set ``row``; fails the build when ``run`` lacks its own."""
    run = {flag for param in cli.commands["run"].params for flag in (*param.opts, *param.secondary_opts)}
    flags = ([f"{row.flag}/--no-{row.flag[2:]}"] if row.negatable else [row.flag]) if row.flag else []
    flags += secret_flags(row.name)
    missing = [flag for flag in flags for single in flag.split("/") if single not in run]
    if missing:
        raise ValueError(f"the run command has no {', '.join(missing)} for the setting {row.name}")
    return flags


def _choices(row: Setting) -> str:
    if row.choices is None:
        return ""
    listed = ", ".join(f"`{name}`" for name in row.choices())
    return listed + (f", or any registered in the `{row.registry}` entry-point group" if row.registry else "")


def _default(row: Setting) -> str:
    value = f"`{row.default!r}`"
    return f"{value} ({row.shown_default})" if row.shown_default else value


def configuration_page() -> str:
    rows = []
    for row in SETTINGS.values():
        kind = row.type.__name__ + (" | None" if row.optional else "")
        rows.append(
            (
                f"`{row.name}`",
                f"`{row.attribute}`",
                f"`{kind}`",
                _default(row),
                f"`{row.env}`" if row.env else "",
                ", ".join(f"`{flag}`" for flag in _option_flags(row)),
                _choices(row),
                row.help + ".",
            )
        )
    return (
        "# Configuration\n\n"
        + GENERATED
        + "An agent's settings are one table (`kernel_agent/agent/settings.py`), from which the command-line "
        "options, the `%%agent` magic's flags, `AgentConfig` and this page are made. Each setting has a keyword "
        "(`Agent(max_rounds=10)`, `AsyncAgent(...)`, `AgentConfig.resolve(...)`) and lives in one of "
        "`AgentConfig`'s three parts: `model` (which model answers and how it is asked), `protocol` (how the "
        "conversation goes) and `kernel` (where the code runs and how it is confined), e.g. "
        "`agent.config.protocol.max_rounds`. One precedence: explicit argument (a keyword, a command-line "
        "option, a magic flag) > environment variable > default. Invalid values raise `ConfigError` before any "
        "kernel starts or any model is called. `run`, `resume`, `plan`, `demo`, `serve` and `eval` take every "
        "option (the [command line](cli.md)); `replay` and `mcp` the kernel's and `--timeout`; the `%%agent` magic "
        "takes each option as its own flag (`%%agent?` lists them); the chat persona a few as `c.KernelAgentPersona.*` "
        "settings ([In JupyterLab](../tutorials/jupyterlab.md)). `api_key` and `gateway_token` are secrets: "
        "never logged, exported, passed to the kernel or shown in a repr.\n\n"
        + table(["keyword", "attribute", "type", "default", "environment", "option", "choices", "meaning"], rows)
        + "\n## Every command's options\n\n"
        "Each command's options, in the order `--help` lists them, from the rows they are made of: the agent's "
        "settings above (`agent`), the service's (`kernel_agent/server/config.py`'s `SERVE`, made into "
        "`ServerConfig`), the MCP server's (`kernel_agent/mcp/settings.py`'s `MCP`, made into `McpOptions`) and "
        "each command's own (`kernel_agent/cli/commands/`, `cli/keys.py`, `cli/eval.py`). A flag's default is "
        "what the command takes when it is not given; an agent setting's environment variable is read by "
        "`AgentConfig`, a command's own by the option.\n\n"
        + "".join(command_section(path, found) for path, found in commands(cli))
    )


def commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command under ``group`` (groups walked, not listed), by its path, in the order they were added."""
    for name, found in group.commands.items():
        if isinstance(found, click.Group):
            yield from commands(found, (*path, name))
        else:
            yield (*path, name), found


def command_section(path: tuple[str, ...], found: click.Command) -> str:
    """One command's options, each from its row; fails the build for an option made without one."""
    rows = []
    for param in found.params:
        if not isinstance(param, click.Option) or param.name == "help":
            continue
        flags = ", ".join(f"`{flag}`" for flag in (*param.opts, *param.secondary_opts))
        if not isinstance(param, SettingOption):
            raise ValueError(f"kernel-agent {' '.join(path)}: {flags} is no settings row's option")
        row = param.setting
        agent = row.part in ("model", "protocol", "kernel")
        secret = param.name != row.name  # --api-key-file and the like: another way to give a secret row
        if secret:
            meaning = param.help or ""
        else:
            meaning = "The agent setting (the table above)." if agent else row.help.rstrip(".") + "."
        rows.append(
            (
                flags,
                f"`{row.name}` ({'agent' if agent else row.part})",
                "" if secret else row.default_text(),
                f"`{row.env}`" if row.env else "",
                meaning,
            )
        )
    heading = f"### `kernel-agent {' '.join(path)}`\n\n"
    return heading + table(["option", "setting", "default", "environment", "meaning"], rows) + "\n"


# -- exit codes ------------------------------------------------------------------------------------

_EXIT_MEANINGS = {
    "EXIT_ANSWER": "the run answered",
    "EXIT_NO_ANSWER": "the run ended without an answer (max rounds, stuck, model error); the notebook is written "
    "all the same. `plan`: some task did not complete. `eval`: a question asked for has no result, or the "
    "machinery failed every question so none was scored (it says how many failed, and how). Also the machinery's "
    "failures: a kernel that will not start, a disk that fills while the data files are copied",
    "EXIT_USAGE": "usage error: a bad flag, a missing data file, no model configured, a notebook `resume` "
    "will not act on, a command whose extra is not installed (`pip install 'kernel-agent[serve]'`), a port "
    "`serve` cannot listen on (in use: the one line names the port and `--port`)",
    "EXIT_INTERRUPTED": "interrupted (Ctrl-C): the running code was interrupted, the notebook saved with the "
    "running round marked `cancelled`, the kernel shut down",
    "EXIT_TERMINATED": "terminated (SIGTERM): the same as Ctrl-C",
}


def exit_codes_page() -> str:
    codes = {name: getattr(drive, name) for name in drive.__all__ if name.startswith("EXIT_")}
    unknown = set(codes) - set(_EXIT_MEANINGS)
    if unknown:
        raise ValueError(f"exit codes without a meaning in tools/docs_reference.py: {', '.join(sorted(unknown))}")
    rows = sorted(((f"`{code}`", f"`{name}`", _EXIT_MEANINGS[name]) for name, code in codes.items()), key=_code)
    return (
        "# Exit codes\n\n"
        + GENERATED
        + "What `kernel-agent run`, `resume`, `demo` and `plan` exit with (`kernel_agent/cli/drive.py`). The first "
        "Ctrl-C (or a SIGTERM) interrupts the running code or generation, saves the notebook (the running round "
        "kept, with its output so far, marked `cancelled`) and shuts the kernel down. Other commands exit 0 on "
        "success, 1 on a failure they name and 2 on a usage error. "
        "Ctrl-C before a run has started saves nothing, says so and prints no next steps; the workspace that run "
        "made holding only its data copies is removed. What each fault does to a run: "
        "[faults](faults.md).\n\n" + table(["code", "name", "meaning"], rows)
    )


def _code(row: tuple[str, str, str]) -> int:
    return int(row[0].strip("`"))


PAGES: dict[str, Callable[[], str]] = {
    "reference/events.md": events_page,
    "reference/mcp.md": lambda: mcp_page(mcp_tools()),
    "reference/configuration.md": configuration_page,
    "reference/exit-codes.md": exit_codes_page,
}


def main() -> None:
    """Write every page into the build's files."""
    schema = openapi_schema()
    write("reference/http.md", http_page(schema))
    write("reference/openapi.json", json.dumps(schema, indent=2) + "\n")
    for path, page in PAGES.items():
        write(path, page())


if __name__ in ("__main__", "<run_path>"):  # mkdocs-gen-files runs it with runpy.run_path; a test imports it
    main()
