"""A whole plan run: design (or resume), then the nodes in topological order in one live kernel.

Owns the order of a plan run and its event stream: data files into the
workspace, the setup cell, the plan (asked for, or read back from the state
file on resume, where the finished nodes' successful cells are re-run to
rebuild the kernel state), each node run or skipped, the state, notebook and
report written after every node. ``AsyncAgent.stream_plan`` is the public door.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..._loop import in_thread
from ...errors import ConfigError, NotebookError
from ...events import Event, NodeFinished, Notice, PlanEvent, PlanFinished, PlanReady
from ...kernel.interface import Kernel, KernelFactory
from ...kernel.workspace import (
    check_outside,
    default_workspace,
    fresh_beside,
    recorded_workspace,
    records_beside,
)
from ...model.chat import ChatModel
from ...notebook.claims import DataSources
from ...notebook.html import export_html
from ...records import Usage
from ..config import AgentConfig
from ..datafiles.data import DataFile, stage_recorded
from ..environment import Environment
from ..languages import PYTHON, language_of
from ..protocols import Protocol, environment_lines
from ..run.live import split_data
from ..run.preparation import Preparation
from ..run.staging import DataStaging
from .graph import PlanNode, build_dag
from .output import conclusion, counts, write_outputs
from .runner import NodeRun, PlanOptions, design_plan
from .schema import PlanSpec
from .state import NodeResult, PlanState, state_path

__all__ = ["stream_plan"]


async def stream_plan(
    config: AgentConfig,
    model: ChatModel,
    preparation: Preparation,
    session_factory: KernelFactory,
    task: str,
    data: Sequence[str | os.PathLike[str]] = (),
    workspace: str | os.PathLike[str] | None = None,
    notebook: str | os.PathLike[str] | None = None,
    *,
    options: PlanOptions = PlanOptions(),
    resume: str | os.PathLike[str] | None = None,
    kernels_apart: bool = False,
) -> AsyncGenerator[PlanEvent | Event, None]:
    """Plan and run ``task`` over ``data``; with ``resume`` (a plan notebook), finish that run instead.

    A new plan starts as a run does: its data files staged (``DataStaging``; ``kernels_apart``: the kernels
    work in folders of their own, so the workspace's copies are the record's) and the kernel prepared
    (``preparation.new_run``: setup cell, probe, data description). Nodes talk to the model in the
    ``preparation``'s protocol, their rounds run by the round engine with ``config``'s guards (its
    ``exec_timeout`` for every cell, the setup's and a rebuild's too); the plan itself is JSON in plain chat.

    Raises ``PlanError`` when the model's plan stays unusable, ``NotebookError`` for a resume target
    without a readable state file, ``DataFileError``, ``ModelError`` and ``KernelError`` from below.
    Every finished node is on disk (state, notebook, report) before its ``NodeFinished`` is yielded.
    """
    carried = _Carried(config, model, preparation.protocol(), options, preparation)
    if resume is not None:
        events = carried.resumed(session_factory, Path(resume), workspace, notebook)
    else:
        events = carried.new(session_factory, task, data, workspace, notebook, kernels_apart)
    async with aclosing(events):  # closing this stream stops the code too
        async for event in events:
            yield event


@dataclass(frozen=True)
class _Carried:
    """A plan carried out: started (new or resumed), its nodes run, its outputs written."""

    config: AgentConfig
    model: ChatModel
    protocol: Protocol
    options: PlanOptions
    preparation: Preparation

    async def new(
        self,
        session_factory: KernelFactory,
        task: str,
        data: Sequence[str | os.PathLike[str]],
        workspace: str | os.PathLike[str] | None,
        notebook: str | os.PathLike[str] | None,
        kernels_apart: bool,
    ) -> AsyncGenerator[PlanEvent | Event, None]:
        """A new plan: started through ``DataStaging`` and ``Preparation`` as a run is, then designed."""
        preparation = self.preparation
        root = Path(workspace) if workspace is not None else default_workspace(task)
        notebook_path = Path(notebook) if notebook is not None else records_beside(root)
        check_outside(notebook_path, root)
        if split_data(data)[1]:
            raise ConfigError("plan mode does not take live data sources yet: give them to `run`")
        async with await DataStaging.check(data, root) as staging:
            if not kernels_apart:
                await staging.into_workspace()
            async with session_factory(root) as session:
                _python_only(session)
                opening = await preparation.new_run(session, task, staging, root, notebook_path, "")
                files = await staging.described()
                info = opening.run.info
                state = PlanState(
                    state_path(notebook_path),
                    task,
                    {},
                    {},
                    staging.names,
                    info.setup_code,
                    workspace=recorded_workspace(root, notebook_path),
                    scripted=self.model.scripted,
                    started_at=info.started_at,
                )
                if opening.run.setup_result is not None:
                    state.setup_outputs = tuple(opening.run.setup_result.outputs)
                known = preparation.prompt_context(Environment(opening.packages), task, files, PYTHON)
                notices: list[Notice] = []
                planning: list[Usage] = []
                options = self.options
                spec, nodes = await design_plan(
                    self.model, task, known.data_summary, options, notices, known.packages, planning
                )
                state.planning_tokens = {k: v for k, v in asdict(sum(planning, Usage())).items() if v}
                for notice in notices:
                    yield notice
                state.plan = spec.model_dump(mode="json")
                state.budgets = {"max_depth": options.max_depth, "node_budget": options.node_budget}
                state.model, state.protocol = self.model.name, self.protocol.name
                await in_thread(state.save)
                staging.started()  # the plan's records are saved: its copies are kept
                await staging.before_files()  # the workspace's copies, the record's, before any task's code
                async with aclosing(self._carried_out(session, root, state, nodes, notebook_path, files)) as events:
                    async for event in events:
                        yield event

    async def resumed(
        self,
        session_factory: KernelFactory,
        resume: Path,
        workspace: str | os.PathLike[str] | None,
        notebook: str | os.PathLike[str] | None,
    ) -> AsyncGenerator[PlanEvent | Event, None]:
        """A plan read back from its state file (a claim: its workspace is looked in only under its own
        folder), its data files staged from there, the kernel rebuilt from the finished tasks' cells."""
        notebook_path = Path(notebook or resume)
        state = await in_thread(PlanState.load, state_path(resume))
        given = Path(workspace) if workspace is not None else None
        if given is not None and not given.is_dir():
            raise NotebookError(f"the plan's workspace {given} is not a folder", path=str(resume))
        root = given if given is not None else fresh_beside(resume)
        check_outside(notebook_path, root)
        sources = DataSources.for_notebook(resume, state.workspace, given)
        files = await in_thread(stage_recorded, sources, state.data_files, root)
        state.workspace = recorded_workspace(root, notebook_path)
        state.scripted = state.scripted or self.model.scripted
        state.model, state.protocol = self.model.name, self.protocol.name  # the model that finishes it
        async with session_factory(root) as session:
            _python_only(session)
            await session.files.put([root / f.name for f in files])  # a kernel apart: its own, as a resumed run's
            await session.execute(state.setup_code, self.config.kernel.exec_timeout)
            nodes = build_dag(PlanSpec.model_validate(state.plan), **state.budgets)
            await _rebuild(session, nodes, state, self.config.kernel.exec_timeout)
            async with aclosing(self._carried_out(session, root, state, nodes, notebook_path, files)) as events:
                async for event in events:
                    yield event

    async def _carried_out(
        self,
        session: Kernel,
        root: Path,
        state: PlanState,
        nodes: Sequence[PlanNode],
        notebook_path: Path,
        files: Sequence[DataFile],
    ) -> AsyncGenerator[PlanEvent | Event, None]:
        """``PlanReady``, each node's events, then the outputs written and ``PlanFinished``."""
        yield PlanReady(
            tuple(state.plan.get("directions", ())), tuple(_describe(n, state) for n in nodes), state.scripted
        )
        view = _View(tuple(files), self.preparation, self.protocol.vision)
        nodes_run = _Nodes(self.config, self.model, session, self.protocol, self.options, root)
        async with aclosing(nodes_run.run(nodes, state, notebook_path, view)) as events:  # closing stops the code
            async for event in events:
                yield event
        report = notebook_path.with_name(f"{notebook_path.stem}.report.md")
        state.finished_at = datetime.now(UTC).isoformat()
        await in_thread(state.save)
        await in_thread(write_outputs, state, nodes, notebook_path, state.workspace)
        html = await in_thread(export_html, notebook_path, notebook_path.with_suffix(".html"))
        findings = conclusion(state, nodes) or ""
        yield PlanFinished(counts(nodes, state.results), str(notebook_path), str(report), str(html), findings)


