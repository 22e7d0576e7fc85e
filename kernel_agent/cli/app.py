"""The ``kernel-agent`` commands (click): ``run``, ``plan``, ``resume``, ``demo``, ``replay``, ``show``, ``serve``,
``mcp``, ``kernelspec install`` (``keys`` is in ``keys.py``, ``eval`` in ``eval.py``).

Each command reads its options, calls the library, renders with ``render``
or ``show``, and translates errors at the edge (``edge.py``): ``ConfigError``,
``DataFileError`` and ``NotebookError`` exit 2 with their message, a
``ModelError`` or ``KernelError`` exits 1, never with a traceback. Exit
codes of runs come from ``drive``: 0 answer, 1 no answer, 130 Ctrl-C,
143 SIGTERM. No analysis logic lives here.

Start-up stays light: at import this module loads click and the option
definitions only; the agent, kernels, notebooks, rich and the servers are
imported inside the command that uses them, so ``--help``, ``--version`` and
every ``COMMAND --help`` answer at once (``tests/test_startup_imports.py``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .._version import __version__
from ..agent.settings import SETTINGS
from ..errors import ConfigError
from ..redact import read_secret
from .drive import EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USAGE, Job
from .edge import Failure
from .edge import edge as _edge
from .eval import eval_group
from .keys import keys as _keys
from .logs import install_log_handler
from .options import agent_arguments as _agent_arguments
from .options import agent_options as _model_options
from .options import kernel_arguments as _kernel_arguments
from .options import kernel_options as _kernel_options
from .options import secret_flags
from .plugins import plugins as _plugins

if TYPE_CHECKING:
    from .render import Renderer

__all__ = ["cli", "main"]

F = TypeVar("F", bound=Callable[..., Any])


def _environment() -> str:
    """The commands' epilog: each setting's environment variable and the flag that wins over it."""
    rows = [row for row in SETTINGS.values() if row.env]
    width = max(len(row.env or "") for row in rows)
    lines = [f"  {row.env:<{width}}  {row.flag or ', '.join(secret_flags(row.name))}" for row in rows]
    return (
        "\n\b\nEnvironment (flags win over it):\n"
        + "\n".join(lines)
        + "\n\n\b\nThe key: prefer --api-key-file FILE (or --api-key-stdin, or OPENAI_API_KEY) to\n"
        "--api-key, which every user of this machine can read from the process list.\n"
        "It never reaches the kernel, the notebook, the events or the log.\n"
    )


_ENVIRONMENT = _environment()


def _output_options(function: F) -> F:
    function = click.option("--json", "as_json", is_flag=True, help="Print one JSON event per line (for scripts).")(
        function
    )
    return click.option("--quiet", "-q", is_flag=True, help="Print only the answer and the notebook path.")(function)


def _renderer(quiet: bool, as_json: bool) -> Renderer:
    from rich.console import Console

    from .render import JsonRenderer, LiveRenderer, QuietRenderer

    if quiet and as_json:
        raise click.UsageError("--quiet and --json cannot be used together")
    if as_json:
        return JsonRenderer(sys.stdout)
    if quiet:
        return QuietRenderer(sys.stdout, sys.stderr)
    return LiveRenderer(Console(highlight=False))


def _run(make_agent: Callable[[], Any], job: Job, renderer: Renderer) -> int:
    from .drive import drive

    try:
        with _edge():
            agent = make_agent()
            _make_parent(job.notebook)
            return drive(agent, job, renderer)
    finally:
        renderer.close()


def _make_parent(notebook: Any) -> None:
    """Create the folder ``--out`` points into, as the workspace's is created."""
    if notebook is None:
        return
    try:
        Path(notebook).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise Failure(f"cannot create the folder for {notebook}: {exc}", EXIT_USAGE) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", "-V", prog_name="kernel-agent")
