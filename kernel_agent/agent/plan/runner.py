"""Asking for the plan and running one node in the live kernel, with fix retries.

Owns the model conversations of plan mode: the experiment design (plain chat
whose JSON is schema-validated, with one repair request for an invalid plan)
and each code node's rounds: code → execute → its output back to the model
(or a fix request after a traceback) → more code, until the model ends the
task as run mode's rounds end (a reply with no code: the protocol's answer,
kept as the node's analysis) or a bound ends it (``max_task_rounds`` code
rounds, ``max_fix_attempts`` failures). Nodes speak the run's ``Protocol`` (``tools``: function
calls; ``tags``/``deepanalyze``: ``<Code>`` blocks), so results and fix requests
go back as tool messages or ``<Execute>`` blocks; a bare ```python fence is
accepted from any protocol. It does not order nodes,
persist them or write outputs (``api.py``, ``state.py``, ``output.py`` do).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from ...errors import ConfigError, PlanError
from ...events import NodeStarted, Notice
from ...kernel.interface import Kernel
from ...model.chat import ChatModel, ModelReply, complete
from ...model.messages import ChatMessage
from ...records import Usage
from ..environment import module_hint
from ..protocols import MAX_IMAGES, Feedback, Protocol, Step
from .graph import PlanNode, build_dag
from .prompts import (
    MAX_PROBES,
    PROBE_MARK,
    code_in,
    design_messages,
    fix_text,
    no_code_text,
    node_messages,
    probe_text,
    repair_message,
    round_text,
)
from .schema import PlanSpec, parse_plan
from .state import CellRecord, NodeResult, NodeStatus

__all__ = ["NodeRun", "PlanOptions", "design_plan"]


@dataclass(frozen=True)
class PlanOptions:
    """Budgets of a plan run: tree depth, node count, fix attempts per node, code rounds per node (a code
    task whose code ran that many times without the model saying it is done stops there, ``done`` with the
    reason recorded), seconds per cell."""

    max_depth: int = 3
    node_budget: int = 20
    max_fix_attempts: int = 5
    max_task_rounds: int = 5
    exec_timeout: float | None = None

    def __post_init__(self) -> None:
        """Raises ``ConfigError`` for a budget below its minimum."""
        for name, low in (("max_depth", 1), ("node_budget", 1), ("max_fix_attempts", 0), ("max_task_rounds", 1)):
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
        reply = await complete(model, messages)
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
        data: str = "",
    ) -> None:
        """``environment`` is the prompt's environment lines and ``data`` its data description (both from
        ``environment.prompt_context``); ``installed`` the probed packages (for the hint after a
        ``ModuleNotFoundError``)."""
        self._model, self._session, self._node, self._options = model, session, node, options
        self._protocol = protocol
        self._installed = tuple(installed)
        self._messages: list[ChatMessage] = node_messages(
            task, node, done, protocol.name, environment, data, options.max_task_rounds
        )
        self.result: NodeResult | None = None
        self._probes: list[CellRecord] = []
        self._kept: list[CellRecord] = []  # the code rounds that ran without error, in order
        self._failed: list[CellRecord] = []
        self._probed = 0
        self.usage = Usage()  # the model's tokens for this node, summed over its replies (as reported)

    async def steps(self) -> AsyncIterator[NodeStarted]:
        """Yields ``NodeStarted`` per attempt (the first, then one per fix). Raises ``ModelError``/``KernelError``
        from the machinery."""
        node = self._node
        yield NodeStarted(node.id, node.title)
        if node.kind == "text":
            reply, step = await self._ask(prose=True)
            self.result = NodeResult(node.id, "done", attempts=1, text=_prose(reply, step))
            return
        failures: list[str] = []
        while self.result is None:
            problem = await self._round(failures)
            if problem is None:
                continue
            failures.append(problem)
            if len(failures) > self._options.max_fix_attempts:
                self.result = self._ended(
                    "failed", failures, reason=f"still failing after {len(failures)} attempts: {failures[-1]}"
                )
            else:
                yield NodeStarted(node.id, node.title, len(failures) + 1)

    async def _round(self, failures: list[str]) -> str | None:
        """One reply acted on: its code run and the output told back, or the task ended (``result`` set).
        Returns what went wrong (a failure, answered with a fix request or a nudge), or None."""
        step, code = await self._reply_code()
        if not code:
            if self._kept and step.answer is not None:  # the protocol's answer: the model says it is done
                self.result = self._ended("done", failures, analysis=step.answer.strip())
                return None
            # A reply with neither code nor answer gets the protocol's own nudge (it answers tool calls too).
            self._messages += (
                self._protocol.nudge_messages(step)
                if step.answer is None
                else [{"role": "user", "content": no_code_text(self._protocol.name)}]
            )
            return "the reply had no code"
        result = await self._session.execute(code, self._options.exec_timeout)
        cell = CellRecord(code, tuple(result.outputs), result.execution_count)
        if result.status == "ok":
            self._kept.append(cell)
            rounds = self._options.max_task_rounds
            if len(self._kept) >= rounds:
                reason = (
                    f"stopped after {rounds} code round(s) without the model saying the task was done "
                    f"(max_task_rounds {rounds})"
                )
                self.result = self._ended("done", failures, reason=reason)
                return None
            printed = NodeResult(self._node.id, "done", cells=(cell,)).output_text()
            seen = self._protocol.vision
            shown = round_text(
                self._node, printed, len(result.images), self._protocol.name, seen=seen, left=rounds - len(self._kept)
            )
            self._tell(step, shown, result.images if seen else ())
            return None
        error = result.error
        ename, evalue = (error.ename, error.evalue) if error else (result.status, result.note)
        self._failed.append(cell)
        hint = module_hint(evalue, self._installed) if ename == "ModuleNotFoundError" else ""
        self._tell(step, fix_text(ename, evalue, error.traceback if error else (), self._protocol.name, hint))
        return f"{ename}: {evalue}"

    def _ended(self, status: NodeStatus, failures: list[str], *, analysis: str = "", reason: str = "") -> NodeResult:
        """The node's result: its probes and kept rounds, its failures and failed cells."""
        return NodeResult(
            self._node.id,
            status,
            attempts=len(failures) + (status == "done"),
            cells=(*self._probes, *self._kept),
            failures=tuple(failures),
            failed=tuple(self._failed),
            analysis=analysis,
            reason=reason,
        )

    async def _ask(self, *, prose: bool = False) -> tuple[ModelReply, Step]:
        """The model's next reply; a ``prose`` task (told to answer without a tool) is offered none."""
        options = self._protocol.request_options()
        if prose:
            options = {k: v for k, v in options.items() if k not in ("tools", "tool_choice")}
        reply = await complete(self._model, self._messages, options)
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


def _prose(reply: ModelReply, step: Step) -> str:
    """The prose of a reply that should have no code: its answer, else its reasoning, else its text."""
    return (step.answer or step.reasoning or reply.text or "").strip()