def _python_only(session: Kernel) -> None:
    """Raises ``ConfigError`` for a kernel that does not run Python (plan mode writes Python)."""
    language = language_of(session.kernel_info.get("language_info"))
    if language is not PYTHON:
        raise ConfigError(
            f"plan mode writes Python, and this kernel runs {language.name}: use `run` for an "
            f"analysis in {language.name}, or a Python kernel for plan mode"
        )


def _describe(node: PlanNode, state: PlanState) -> dict[str, Any]:
    result = state.results.get(node.id)
    return {
        "id": node.id,
        "title": node.title,
        "kind": node.kind,
        "depends_on": list(node.depends_on),
        "status": result.status if result else "pending",
        "attempts": result.attempts if result else 0,
    }


async def _rebuild(session: Kernel, nodes: Sequence[PlanNode], state: PlanState, timeout: float | None) -> None:
    """Re-run the finished nodes' kept cells, in order, so later nodes find their variables."""
    for node in nodes:
        result = state.results.get(node.id)
        for cell in result.cells if result and result.status == "done" else ():
            await session.execute(cell.code, timeout)


@dataclass(frozen=True)
class _View:
    """What every node is told about its environment, the way run mode's prompt is (``Preparation``)."""

    files: tuple[DataFile, ...]
    preparation: Preparation
    vision: bool

    async def context(self, session: Kernel, task: str) -> tuple[list[str], str, Environment]:
        """The next node's environment lines and data description, with the kernel probed now (the names
        defined so far). Raises ``KernelError``."""
        environment = await self.preparation.environment(session, PYTHON)
        context = self.preparation.prompt_context(environment, task, self.files, PYTHON)
        return environment_lines(context, vision=self.vision), context.data_summary, environment


