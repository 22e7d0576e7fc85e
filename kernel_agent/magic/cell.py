"""The IPython extension: ``%load_ext kernel_agent``, then ``%%agent`` cells in JupyterLab.

Owns the ``%%agent`` cell magic: parse its flags, run the sync ``Agent`` (its
private loop thread works inside ipykernel's running loop), hand the event
stream to ``CellView`` (``view.py``) and leave the ``Run`` in the user's
namespace as ``_agent_run``. The agent works in a kernel of its own, so a
crash or a timeout there never touches the user's session. The magic modules
are the only ones that import IPython.

``--share NAME[,NAME]`` copies variables from the user's namespace into the
agent's kernel (``share.py``): each is written into the run's workspace and
passed as a data file (so the prompt describes it and replays find it), and
the setup cell loads them under their names, so they exist from round 1 and
``kernel-agent replay`` rebuilds them. The task gets one line naming them.

In a replayed notebook (``kernel-agent replay``: ``notebook.recorded.REPLAY_ENV`` is set in its
kernel) the cell never runs: ``replayed.py`` shows the run it recorded, saying so, and no model is
asked and no kernel started.

An invocation that fails before the run starts (bad flags, no model, a missing
data file) leaves no folder behind. An interrupt (Jupyter's ■) stops the run,
which saves its notebook, and the cell says so and keeps the interrupted round's
output as saved (its text and figures so far); ``_agent_run`` is the saved run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, kwds, magic_arguments, parse_argstring

from ..errors import KernelAgentError
from ..events import RunFinished, RunStarted
from ..notebook.recorded import REPLAY_ENV, read_handover
from ..records import Run
from ..redact import read_secret
from .kernels import WarmKernels
from .options import HelpFormatter, setting_arguments, setting_values
from .replayed import show_recorded
from .share import check_names, share_variables
from .view import CellView

__all__ = ["AgentMagics", "load_ipython_extension", "unload_ipython_extension"]


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%%agent`` with ``ipython`` (``%load_ext kernel_agent``)."""
    ipython.register_magics(AgentMagics)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext kernel_agent``: shut the warm kernel down (the magic stays registered, as IPython's do)."""
    magics = ipython.magics_manager.registry.get(AgentMagics.__name__)
    if magics is not None:
        magics.warm.close()


@magics_class
class AgentMagics(Magics):
    """``%%agent``: the cell body is the task; the rounds render live in the cell's output.

    ``warm`` keeps one kernel started ahead for the next cell (``kernels.py``).
    """

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell, **kwargs)
        self.warm = WarmKernels()

    @magic_arguments()
    @kwds(formatter_class=HelpFormatter)
    @setting_arguments
    @argument(
        "--api-key-file", metavar="FILE", help="read the API key from FILE (one line), keeping it out of the notebook"
    )
    @argument(
        "--data",
        "-d",
        action="append",
        default=[],
        metavar="FILE",
        help="a data file, or a live database [NAME=]postgresql://… (repeatable)",
    )
    @argument(
        "--share",
        action="append",
        default=[],
        metavar="NAME[,NAME]",
        help="copy these variables into the agent's kernel",
    )
    @argument("--workspace", "-w", metavar="DIR", help="the run's folder (default ./agent-runs/<time>-<task>)")
    @argument(
        "--out",
        "-o",
        metavar="RUN.ipynb",
        help="where the notebook goes, outside the workspace (default WORKSPACE.ipynb, beside it)",
    )
    @argument("--scripted-demo", action="store_true", help="play the bundled demo replies (no model needed)")
    @cell_magic
    def agent(self, line: str, cell: str) -> None:
        """Run the kernel-agent on the task in the cell body; the run is left in ``_agent_run``."""
        replaying = read_handover()
        if replaying is not None:  # a replay: never a model call, never a kernel of its own
            assert self.shell is not None  # a magic is only called from the shell it is registered on
            self.shell.user_ns["_agent_run"] = show_recorded(replaying, os.environ[REPLAY_ENV], line, cell)
            return
        args = parse_argstring(self.agent, line)
        task = cell.strip()
        if not task:
            raise UsageError("%%agent needs a task: write it in the cell body, below the %%agent line")
        view = CellView()
        view.starting()
        try:
            run = self._run(args, task, view)
        except KernelAgentError as exc:
            view.failed()
            raise UsageError(str(exc)) from None
        except UsageError:
            view.failed()
            raise
        assert self.shell is not None  # a magic is only called from the shell it is registered on
        self.shell.user_ns["_agent_run"] = run

    def _run(self, args: Any, task: str, view: CellView) -> Run | None:
        from ..kernel.workspace import default_workspace

        options, data = _agent_options(args)
        names = [name.strip() for group in args.share for name in group.split(",") if name.strip()]
        assert self.shell is not None  # a magic is only called from the shell it is registered on
        check_names(self.shell.user_ns, names)
        workspace = Path(args.workspace) if args.workspace else default_workspace(task)
        with self.warm.agent(options) as stream, _kept_only_if_started(workspace, args.out) as started:
            shared = share_variables(self.shell.user_ns, names, workspace) if names else None
            if shared is not None:
                data, task = [*data, *map(str, shared.files)], f"{task}\n\n{shared.note}"
            view.starting_kernel(warm=self.warm.pool is not None and self.warm.pool.ready > 0)
            final = None
            try:
                for event in stream(task, data, workspace, args.out, setup=shared.code if shared else ""):
                    match event:
                        case RunStarted():
                            started.append(event.notebook_path)
                        case RunFinished():
                            final = event.run
                    view.handle(event)
            except KeyboardInterrupt:
                notebook = started[0] if started else None
                partial = _partial_run(notebook)
                view.interrupted(notebook, partial)
                return partial
        return final


@contextmanager
def _kept_only_if_started(workspace: Path, out: str | None) -> Iterator[list[str | None]]:
    """Yield a list to append the notebook path to once the run starts. If the invocation fails
    before that, remove the folders it created: nothing of value is in them."""
    folders = [workspace] + ([Path(out).parent] if out else [])
    created = [_top_missing(folder.absolute()) for folder in folders if not folder.exists()]
    started: list[str | None] = []
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
    try:
        yield started
    except BaseException:
        if not started:
            for folder in created:
                shutil.rmtree(folder, ignore_errors=True)
        raise


def _top_missing(folder: Path) -> Path:
    """The outermost folder that creating ``folder`` would create (``folder`` does not exist)."""
    while not folder.parent.exists():
        folder = folder.parent
    return folder


def _agent_options(args: Any) -> tuple[dict[str, Any], list[str]]:
    """``Agent`` keyword arguments and data files from the parsed flags."""
    if args.api_key and args.api_key_file:
        raise UsageError("give the API key one way: --api-key or --api-key-file")
    key = read_secret(args.api_key_file) if args.api_key_file else args.api_key
    options: dict[str, Any] = {**setting_values(args), "api_key": key}
    data = list(args.data)
    if args.scripted_demo:
        from ..demo import dataset_path, demo_model

        if args.protocol not in (None, "tags"):
            raise UsageError("--scripted-demo plays replies written for the tags protocol; drop --protocol")
        options.update(protocol="tags", chat_model=demo_model())
        data = data or [str(dataset_path())]
    return options, data


def _partial_run(notebook: str | None) -> Run | None:
    """The run as saved when it was interrupted (None if it had not started)."""
    if notebook is None or not Path(notebook).exists():
        return None
    from ..notebook.load import load_run

    return load_run(notebook).run
