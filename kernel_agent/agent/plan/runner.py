"""Asking for the plan and running one node in the live kernel, with fix retries.

Owns the model conversations of plan mode: the experiment design (plain chat
whose JSON is schema-validated, with one repair request for an invalid plan)
and each node's code → execute → fix loop, plus the figure analysis of
visualisation nodes. Nodes speak the run's ``Protocol`` (``tools``: function
calls; ``tags``/``deepanalyze``: ``<Code>`` blocks), so results and fix requests
go back as tool messages or ``<Execute>`` blocks; a bare ```python fence is
accepted from any protocol. It does not order nodes,
persist them or write outputs (``api.py``, ``state.py``, ``output.py`` do).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ...errors import ConfigError, PlanError
from ...events import NodeStarted, Notice
from ...kernel.interface import Kernel
from ...model.chat import ChatModel, ModelReply
from ...records import Usage
from ...result import ExecutionResult
from ..environment import module_hint
from ..protocols import MAX_IMAGES, Feedback, Protocol, Step
from .graph import PlanNode, build_dag
from .prompts import (
    MAX_PROBES,
    PROBE_MARK,
    analysis_text,
    code_in,
    design_messages,
    fix_text,
    no_code_text,
    node_messages,
    probe_text,
    repair_message,
)
from .schema import PlanSpec, parse_plan
from .state import CellRecord, NodeResult

__all__ = ["NodeRun", "PlanOptions", "design_plan"]


@dataclass(frozen=True)
class PlanOptions:
    """Budgets of a plan run: tree depth, node count, fix attempts per node, seconds per cell."""

    max_depth: int = 3
    node_budget: int = 20
    max_fix_attempts: int = 5
    exec_timeout: float | None = None

    def __post_init__(self) -> None:
        """Raises ``ConfigError`` for a budget below its minimum."""
        for name, low in (("max_depth", 1), ("node_budget", 1), ("max_fix_attempts", 0)):
            if getattr(self, name) < low:
                raise ConfigError(f"{name} must be at least {low}, not {getattr(self, name)}")


async def design_plan(
    model: ChatModel,
    task: str,
    data_summary: str,
    options: PlanOptions,
    notices: list[Notice],
    packages: Sequence[str] = (),
    usage: list[Usage] | None = None,
) -> tuple[PlanSpec, tuple[PlanNode, ...]]:
    """The model's plan and its DAG. An unusable first plan gets one repair request (noted in ``notices``).
    ``packages`` are the kernel's installed analysis packages; ``usage`` gets each reply's reported tokens.

    Raises ``PlanError`` when the second plan is unusable too, ``ModelError`` when the model fails.
    """
    messages = design_messages(
        task, data_summary, max_depth=options.max_depth, node_budget=options.node_budget, packages=packages
    )
    problem = ""
    for attempt in (1, 2):
        reply = await model.complete(messages)
        if usage is not None and reply.usage is not None:
            usage.append(reply.usage)
        plan, problem = parse_plan(reply.text)
        if plan is not None:
            try:
                return plan, build_dag(plan, max_depth=options.max_depth, node_budget=options.node_budget)
            except PlanError as exc:
                problem = str(exc)
        if attempt == 1:
            notices.append(Notice(f"the plan was unusable ({problem}); asked the model to repair it"))
            messages += [{"role": "assistant", "content": reply.text}, repair_message(problem)]
    raise PlanError(f"the model's plan is still unusable after a repair request: {problem}", problems=(problem,))


class NodeRun:
    """One node's run in ``protocol``: iterate ``steps()`` for its events, then read ``result``."""

    def __init__(
        self,
        model: ChatModel,
        session: Kernel,
        task: str,
        node: PlanNode,
        done: Sequence[tuple[PlanNode, NodeResult]],
        options: PlanOptions,
        protocol: Protocol,
        environment: Sequence[str] = (),
        installed: Sequence[str] = (),
    ) -> None:
        """``environment`` is the prompt's environment lines; ``installed`` the probed packages (for the
        hint after a ``ModuleNotFoundError``)."""
        self._model, self._session, self._node, self._options = model, session, node, options
        self._protocol = protocol
        self._installed = tuple(installed)
        self._messages: list[dict[str, Any]] = node_messages(task, node, done, protocol.name, environment)
        self.result: NodeResult | None = None
        self._probes: list[CellRecord] = []
        self._failed: list[CellRecord] = []
        self._probed = 0
        self.usage = Usage()  # the model's tokens for this node, summed over its replies (as reported)

    async def steps(self) -> AsyncIterator[NodeStarted]:
        """Yields ``NodeStarted`` per attempt. Raises ``ModelError``/``KernelError`` from the machinery."""
        node = self._node
        if node.kind == "text":
            yield NodeStarted(node.id, node.title)
            reply, step = await self._ask(prose=True)
            self.result = NodeResult(node.id, "done", attempts=1, text=_prose(reply, step))
            return
        failures: list[str] = []
        for attempt in range(1, self._options.max_fix_attempts + 2):
            yield NodeStarted(node.id, node.title, attempt)
            success = await self._attempt(failures)
            if success is not None:
                self.result = await self._finished(*success, attempt, failures)
                return
        self.result = NodeResult(
            node.id,
            "failed",
            attempts=len(failures),
            cells=tuple(self._probes),
            failures=tuple(failures),
            failed=tuple(self._failed),
            reason=f"still failing after {len(failures)} attempts: {failures[-1]}",
        )

    async def _ask(self, *, prose: bool = False) -> tuple[ModelReply, Step]:
        """The model's next reply; a ``prose`` task (told to answer without a tool) is offered none."""
        options = self._protocol.request_options()
        if prose:
            options = {k: v for k, v in options.items() if k not in ("tools", "tool_choice")}
        reply = await self._model.complete(self._messages, options=options)
        if reply.usage is not None:
            self.usage += reply.usage
        step = self._protocol.parse(reply)
        self._messages.append(self._protocol.assistant_message(reply, step))
        return reply, step

    def _tell(self, step: Step, text: str, images: Sequence[str] = ()) -> None:
        """Gives ``text`` back as the result of ``step``'s code (a tool message, an ``<Execute>`` block...)."""
        self._messages += self._protocol.feedback_messages(step, Feedback(text, tuple(images)[:MAX_IMAGES]))

    async def _reply_code(self) -> tuple[Step, str]:
        """The model's code for the node, after any information probes it sends first (at most ``MAX_PROBES``)."""
        while True:
            reply, step = await self._ask()
            code = step.code or code_in(reply.text or "")
            if not code.startswith(PROBE_MARK) or self._probed >= MAX_PROBES:
                return step, code
            self._probed += 1
            result = await self._session.execute(code, self._options.exec_timeout)
            probe = CellRecord(code, tuple(result.outputs), result.execution_count, probe=True)
            if result.status == "ok":  # a failed probe is not kept: the notebook must replay
                self._probes.append(probe)
            shown = NodeResult(self._node.id, "done", cells=(probe,)).output_text(800, probes=True)
            if result.error is not None:
                shown += f"{result.error.ename}: {result.error.evalue}"
            self._tell(step, probe_text(shown, MAX_PROBES - self._probed))

    async def _attempt(self, failures: list[str]) -> tuple[CellRecord, Step, ExecutionResult] | None:
        step, code = await self._reply_code()
        if not code:
            failures.append("the reply had no code")
            # A reply with neither code nor answer gets the protocol's own nudge (it answers tool calls too).
            self._messages += (
                self._protocol.nudge_messages(step)
                if step.answer is None
                else [{"role": "user", "content": no_code_text(self._protocol.name)}]
            )
            return None
        result = await self._session.execute(code, self._options.exec_timeout)
        if result.status == "ok":
            return CellRecord(code, tuple(result.outputs), result.execution_count), step, result
        error = result.error
        ename, evalue = (error.ename, error.evalue) if error else (result.status, result.note)
        failures.append(f"{ename}: {evalue}")
        self._failed.append(CellRecord(code, tuple(result.outputs), result.execution_count))
        hint = module_hint(evalue, self._installed) if ename == "ModuleNotFoundError" else ""
        self._tell(step, fix_text(ename, evalue, error.traceback if error else (), self._protocol.name, hint))
        return None

    async def _finished(
        self, cell: CellRecord, step: Step, executed: ExecutionResult, attempt: int, failures: list[str]
    ) -> NodeResult:
        result = NodeResult(
            self._node.id,
            "done",
            attempts=attempt,
            cells=(*self._probes, cell),
            failures=tuple(failures),
            failed=tuple(self._failed),
        )
        printed = result.output_text()
        # A model that cannot see the figure is asked about the numbers it printed, or not at all.
        if self._node.kind == "visualisation" and result.figures and (self._protocol.vision or printed.strip()):
            ask = analysis_text(
                self._node, printed, len(result.figures), self._protocol.name, seen=self._protocol.vision
            )
            self._tell(step, ask, executed.images if self._protocol.vision else ())
            reply, answer = await self._ask()
            result = replace(result, analysis=_prose(reply, answer))
        return result


def _prose(reply: ModelReply, step: Step) -> str:
    """The prose of a reply that should have no code: its answer, else its reasoning, else its text."""
    return (step.answer or step.reasoning or reply.text or "").strip()