def cli() -> None:
    """kernel-agent: an LLM analyses your data by writing code in rounds against a live Jupyter
    kernel. Every run is exported as a notebook you can open, review and replay.

    Quick start:

    \b
        kernel-agent demo                                   bundled data, no model needed
        kernel-agent run "What drives sales?" --data sales.csv --model gpt-4o-mini
        kernel-agent show agent-runs/RUN.ipynb              review a run in the terminal
        kernel-agent resume RUN.ipynb "And by month?"       continue it with a follow-up question
        kernel-agent replay RUN.ipynb --check               re-execute it and compare outputs
        kernel-agent eval SUITE --model gpt-4o-mini         score a benchmark suite (InfiAgent-DABench, ...)
    """


@cli.command(epilog=_ENVIRONMENT)
@click.argument("task")
@click.option("--data", "-d", "data", multiple=True, metavar="FILE", help="A data file for the analysis (repeatable).")
@_model_options
@_kernel_options
@click.option(
    "--workspace", "-w", metavar="DIR", help="The run's folder (kernel cwd) [default: ./agent-runs/<time>-<task>]."
)
@click.option(
    "--out",
    "-o",
    metavar="RUN.ipynb",
    help="Where the notebook goes, outside the workspace [default: WORKSPACE.ipynb, beside it].",
)
@_output_options
def run(
    task: str, data: tuple[str, ...], workspace: str | None, out: str | None, quiet: bool, as_json: bool, **options: Any
) -> None:
    """Analyse data: the model writes code, a live kernel runs it, round after round, until an answer.

    TASK is the question in plain words ("-" reads it from stdin). The notebook is written after every
    round; Ctrl-C stops the run and keeps it.

    \b
    Exit codes: 0 answer, 1 no answer (max rounds, stuck, model error; the notebook is still written),
    2 usage error (bad option, missing data file, no model configured), 130 Ctrl-C, 143 SIGTERM.
    """
    arguments = _agent_arguments(options, task)
    if task == "-":
        task = sys.stdin.read().strip()
    if not task.strip():
        raise click.UsageError("the task is empty")
    renderer = _renderer(quiet, as_json)
    from ..agent.agent import AsyncAgent

    job = Job(task, data, workspace, out)
    sys.exit(_run(lambda: AsyncAgent(**arguments), job, renderer))


