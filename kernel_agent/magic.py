"""The IPython extension: ``%load_ext kernel_agent``, then ``%%agent`` cells in JupyterLab.

Owns the ``%%agent`` cell magic: parse its flags, run the sync ``Agent`` (its
private loop thread works inside ipykernel's running loop), render the
event stream into the cell's output area (``CellView``) and leave the
``Run`` in the user's namespace as ``_agent_run``. The agent works in a
kernel of its own, so a crash or a timeout there never touches the user's
session. The only module that imports IPython.

``--share NAME[,NAME]`` copies variables from the user's namespace into the
agent's kernel. Each is written into the run's workspace and passed as a data
file (so the prompt describes it and replays find it): a DataFrame as
``NAME.parquet`` (``NAME.pkl`` where parquet cannot hold it), a numeric array
as ``NAME.npy``, a JSON value as ``NAME.json``, anything else picklable as
``NAME.pkl``. Code that loads them under their names runs with the setup
cell, so they exist from round 1, and the exported notebook's setup cell
holds that code, so ``kernel-agent replay`` rebuilds them from the files.
The task gets one line naming them. Pickles are only ever read back from
files this magic wrote.
"""

from __future__ import annotations

import html
import json
import os
import pickle
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import Code, display

from .errors import KernelAgentError
from .events import Event
from .kernel.result import strip_ansi
from .run import Run

__all__ = ["AgentMagics", "CellView", "load_ipython_extension"]

_RESERVED = frozenset({"data", "pd", "np", "plt", "sns", "random", "SimpleNamespace", "DataFiles"})
_STREAM_EVERY_S = 0.25  # how often the streamed reply is redrawn


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%%agent`` with ``ipython`` (``%load_ext kernel_agent``)."""
    ipython.register_magics(AgentMagics)


# -- rendering ----------------------------------------------------------------------------------------


def _markdown(text: str) -> dict[str, str]:
    return {"text/markdown": text, "text/plain": text}


def _plain(text: str) -> dict[str, str]:
    return {"text/plain": text}


class CellView:
    """Renders a run's events as cell outputs: reasoning as markdown, code highlighted, real outputs."""

    def __init__(self) -> None:
        self._reply: Any = None
        self._status: Any = None
        self._text = ""
        self._thinking = ""
        self._drawn = 0.0

    def handle(self, event: Event) -> None:
        getattr(self, f"_on_{event.kind}")(event)

    def interrupted(self, notebook_path: str | None) -> None:
        where = f"the notebook is saved: `{notebook_path}`" if notebook_path else "nothing was saved"
        display(_markdown(f"**Interrupted:** {where}."), raw=True)

    def _on_run_started(self, event: Any) -> None:
        line = f"**kernel-agent** · model `{event.model}` · protocol `{event.protocol}` · own kernel in `{event.workspace}`"
        if event.scripted:
            line += "\n\n**Scripted replies:** the model's text is played back from replies shipped with kernel-agent; the code really runs."
        display(_markdown(line), raw=True)

    def _on_round_started(self, event: Any) -> None:
        display(_markdown(f"#### Round {event.round}/{event.max_rounds}"), raw=True)
        self._text, self._drawn = "", time.monotonic()
        self._reply = display(_plain("…"), raw=True, display_id=True)

    def _on_text_delta(self, event: Any) -> None:
        self._text += event.text
        if time.monotonic() - self._drawn >= _STREAM_EVERY_S:
            self._reply.update(_plain(self._text), raw=True)
            self._drawn = time.monotonic()

    def _on_reasoning_delta(self, event: Any) -> None:
        self._thinking += event.text
        if not self._text and time.monotonic() - self._drawn >= _STREAM_EVERY_S:
            self._reply.update(_plain(f"(thinking) {self._thinking[-2000:]}"), raw=True)
            self._drawn = time.monotonic()

    def _show_thinking(self) -> None:
        thinking, self._thinking = self._thinking.strip(), ""
        if thinking:
            body = html.escape(thinking)
            folded = f"<details><summary>Model reasoning ({len(thinking):,} characters)</summary><pre>{body}</pre></details>"
            display({"text/html": folded, "text/plain": thinking}, raw=True)

    def _on_text_reset(self, event: Any) -> None:
        self._text = ""
        self._thinking = ""
        display(_markdown(f"> **model request failed:** {event.reason}"), raw=True)

    def _on_code_ready(self, event: Any) -> None:
        self._show_thinking()
        self._reply.update(_markdown(event.reasoning) if event.reasoning.strip() else _plain(""), raw=True)
        display({"text/html": Code(event.code, language="python")._repr_html_(), "text/plain": event.code}, raw=True)

    def _on_execution_started(self, event: Any) -> None:
        self._status = display(_markdown("*running…*"), raw=True, display_id=True)

    def _on_execution_finished(self, event: Any) -> None:
        result = event.result
        note = f" ({result.note})" if result.note else ""
        self._status.update(_markdown(f"*{result.status} · {result.duration_s:.1f} s{note}*"), raw=True)
        for output in result.outputs:
            _display_output(output)
        if event.artifacts:
            files = ", ".join(f"`{a.path}`" for a in event.artifacts)
            display(_markdown(f"*files written: {files}*"), raw=True)

    def _on_round_finished(self, event: Any) -> None:
        self._show_thinking()
        round_ = event.round
        if round_.code is None and self._reply is not None:
            self._reply.update(_markdown(round_.reasoning) if round_.reasoning.strip() else _plain(""), raw=True)

    def _on_answer(self, event: Any) -> None:
        display(_markdown(f"### Answer\n\n{event.answer}"), raw=True)

    def _on_notice(self, event: Any) -> None:
        display(_markdown(f"> **note:** {event.message}"), raw=True)

    def _on_error(self, event: Any) -> None:
        display(_markdown(f"> **error:** {event.message}"), raw=True)

    def _on_finished(self, event: Any) -> None:
        run: Run = event.run
        if run.answer is None:
            display(_markdown(f"**No answer:** the run stopped ({run.stop_reason})."), raw=True)
        if run.notebook_path is not None:
            display(_link(run.notebook_path, f"{len(run.rounds)} rounds"), raw=True)