@dataclass
class _Nodes:
    """The plan's nodes run in order, each through the round engine (``NodeRun``, its policy)."""

    config: AgentConfig
    model: ChatModel
    session: Kernel
    protocol: Protocol
    options: PlanOptions
    workspace: Path
    baseline: int | None = None  # the workspace's size before the first node's rounds (the disk quota's)
    stopped: str = ""  # why the plan stopped before its last node (the disk quota): the rest are skipped

    async def run(
        self, nodes: Sequence[PlanNode], state: PlanState, notebook: Path, view: _View
    ) -> AsyncGenerator[PlanEvent | Event, None]:
        for node in nodes:
            kept = state.results.get(node.id)
            if kept is not None and kept.status != "interrupted":
                continue
            result = await self._skipped(node, state)
            if result is None:
                async with aclosing(self._node(node, state, notebook, view, nodes)) as events:
                    async for event in events:
                        yield event
                result = state.results[node.id]
            else:
                await _recorded(state, result, nodes, notebook)
            yield NodeFinished(node.id, result.status, result.attempts, len(result.figures), result.reason)

    async def _skipped(self, node: PlanNode, state: PlanState) -> NodeResult | None:
        """The node's result when it does not run: the plan stopped, or a prerequisite did not complete."""
        if self.stopped:
            return NodeResult(node.id, "skipped", reason=f"the plan stopped: {self.stopped}")
        blocked = [d for d in node.depends_on if state.results[d].status != "done"]
        if not blocked:
            return None
        why = ", ".join(f"{d} {state.results[d].status}" for d in blocked)
        return NodeResult(node.id, "skipped", reason=f"a prerequisite did not complete: {why}")

    async def _node(
        self, node: PlanNode, state: PlanState, notebook: Path, view: _View, nodes: Sequence[PlanNode]
    ) -> AsyncGenerator[PlanEvent | Event, None]:
        """The node's rounds, its result recorded (state, notebook) also when it is cancelled mid-way."""
        by_id = {n.id: n for n in nodes}
        done = [(by_id[d], state.results[d]) for d in node.depends_on]
        lines, described, environment = await view.context(self.session, state.task)
        run = NodeRun(
            self.config,
            self.model,
            self.session,
            state.task,
            node,
            done,
            self.options,
            self.protocol,
            lines,
            environment.packages,
            described,
            workspace=self.workspace,
            baseline=self.baseline,
        )
        began = time.monotonic()
        try:
            async with aclosing(run.steps()) as steps:
                async for event in steps:
                    yield event
        finally:
            if run.result is not None:
                tokens = {k: v for k, v in asdict(run.usage).items() if v} if run.usage.total_tokens else {}
                result = replace(run.result, seconds=round(time.monotonic() - began, 3), tokens=tokens)
                await _recorded(state, result, nodes, notebook)
        self.baseline = run.engine.baseline
        if run.stop is not None and run.stop.reason == "disk_quota":
            self.stopped = run.stop.why


async def _recorded(state: PlanState, result: NodeResult, nodes: Sequence[PlanNode], notebook: Path) -> None:
    """``result`` kept in the state and the notebook and report written again."""
    await in_thread(state.record, result)
    await in_thread(write_outputs, state, nodes, notebook, state.workspace)