@cli.command(epilog=_ENVIRONMENT)
@click.argument("task", required=False)
@click.option("--data", "-d", "data", multiple=True, metavar="FILE", help="A data file for the analysis (repeatable).")
@_model_options
@_kernel_options
@click.option(
    "--max-depth",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Levels of sub-tasks the plan may have.",
)
@click.option(
    "--node-budget", type=click.IntRange(min=1), default=20, show_default=True, help="Most tasks the plan may have."
)
@click.option(
    "--max-fix-attempts",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="Fixes asked for a failing task.",
)
@click.option(
    "--max-task-rounds",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Code rounds a task may run (it sees each one's output) before it stops without saying it is done.",
)
@click.option(
    "--resume",
    metavar="PLAN.ipynb",
    help="Finish an interrupted plan run: done tasks are kept (their cells re-run), the rest run.",
)
@click.option(
    "--workspace",
    "-w",
    metavar="DIR",
    help="The run's folder (kernel cwd) [default: ./agent-runs/<time>-<task>; with --resume, the notebook's folder].",
)
@click.option(
    "--out",
    "-o",
    metavar="PLAN.ipynb",
    help=(
        "Where the notebook goes, outside the workspace [default: WORKSPACE.ipynb]; the report and state go beside it."
    ),
)
@click.option(
    "--demo",
    is_flag=True,
    help=(
        "Plan the bundled task on the bundled sales data (scripted replies when no model is configured) into "
        "notebooks/demo-plan*."
    ),
)
@_output_options
def plan(
    task: str | None,
    data: tuple[str, ...],
    max_depth: int,
    node_budget: int,
    max_fix_attempts: int,
    max_task_rounds: int,
    resume: str | None,
    workspace: str | None,
    out: str | None,
    demo: bool,
    quiet: bool,
    as_json: bool,
    **options: Any,
) -> None:
    """Plan mode: the model designs the analysis as a task DAG, each task runs in one live kernel
    (later tasks use earlier tasks' variables), failures get fixes, and a report grows as figures appear.

    \b
    Exit codes: 0 every task completed, 1 some failed or were skipped, 2 usage error.
    """
    if demo and (task is not None or resume is not None or data):
        raise click.UsageError("--demo plans the bundled task on the bundled data: give no TASK, --data or --resume")
    if not demo and (task is None) == (resume is None):
        raise click.UsageError("give a TASK, or --resume PLAN.ipynb (not both)")
    if quiet and as_json:
        raise click.UsageError("--quiet and --json cannot be used together")
    arguments = _agent_arguments(options, task)
    if demo:
        from .demo import demo_plan

        with _edge():
            arguments, task, data = demo_plan(arguments)
        workspace, out = workspace or "notebooks/demo-plan", out or "notebooks/demo-plan.ipynb"
        if "chat_model" in arguments and not as_json:  # said before the kernel starts, as `demo` does
            click.secho("No model configured: playing the scripted plan replies.", fg="yellow", err=quiet)
    from ..agent.plan.runner import PlanOptions
    from ..agent.sync import Agent
    from .plan import drive_plan

    with _edge():
        budgets = PlanOptions(
            max_depth=max_depth,
            node_budget=node_budget,
            max_fix_attempts=max_fix_attempts,
            max_task_rounds=max_task_rounds,
            exec_timeout=arguments["exec_timeout"],
        )
        _make_parent(out)
        with Agent(**arguments) as agent:
            events = agent.stream_plan(task or "", data, workspace, out, options=budgets, resume=resume)
            sys.exit(drive_plan(events, as_json=as_json, quiet=quiet))


@cli.command(epilog=_ENVIRONMENT)
@click.argument("notebook", metavar="RUN.ipynb")
@click.argument("task")
@_model_options
@_kernel_options
@click.option(
    "--data",
    "-d",
    "data",
    multiple=True,
    metavar="FILE",
    help="A data file for the run (repeatable); replaces a recorded one of the same name.",
)
@click.option(
    "--workspace",
    "-w",
    metavar="DIR",
    help="The folder to continue in, with the data files [default: a new folder beside RUN.ipynb].",
)
@click.option("--out", "-o", metavar="NEW.ipynb", help="Write the continued run here [default: append to RUN.ipynb].")
@_output_options
def resume(
    notebook: str,
    task: str,
    data: tuple[str, ...],
    workspace: str | None,
    out: str | None,
    quiet: bool,
    as_json: bool,
    **options: Any,
) -> None:
    """Continue an earlier run with a follow-up question.

    A fresh kernel re-runs the notebook's setup cell and every cell that succeeded, so the earlier
    variables are back; the model is told what was done, answers TASK, and the new rounds are
    appended to the notebook. The protocol and model default to the run's own. Exit codes as for run.

    The notebook's paths are a claim, never an order: the kernel works in --workspace or a new folder
    beside the notebook, and the recorded data files are read from there, from beside the notebook or
    from its recorded workspace when that is a folder under the notebook's own (never an absolute path).
    """
    from ..agent.agent import AsyncAgent
    from ..notebook.load import load_resumable

    arguments = _agent_arguments(options, task)
    renderer = _renderer(quiet, as_json)
    with _edge():
        recorded = load_resumable(notebook).info
    arguments["protocol"] = arguments["protocol"] or recorded.protocol or None
    if not arguments["model"] and not os.environ.get(SETTINGS["model"].env or "") and not recorded.scripted:
        arguments["model"] = recorded.model or None
    job = Job(task, data, workspace, out, resume_from=notebook)
    sys.exit(_run(lambda: AsyncAgent(**arguments), job, renderer))


@cli.command(epilog=_ENVIRONMENT)
@_model_options
@_kernel_options
@click.option("--scripted", is_flag=True, help="Play the bundled scripted replies even when a model is configured.")
@click.option(
    "--out",
    "-o",
    default="notebooks/demo-run.ipynb",
    show_default=True,
    metavar="RUN.ipynb",
    help="Where the notebook goes.",
)
@click.option(
    "--workspace", "-w", default="notebooks/demo-run", show_default=True, metavar="DIR", help="The run's folder."
)
@_output_options
def demo(scripted: bool, out: str, workspace: str, quiet: bool, as_json: bool, **options: Any) -> None:
    """A complete analysis of the bundled sales dataset, exported as a notebook with figures.

    With a model configured (flags or environment) the demo uses it. Without one it plays replies
    written for this dataset and shipped with kernel-agent, and says so on screen and in the notebook:
    the code still really runs in a live kernel, so every number and figure is real.
    """
    from rich.text import Text

    from .demo import demo_agent, demo_job, epilogue
    from .render import LiveRenderer

    renderer = _renderer(quiet, as_json)
    live = renderer if isinstance(renderer, LiveRenderer) else None
    made: list[Any] = []

    def make_agent() -> Any:
        made.append(
            demo_agent(_agent_arguments(options), scripted=scripted, typing=bool(live and live.console.is_terminal))
        )
        if live is not None and made[0].chat_model.scripted:
            why = "--scripted" if scripted else "No model configured"
            live.console.print(Text(f"{why}: playing the scripted demo replies.", style="yellow"))
        return made[0]

    code = _run(make_agent, demo_job(workspace, out), renderer)
    if live is not None and code not in (EXIT_INTERRUPTED, EXIT_TERMINATED):  # stopped: the line above said all
        live.console.print(epilogue(out, scripted=made[0].chat_model.scripted), soft_wrap=True)
    sys.exit(code)


@cli.command()
@click.argument("notebooks", metavar="RUN.ipynb...", nargs=-1, required=True)
@click.option(
    "--workspace",
    "-w",
    metavar="DIR",
    help=(
        "Where the data files are [default: beside the notebook, or in its recorded workspace when that is a folder "
        "under the notebook's]."
    ),
)
@click.option(
    "--check/--no-check", default=True, show_default=True, help="Compare the new outputs with the recorded ones."
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=600,
    show_default=True,
    metavar="S",
    help="Seconds per cell.",
)
@_kernel_options
def replay(notebooks: tuple[str, ...], workspace: str | None, check: bool, timeout: float, **options: Any) -> None:
    """Re-execute runs' notebooks, each in a fresh kernel, and report cell by cell.

    The recorded code is model-written: it runs confined exactly as an agent run's kernel does.
    Several notebooks (``replay agent-runs/*.ipynb``) are replayed one after the other.

    Exits 1 when a cell's outputs differ from the recorded ones (with --check) or a cell fails,
    2 when a notebook or its data files cannot be found.
    """
    from rich.console import Console
    from rich.text import Text

    from ..agent.config import AgentConfig
    from ..notebook.replay import replay as replay_notebook
    from ..safe.terminal import one_line
    from .show import show_replay

    with _edge():
        config = AgentConfig.resolve(**_kernel_arguments(options))
        if config.kernel.provider_name() != "local":
            raise ConfigError("replay runs the notebook in a local kernel; --gateway and --provider are for the agent")
        limits = config.kernel.limits()
        if limits.sandbox == "off":
            click.echo(f"Warning: the kernel runs unconfined (sandbox off): {limits.describe()}", err=True)
        if workspace is not None and len(notebooks) > 1:
            raise ConfigError("--workspace names one run's data: give it with one notebook")
    console, ok = Console(highlight=False), True
    for notebook in notebooks:
        if len(notebooks) > 1:
            console.rule(Text(one_line(notebook)))
        with _edge():
            report = replay_notebook(
                notebook,
                workspace=workspace,
                check=check,
                timeout=timeout,
                limits=limits,
                kernel_name=config.kernel.name,
                python=config.kernel.python,
            )
        show_replay(console, report)
        ok = ok and report.ok
    sys.exit(0 if ok else 1)


@cli.command()
@click.argument("notebook", metavar="RUN.ipynb")
@click.option(
    "--html", "html", metavar="OUT.html", help="Render the notebook as HTML (nbconvert) for the browser instead."
)
@click.option(
    "--thinking", is_flag=True, help="Expand reasoning models' hidden reasoning (folded to one line by default)."
)
@click.option(
    "--transcript",
    is_flag=True,
    help="Print the run as DeepAnalyze's tagged transcript (<Analyze>, <Code>, <Execute>, <Answer>) instead.",
)
def show(notebook: str, html: str | None, thinking: bool, transcript: bool) -> None:
    """Review a run in the terminal: reasoning, code, outputs, status and timing per round, the answer."""
    from rich.console import Console
    from rich.text import Text

    from ..notebook.load import load_run
    from ..notebook.plan_view import load_plan
    from ..safe.terminal import one_line, printable
    from .show import export_html, show_plan, show_run

    console = Console(highlight=False)
    with _edge():
        if html is not None:
            target = export_html(notebook, html)
            console.print(Text(f"wrote {one_line(target)}"), soft_wrap=True)
            return
        loaded = load_run(notebook)
        plan = None if transcript else load_plan(notebook)
    if plan is not None:
        show_plan(console, plan)
        return
    if transcript:
        from ..agent.protocols.transcript import transcript as tagged

        click.echo(printable(tagged(loaded.run)), nl=False)
        return
    show_run(console, loaded, thinking=thinking)


@cli.command(epilog=_ENVIRONMENT)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8200, show_default=True, help="Port to listen on.")
@click.option(
    "--data-dir",
    "--workspace-root",
    "data_dir",
    metavar="DIR",
    help=(
        "Where uploads, thread workspaces, notebooks and run records live [default: ./kernel-agent-data; with "
        "--demo, a temporary folder removed at exit]."
    ),
)
@click.option(
    "--keys-file",
    "--key-file",
    "keys_file",
    metavar="FILE",
    help=(
        "Service keys, one a line, imported (hashed) into the database at start; `kernel-agent keys` manages them "
        "there [default: env KERNEL_AGENT_SERVER_KEYS, comma-separated]."
    ),
)
@click.option("--no-auth", is_flag=True, help="Serve without keys (allowed only on a loopback address).")
@click.option(
    "--max-running",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Runs executing at once; more get 429.",
)
@click.option(
    "--max-running-per-key",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help=(
        "Runs one key may have executing at once, so one tenant never takes every place "
        "[default: half of --max-running, rounded up; all of it with --no-auth]."
    ),
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help=(
        "A name (NAME or NAME:PORT) this server answers for besides 127.0.0.1, localhost, [::1] and --host; "
        "repeat for more; '*' for any. Other Host or Origin headers get 421/403 (DNS rebinding)."
    ),
)
@click.option(
    "--max-live-kernels",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Thread kernels kept alive at once (the idlest is shut down).",
)
@click.option(
    "--idle-ttl",
    type=click.FloatRange(min=0, min_open=True),
    default=1800,
    show_default=True,
    metavar="S",
    help="Seconds before an idle thread's kernel is shut down (a follow-up rebuilds it).",
)
@click.option(
    "--max-upload-mb",
    type=click.FloatRange(min=0, min_open=True),
    default=100,
    show_default=True,
    metavar="MB",
    help="Largest upload accepted.",
)
@click.option(
    "--pool",
    "pool_size",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    metavar="N",
    help="Keep N warm kernels for new threads (0: off); they count toward --max-live-kernels.",
)
@click.option(
    "--demo",
    is_flag=True,
    help=(
        "Try it without a model: the scripted demo replies and the bundled sales data (no key needed on a loopback "
        "address)."
    ),
)
@click.option(
    "--lease-ttl",
    type=click.FloatRange(min=0, min_open=True),
    default=15,
    show_default=True,
    metavar="S",
    help="Replicas: seconds before a dead replica's running thread is taken over by another.",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON object a line (time, level, logger, message, run_id, thread_id) for a log pipeline.",
)
@click.option(
    "--drain-grace",
    type=click.FloatRange(min=0),
    default=30,
    show_default=True,
    metavar="S",
    help="On SIGTERM: seconds the runs in flight get to finish (no new runs meanwhile) before they are stopped.",
)
@click.option(
    "--header-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=10,
    show_default=True,
    metavar="S",
    help="Seconds a request's line and headers may take in all; then its connection is closed (slow clients).",
)
@click.option(
    "--body-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=30,
    show_default=True,
    metavar="S",
    help="Seconds without a byte while a request's body is read; then its connection is closed.",
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    metavar="N",
    help="Connections open at once; one more is answered 503 and closed (keep it under the open-file limit).",
)
@click.option(
    "--database",
    envvar="KERNEL_AGENT_DATABASE",
    metavar="URL",
    help=(
        "Where the records live: sqlite:///PATH or postgresql://USER:PASSWORD@HOST/DB (replicas share one) "
        "[default: env KERNEL_AGENT_DATABASE, else DATA-DIR/kernel-agent.db]."
    ),
)
@_model_options
@_kernel_options
def serve(
    host: str,
    port: int,
    data_dir: str | None,
    keys_file: str | None,
    no_auth: bool,
    max_running: int,
    max_running_per_key: int | None,
    allowed_hosts: tuple[str, ...],
    max_live_kernels: int,
    idle_ttl: float,
    max_upload_mb: float,
    pool_size: int,
    demo: bool,
    database: str | None,
    lease_ttl: float,
    drain_grace: float,
    header_timeout: float,
    body_timeout: float,
    max_connections: int,
    log_format: str,
    **options: Any,
) -> None:
    """Serve the agent over HTTP: the web page at /, the native runs API and a DeepAnalyze/OpenAI-compatible
    /v1/chat/completions, with a live kernel per thread. Clients send ``Authorization: Bearer KEY``.

    With --demo every thread plays the scripted demo replies on the bundled sales data (the page says
    so); on a loopback address it needs no key unless keys are configured."""
    from ..agent.config import NO_MODEL_HELP, AgentConfig

    with _edge(), _data_folder(data_dir, demo) as (folder, temporary):
        from .._connections import listen
        from ..server.config import ConnectionLimits, ServerConfig, check_host, load_keys
        from ..server.origins import served_hosts
        from ..server.run import serve as run_server

        arguments = _agent_arguments(options)
        keys = frozenset() if no_auth else load_keys(keys_file)
        stored = bool(keys) or no_auth or _stored_keys(database, str(folder), host if demo else None)
        if demo:
            from .demo import demo_serve

            agent = demo_serve(arguments)
            no_auth = no_auth or not stored  # on loopback: _stored_keys let it through
        elif not AgentConfig.resolve(**arguments).model.name:  # bad options fail now, not on every request
            raise ConfigError(NO_MODEL_HELP)
        else:
            agent = {k: v for k, v in arguments.items() if v is not None}
        check_host(host, auth=not no_auth)
        sockets = listen(host, port)  # a taken port is a usage error now, before a line is logged
        try:
            config = ServerConfig(
                folder,
                keys=frozenset() if no_auth else keys,
                auth=not no_auth,
                agent=agent,
                max_running=max_running,
                max_running_per_key=max_running_per_key,
                allowed_hosts=served_hosts(host, allowed_hosts),
                max_threads_live=max_live_kernels,
                idle_ttl=idle_ttl,
                max_upload_bytes=int(max_upload_mb * 1024 * 1024),
                pool_size=pool_size,
                demo=demo,
                temporary=temporary,
                database=database,
                lease_ttl=lease_ttl,
                drain_grace=drain_grace,
                connections=ConnectionLimits(
                    header_timeout=header_timeout, body_timeout=body_timeout, max_connections=max_connections
                ),
            )
            run_server(config, host, port, log_format, sockets)  # type: ignore[arg-type]  # click.Choice gave one of its names
        finally:  # closed here too: a refusal after the bind (or a serve that never runs) keeps no port
            for sock in sockets:
                sock.close()


