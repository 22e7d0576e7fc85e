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
    workspace_from,
)
from ...model.chat import ChatModel
from ...notebook.claims import DataSources
from ...notebook.html import export_html
from ...records import Usage
from ..config import AgentConfig
from ..data import DataFile, opened_beside, preload_code, prepare_data, stage_recorded
from ..environment import Environment, names_expression, probe, probe_expression, prompt_context
from ..languages import PYTHON, language_of
from ..protocols import Protocol, environment_lines, get_protocol
from .graph import PlanNode, build_dag
from .output import conclusion, counts, write_outputs
from .runner import NodeRun, PlanOptions, design_plan
from .schema import PlanSpec
from .state import NodeResult, PlanState, state_path

__all__ = ["stream_plan"]


async def stream_plan(
    config: AgentConfig,
    model: ChatModel,
    session_factory: KernelFactory,
    task: str,
    data: Sequence[str | os.PathLike[str]] = (),
    workspace: str | os.PathLike[str] | None = None,
    notebook: str | os.PathLike[str] | None = None,
    *,
    options: PlanOptions = PlanOptions(),
    resume: str | os.PathLike[str] | None = None,
    preload: bool = True,
    protocol: Protocol | None = None,
) -> AsyncGenerator[PlanEvent | Event, None]:
    """Plan and run ``task`` over ``data``; with ``resume`` (a plan notebook), finish that run instead.

    Nodes talk to the model in ``protocol`` (default ``tools``), their rounds run by the round engine with
    ``config``'s guards (its ``exec_timeout`` replaced by ``options``'); the plan itself is JSON in plain chat.

    Raises ``PlanError`` when the model's plan stays unusable, ``NotebookError`` for a resume target
    without a readable state file, ``DataFileError``, ``ModelError`` and ``KernelError`` from below.
    Every finished node is on disk (state, notebook, report) before its ``NodeFinished`` is yielded.
    """
    if resume is not None:  # the state is a claim too: its workspace is looked in only under its own folder
        notebook_path = Path(notebook or resume)
        state = await in_thread(PlanState.load, state_path(resume))
        given = Path(workspace) if workspace is not None else None
        if given is not None and not given.is_dir():
            raise NotebookError(f"the plan's workspace {given} is not a folder", path=str(resume))
        root = given if given is not None else fresh_beside(Path(resume))
        check_outside(notebook_path, root)
        sources = DataSources.for_notebook(Path(resume), state.workspace, given)
        files = await in_thread(stage_recorded, sources, state.data_files, root)
        state.workspace = recorded_workspace(root, notebook_path)
        state.scripted = state.scripted or model.scripted
    else:
        root = Path(workspace) if workspace is not None else default_workspace(task)
        notebook_path = Path(notebook) if notebook is not None else records_beside(root)
        check_outside(notebook_path, root)
        files = await in_thread(prepare_data, list(data), root)
        setup = opened_beside(
            preload_code(files) if preload else "%matplotlib inline\n", workspace_from(notebook_path, root)
        )
        state = PlanState(
            state_path(notebook_path),
            task,
            {},
            {},
            tuple(f.name for f in files),
            setup,
            workspace=recorded_workspace(root, notebook_path),
            scripted=model.scripted,
            started_at=datetime.now(UTC).isoformat(),
        )
    protocol = protocol or get_protocol("tools")
    state.model, state.protocol = model.name, protocol.name  # a resumed plan: the model that finishes it
    async with session_factory(root) as session:
        language = language_of(session.kernel_info.get("language_info"))
        if language is not PYTHON:
            raise ConfigError(
                f"plan mode writes Python, and this kernel runs {language.name}: use `run` for an "
                f"analysis in {language.name}, or a Python kernel for plan mode"
            )
        ran = await session.execute(state.setup_code, options.exec_timeout)
        if state.plan:
            nodes = build_dag(PlanSpec.model_validate(state.plan), **state.budgets)
            await _rebuild(session, nodes, state, options)
        else:
            notices: list[Notice] = []
            known = prompt_context(await probe(session, packages=probe_expression()), task, files)
            planning: list[Usage] = []
            spec, nodes = await design_plan(model, task, known.data_summary, options, notices, known.packages, planning)
            state.planning_tokens = {k: v for k, v in asdict(sum(planning, Usage())).items() if v}
            for notice in notices:
                yield notice
            state.plan, state.setup_outputs = spec.model_dump(mode="json"), tuple(ran.outputs)
            state.budgets = {"max_depth": options.max_depth, "node_budget": options.node_budget}
            await in_thread(state.save)
        yield PlanReady(
            tuple(state.plan.get("directions", ())), tuple(_describe(n, state) for n in nodes), state.scripted
        )
        view = _View(files, preload, protocol.vision)
        config = replace(config, kernel=replace(config.kernel, exec_timeout=options.exec_timeout))
        nodes_run = _Nodes(config, model, session, protocol, options, root)
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


async def _rebuild(session: Kernel, nodes: Sequence[PlanNode], state: PlanState, options: PlanOptions) -> None:
    """Re-run the finished nodes' kept cells, in order, so later nodes find their variables."""
    for node in nodes:
        result = state.results.get(node.id)
        for cell in result.cells if result and result.status == "done" else ():
            await session.execute(cell.code, options.exec_timeout)


@dataclass(frozen=True)
class _View:
    """What every node is told about its environment, from ``prompt_context`` as run mode's prompt is."""

    files: tuple[DataFile, ...]
    preload: bool
    vision: bool

    async def context(self, session: Kernel, task: str) -> tuple[list[str], str, Environment]:
        """The next node's environment lines and data description, with the kernel probed now (the names
        defined so far)."""
        environment = await probe(session, packages=probe_expression(), names=names_expression())
        preloaded = PYTHON.setup_words(self.files) if self.preload else ""
        context = prompt_context(environment, task, self.files, preloaded=preloaded)
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