def _display_output(output: dict[str, Any]) -> None:
    kind = output.get("output_type")
    if kind == "stream":
        display(_plain(_joined(output.get("text"))), raw=True)
    elif kind in ("display_data", "execute_result"):
        display(output.get("data", {}), raw=True, metadata=output.get("metadata") or None)
    elif kind == "error":
        display(_plain("\n".join(strip_ansi(str(line)) for line in output.get("traceback", []))), raw=True)


def _link(path: Path, detail: str) -> dict[str, str]:
    """A link the notebook UI resolves relative to the user's notebook when it can."""
    shown = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else str(Path(path).resolve())
    href = Path(shown).as_posix()
    html = f'Notebook ({detail}): <a href="{_escape(href)}" target="_blank">{_escape(shown)}</a>'
    return {"text/html": html, "text/plain": f"Notebook ({detail}): {shown}"}


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _joined(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


# -- sharing variables ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SharedVariables:
    """Variables written into a workspace: their files, the code that loads them, and a line for the task."""

    files: tuple[Path, ...]
    code: str
    note: str


def share_variables(namespace: dict[str, Any], names: list[str], workspace: Path) -> SharedVariables:
    """Write each named variable into ``workspace``. Raises ``UsageError`` for a name that cannot be shared."""
    workspace.mkdir(parents=True, exist_ok=True)
    files, loads, described, imports = [], [], [], set()
    for name in names:
        if not name.isidentifier() or name in _RESERVED:
            raise UsageError(f"cannot share {name!r}: not a name, or one the agent's setup defines")
        if name not in namespace:
            raise UsageError(f"cannot share {name!r}: no such variable in this notebook")
        path, module, load, what = _write_variable(name, namespace[name], workspace)
        files.append(path)
        imports.update([module, "pathlib"] if "pathlib" in load else [module])
        loads.append(f"{name} = {load}")
        described.append(f"`{name}` ({what}, from `{path.name}`)")
    header = "# Variables shared from the user's notebook by %%agent --share, loaded from their files"
    import_lines = sorted(f"import {module}" for module in imports)
    code = "\n".join([header, *import_lines, *loads]) + "\n"
    note = f"Already defined in the kernel, shared from the user's notebook: {', '.join(described)}."
    return SharedVariables(tuple(files), code, note)


def _write_variable(name: str, value: Any, folder: Path) -> tuple[Path, str, str, str]:
    """Write ``value``; return (file, module to import, load expression, description)."""
    pandas, numpy = sys.modules.get("pandas"), sys.modules.get("numpy")
    if pandas is not None and isinstance(value, pandas.DataFrame):
        what = f"DataFrame, {value.shape[0]:,} rows × {value.shape[1]} columns"
        path = folder / f"{name}.parquet"
        try:
            value.to_parquet(path)
            return path, "pandas as pd", f'pd.read_parquet("{path.name}")', what
        except Exception:  # parquet engines refuse some columns (mixed objects, non-string names)
            path.unlink(missing_ok=True)
    elif numpy is not None and isinstance(value, numpy.ndarray) and not value.dtype.hasobject:
        path = folder / f"{name}.npy"
        numpy.save(path, value, allow_pickle=False)
        return path, "numpy as np", f'np.load("{path.name}")', f"ndarray {value.shape} {value.dtype}"
    else:
        try:
            if json.loads(json.dumps(value)) == value:
                path = folder / f"{name}.json"
                path.write_text(json.dumps(value), encoding="utf-8")
                load = f'json.loads(pathlib.Path("{path.name}").read_text(encoding="utf-8"))'
                return path, "json", load, type(value).__name__
        except (TypeError, ValueError):
            pass
    return _pickle(name, value, folder)


def _pickle(name: str, value: Any, folder: Path) -> tuple[Path, str, str, str]:
    if type(value).__module__ == "__main__":
        raise UsageError(f"cannot share {name!r}: its class is defined in this notebook, which the agent's kernel cannot import")
    try:
        payload = pickle.dumps(value)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise UsageError(f"cannot share {name!r}: it cannot be pickled ({exc})") from None
    path = folder / f"{name}.pkl"
    path.write_bytes(payload)
    what = type(value).__name__ + (f", {len(value):,} items" if hasattr(value, "__len__") else "")
    return path, "pickle", f'pickle.loads(pathlib.Path("{path.name}").read_bytes())', what


# -- the magic -----------------------------------------------------------------------------------------


@magics_class
class AgentMagics(Magics):
    """``%%agent``: the cell body is the task; the rounds render live in the cell's output."""

    @magic_arguments()
    @argument("--model", "-m", help="model name [env: KERNEL_AGENT_MODEL]")
    @argument("--base-url", help="OpenAI-compatible endpoint, usually ending in /v1 [env: OPENAI_BASE_URL]")
    @argument("--api-key", help="API key [env: OPENAI_API_KEY]")
    @argument("--data", "-d", action="append", default=[], metavar="FILE", help="a data file (repeatable)")
    @argument("--protocol", choices=("tools", "tags", "deepanalyze"), help="tools (default), tags or deepanalyze")
    @argument("--max-rounds", type=int, metavar="N", help="model replies before the run stops (default 30)")
    @argument("--timeout", type=float, metavar="S", help="seconds per code execution (default 120)")
    @argument("--vision", action="store_true", help="send figures back to the model as images")
    @argument("--request-timeout", type=float, metavar="S", help="seconds to wait for the model's reply to start or continue (default 600)")
    @argument("--data-format", choices=("files", "rich"), help="deepanalyze: list data files as DeepAnalyze does (files) or with our summary (rich)")
    @argument("--no-vllm-extras", action="store_true", help="deepanalyze: do not send vLLM's add_generation_prompt, stop_token_ids, max_new_tokens")
    @argument("--share", action="append", default=[], metavar="NAME[,NAME]", help="copy these variables into the agent's kernel")
    @argument("--workspace", "-w", metavar="DIR", help="the run's folder (default ./agent-runs/<time>-<task>)")
    @argument("--out", "-o", metavar="RUN.ipynb", help="where the notebook goes (default WORKSPACE/analysis.ipynb)")
    @argument("--scripted-demo", action="store_true", help="play the bundled demo replies (no model needed)")
    @cell_magic
    def agent(self, line: str, cell: str) -> None:
        """Run the kernel-agent on the task in the cell body; the run is left in ``_agent_run``."""
        args = parse_argstring(self.agent, line)
        task = cell.strip()
        if not task:
            raise UsageError("%%agent needs a task: write it in the cell body, below the %%agent line")
        try:
            run = self._run(args, task)
        except KernelAgentError as exc:
            raise UsageError(str(exc)) from None
        self.shell.user_ns["_agent_run"] = run

    def _run(self, args: Any, task: str) -> Run | None:
        from .agent.sync import Agent
        from .kernel.workspace import default_workspace

        workspace = Path(args.workspace) if args.workspace else default_workspace(task)
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        options, data = _agent_options(args)
        names = [name.strip() for group in args.share for name in group.split(",") if name.strip()]
        shared = share_variables(self.shell.user_ns, names, workspace) if names else None
        if shared is not None:
            data, task = [*data, *shared.files], f"{task}\n\n{shared.note}"
        view, final, started = CellView(), None, None
        try:
            with Agent(**options) as agent:
                for event in agent.stream(task, data, workspace, args.out, setup=shared.code if shared else ""):
                    view.handle(event)
                    if event.kind == "run_started":
                        started = event.notebook_path  # type: ignore[union-attr]
                    elif event.kind == "finished":
                        final = event.run  # type: ignore[union-attr]
        except KeyboardInterrupt:
            view.interrupted(started)
            self.shell.user_ns["_agent_run"] = _partial_run(started)
            raise
        return final


def _agent_options(args: Any) -> tuple[dict[str, Any], list[str]]:
    """``Agent`` keyword arguments and data files from the parsed flags."""
    options: dict[str, Any] = {
        "model": args.model, "base_url": args.base_url, "api_key": args.api_key, "protocol": args.protocol,
        "max_rounds": args.max_rounds, "exec_timeout": args.timeout, "vision": True if args.vision else None,
        "request_timeout": args.request_timeout, "data_format": args.data_format,
        "vllm_extras": False if args.no_vllm_extras else None,
    }
    data = list(args.data)
    if args.scripted_demo:
        from .demo import dataset_path, demo_model

        if args.protocol not in (None, "tags"):
            raise UsageError("--scripted-demo plays replies written for the tags protocol; drop --protocol")
        options.update(protocol="tags", chat_model=demo_model())
        data = data or [str(dataset_path())]
    return options, data


def _partial_run(notebook: str | None) -> Run | None:
    """The run as saved when it was interrupted (None if it had not started)."""
    if notebook is None or not Path(notebook).exists():
        return None
    from .notebook.load import load_run

    return load_run(notebook).run