@contextlib.contextmanager
def _data_folder(data_dir: str | None, demo: bool) -> Iterator[tuple[Path, bool]]:
    """The service's data folder and whether it is temporary: the one given, else ``kernel-agent-data``
    here, else for ``--demo`` a temporary folder removed when the server exits (a demo leaves nothing)."""
    if data_dir is not None or not demo:
        yield Path(data_dir or "kernel-agent-data"), False
        return
    import signal
    import tempfile

    def exit_cleanly(number: int, frame: object) -> None:
        raise SystemExit(128 + number)  # uvicorn raises the SIGTERM it caught again as it ends: clean up first

    previous = signal.signal(signal.SIGTERM, exit_cleanly)
    try:
        with tempfile.TemporaryDirectory(prefix="kernel-agent-demo-") as folder:
            yield Path(folder), True
    finally:
        signal.signal(signal.SIGTERM, previous)


@cli.command()
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio for a client that starts the server; http for streamable HTTP at http://HOST:PORT/mcp.",
)
@click.option(
    "--workspace",
    "-w",
    metavar="DIR",
    help="The kernel's folder [default: ./agent-runs/<time>-mcp]; HTTP sessions get a subfolder each.",
)
@click.option(
    "--data",
    "-d",
    "data",
    multiple=True,
    metavar="FILE",
    help="A data file copied into the workspace and preloaded (repeatable).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=120,
    show_default=True,
    metavar="S",
    help="Default seconds per execution (a call may ask for another).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP: the address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="HTTP: the port.")
@click.option(
    "--key-file",
    metavar="FILE",
    help=(
        "HTTP: the bearer key clients must send (else $KERNEL_AGENT_MCP_KEY; else one is made and printed once on "
        "stderr)."
    ),
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="HTTP: listen on an address other than loopback (only with TLS and access control in front).",
)
@click.option(
    "--session-idle",
    type=click.FloatRange(min=0, min_open=True, max=7 * 24 * 3600),
    default=60,
    show_default=True,
    metavar="S",
    help="HTTP: close a session (and its kernel) after S seconds with no request in flight and no open stream.",
)
@click.option(
    "--max-sessions",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    metavar="N",
    help="HTTP: sessions open at once; one more is refused (503) until one ends.",
)
@_kernel_options
def mcp(
    transport: str,
    workspace: str | None,
    data: tuple[str, ...],
    timeout: float,
    host: str,
    port: int,
    key_file: str | None,
    allow_remote: bool,
    session_idle: float,
    max_sessions: int,
    **options: Any,
) -> None:
    """Serve a live kernel over the Model Context Protocol (Claude Desktop, IDE agents, any MCP client).

    Tools: execute_python, interrupt, restart, list_variables, describe_data, list_files, read_file,
    write_file, export_notebook. Every execution is recorded in WORKSPACE.ipynb (beside the workspace) as it happens.
    """
    from ..agent.config import AgentConfig
    from ..kernel.workspace import default_workspace

    missing = [name for name in data if not Path(name).is_file()]
    if missing:
        raise Failure(f"no such data file: {', '.join(missing)}", EXIT_USAGE)
    root = Path(workspace) if workspace else default_workspace("mcp")
    with _edge():
        from ..mcp.server import McpOptions, serve

        key = _mcp_key(key_file) if transport == "http" else None
        mcp_options = McpOptions(
            workspace=root.resolve(),
            data=tuple(str(Path(d).resolve()) for d in data),
            timeout=timeout,
            transport="http" if transport == "http" else "stdio",
            host=host,
            port=port,
            key=key,
            allow_remote=allow_remote,
            session_idle=session_idle,
            max_sessions=max_sessions,
        )
        # The agent's own kernel options: local with its limits, or on the gateway (--gateway...).
        config = AgentConfig.resolve(**_kernel_arguments(options))
        kernel_options = config.kernel.session_options()
        if config.kernel.name and config.kernel.provider_name() == "local":
            _require_python_kernel(
                config.kernel.name,
                config.kernel.python,
                "the MCP server's tools (execute_python, list_variables, describe_data) are Python's",
            )
        limits = kernel_options.get("limits")
        if limits is not None and limits.sandbox == "off":  # stderr: on stdio, stdout is the protocol
            click.echo(f"Warning: the kernel runs unconfined (sandbox off): {limits.describe()}", err=True)
        if transport == "http":  # an operator's view of the sessions: how many are live, as they open and end
            from .logs import show_info_from

            show_info_from("kernel_agent.mcp.connections")
        serve(mcp_options, _session_builder(kernel_options))


def _stored_keys(database: str | None, data_dir: str, loopback_demo: str | None) -> bool:
    """True when the service's database holds an active key. Raises ``ConfigError`` when it holds none
    (unless ``loopback_demo`` is a loopback host: the demo there needs no key)."""
    from .._net import is_loopback
    from ..server.config import NO_KEY_HELP
    from .keys import active_keys

    if active_keys(database, data_dir):
        return True
    if loopback_demo is not None and is_loopback(loopback_demo):
        return False
    raise ConfigError(NO_KEY_HELP)


def _session_builder(kernel_options: dict[str, Any]) -> Callable[[Path], Any]:
    """A connection's kernel session with ``kernel_options``; the kernel modules load on the first
    build, after the MCP server is up (it answers ``initialize`` without them)."""

    def build(workspace: Path) -> Any:
        from ..kernel.session import AsyncKernelSession

        return AsyncKernelSession(workspace, **kernel_options)

    return build


def _require_python_kernel(kernel: str, python: str | None, why: str) -> None:
    """A ``ConfigError`` unless ``kernel`` (an installed kernelspec) runs Python: ``why`` says what needs it."""
    from ..kernel.kernelspec import choose_kernel

    choice = choose_kernel(kernel, python)
    if choice.language.lower() != "python":
        raise ConfigError(f"kernel {kernel!r} runs {choice.language}, and {why}: give a Python kernel")


def _mcp_key(key_file: str | None) -> str:
    """The MCP server's HTTP key: from ``key_file``, else the environment, else a new one printed once."""
    import secrets

    from ..mcp.auth import KEY_VARIABLE

    if key_file:
        return read_secret(key_file)
    if os.environ.get(KEY_VARIABLE, "").strip():
        return os.environ[KEY_VARIABLE].strip()
    key = secrets.token_urlsafe(32)
    click.echo(f"MCP key for this server (clients send Authorization: Bearer KEY): {key}", err=True)
    return key


@cli.group()
def kernelspec() -> None:
    """Manage the kernel-agent Jupyter kernelspec (for JupyterLab)."""


@kernelspec.command("install")
@click.option("--user", is_flag=True, help="Install for the current user.")
@click.option("--prefix", metavar="P", help="Install under this prefix (e.g. a virtualenv's sys.prefix).")
def kernelspec_install(user: bool, prefix: str | None) -> None:
    """Install the kernel-agent kernelspec where Jupyter finds it."""
    if user and prefix:
        raise click.UsageError("--user and --prefix cannot be used together")
    from ..kernel.kernelspec import install_kernelspec

    with _edge():
        where = install_kernelspec(user=user, prefix=prefix)
    click.echo(f"installed the kernel-agent kernelspec in {where}")


cli.add_command(_keys)
cli.add_command(_plugins)
cli.add_command(eval_group(_model_options, _kernel_options, _agent_arguments))


def main(argv: list[str] | None = None) -> None:
    """The ``kernel-agent`` console script."""
    install_log_handler()
    cli.main(args=argv, prog_name="kernel-agent")
