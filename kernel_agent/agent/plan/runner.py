"""Asking for the plan, and each node's policy for the round engine (``loop.RoundEngine``).

Owns what plan mode decides around the rounds every mode runs alike: the experiment design (plain chat
whose JSON is schema-validated, with one repair request for an invalid plan) and, for each node, its
prompt, its probes (code marked ``# probe``, at most ``MAX_PROBES``), what the model is told of a round
(its output with the rounds left, or a fix request after a traceback), when the node ends (a reply
with no code: the protocol's answer, kept as the node's analysis; ``max_task_rounds`` code rounds;
more than ``max_fix_attempts`` failures) and how its rounds are recorded (``NodeResult``). A prose
("text") node is offered no tools. Streaming, the stuck guard, the disk quota, clipped old feedback,
timeouts and rebuilds and the explained partly used reply are the engine's, as in run mode. Nodes
speak the run's ``Protocol``; a bare ```python fence is accepted from any protocol. It does not order
nodes, persist them or write outputs (``api.py``, ``state.py``, ``output.py`` do).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import PlanError
from ...events import Event, NodeStarted, Notice, PlanEvent
from ...kernel.interface import Kernel
from ...model.chat import ChatModel, ModelReply, complete
from ...model.messages import ChatMessage
from ...records import Round, StopReason, Usage
from ...result import ExecutionResult
from ..config import AgentConfig
from ..environment import module_hint
from ..protocols import MAX_IMAGES, Feedback, Protocol, Step
from ..run.loop import RoundEngine, Stopped
from ..settings import PLAN
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
    stopped_text,
)
from .schema import PlanSpec, parse_plan
from .state import CellRecord, NodeResult, NodeStatus

__all__ = ["INTERRUPTED", "NodeRun", "PlanOptions", "design_plan"]

INTERRUPTED = "cancelled by the user"  # a node's reason when its run was stopped mid-way


@dataclass(frozen=True)
class PlanOptions:
    """Budgets of a plan run: tree depth, node count, fix attempts per node, code rounds per node (a code
    task whose code ran that many times without the model saying it is done stops there, ``done`` with the
    reason recorded). Seconds per cell are the agent's (its ``exec_timeout``), as in run mode."""

    max_depth: int = PLAN["max_depth"].default
    node_budget: int = PLAN["node_budget"].default
    max_fix_attempts: int = PLAN["max_fix_attempts"].default
    max_task_rounds: int = PLAN["max_task_rounds"].default

    def __post_init__(self) -> None:
        """Raises ``ConfigError`` for a budget below its minimum (the rows of ``settings.PLAN``)."""
        PLAN.check({name: getattr(self, name) for name in PLAN})

    @property
    def node_rounds(self) -> int:
        """The most rounds a node can take: its code rounds, its failures and its probes, and the answer."""
        return self.max_task_rounds + self.max_fix_attempts + MAX_PROBES + 1


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
    """One node's rounds through the ``RoundEngine``, this object its policy: iterate ``steps()`` for its
    events, then read ``result`` (set also when the node is cancelled: status ``interrupted``, its rounds
    so far kept, the one in flight among the failed cells)."""

    def __init__(
        self,
        config: AgentConfig,
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
        *,
        workspace: Path,
        baseline: int | None = None,
    ) -> None:
        """``environment`` is the prompt's environment lines and ``data`` its data description (both from
        ``environment.prompt_context``); ``installed`` the probed packages (for the hint after a
        ``ModuleNotFoundError``); ``baseline`` the workspace's size when the plan started (its disk quota)."""
        self._node, self._options, self._protocol = node, options, protocol
        self._installed = tuple(installed)
        messages = node_messages(task, node, done, protocol.name, environment, data, options.max_task_rounds)
        self.engine = RoundEngine(
            config, model, session, protocol, messages, self, workspace=workspace, packages=self._installed
        )
        self.engine.baseline = baseline
        self.result: NodeResult | None = None
        self.stop: Stopped | None = None  # why the engine ended the node's rounds
        self._probes: list[CellRecord] = []
        self._kept: list[CellRecord] = []  # the code rounds that ran without error, in order
        self._failed: list[CellRecord] = []
        self._failures: list[str] = []
        self._probed = 0
        self._probing = False  # the round in flight runs a probe
        self._attempts: list[NodeStarted] = []  # fix attempts begun, to announce
        self._step: tuple[ModelReply, Step] | None = None  # the round in flight's reply
        self.usage = Usage()  # the model's tokens for this node, summed over its replies (as reported)

    def __repr__(self) -> str:
        return f"<NodeRun {self._node.id} kept={len(self._kept)} failures={len(self._failures)}>"

    async def steps(self) -> AsyncGenerator[Event | PlanEvent, None]:
        """``NodeStarted`` per attempt (the first, then one per fix) and the engine's events of every round.
        Raises ``ModelError``/``KernelError`` from the machinery."""
        node = self._node
        yield NodeStarted(node.id, node.title)
        try:
            async with aclosing(self.engine.rounds(1, self._options.node_rounds)) as rounds:
                async for event in rounds:
                    while self._attempts:  # a failed round's fix attempt begins with the next round
                        yield self._attempts.pop(0)
                    if isinstance(event, Stopped):
                        self.stop = event
                    else:
                        yield event
        except (asyncio.CancelledError, KeyboardInterrupt, GeneratorExit):
            running = self.engine.running
            if running is not None and running.code:
                outputs = tuple(running.result.outputs) if running.result is not None else ()
                self._failed.append(CellRecord(running.code, outputs))
            self.result = self._ended("interrupted", reason=INTERRUPTED)
            raise
        if self.result is None:  # the engine ended it: stuck, over the disk quota, out of rounds
            why = self.stop.why if self.stop is not None and self.stop.why else "it ran out of rounds"
            self.result = self._ended("failed", reason=why)

    # ----------------------------------------------------------- the policy
    def request_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """A prose task (told to answer without a tool) is offered none."""
        if self._node.kind == "text":
            return {k: v for k, v in options.items() if k not in ("tools", "tool_choice")}
        return options

    def code_of(self, reply: ModelReply, step: Step) -> str | None:
        self._step = (reply, step)
        if self._node.kind == "text":
            return None
        code = step.code or code_in(reply.text or "")
        self._probing = code.startswith(PROBE_MARK) and self._probed < MAX_PROBES
        self._probed += self._probing
        return code or None

    def no_code(self, step: Step) -> list[ChatMessage]:
        if self._node.kind == "text" or (self._kept and step.answer is not None):
            return []  # the node ends with this reply
        # A reply with neither code nor answer gets the protocol's own nudge (it answers tool calls too).
        if step.answer is None:
            return self._protocol.nudge_messages(step)
        return [{"role": "user", "content": no_code_text(self._protocol.name)}]

    def feedback(self, step: Step, result: ExecutionResult, told: Feedback) -> Feedback:
        cell = self._cell(result)
        seen = self._protocol.vision
        if self._probing:
            shown = NodeResult(self._node.id, "done", cells=(cell,)).output_text(800, probes=True)
            if result.error is not None:
                shown += f"{result.error.ename}: {result.error.evalue}"
            text, images = probe_text(shown, MAX_PROBES - self._probed), tuple[str, ...]()
        elif result.status == "ok":
            printed = NodeResult(self._node.id, "done", cells=(cell,)).output_text()
            left = self._options.max_task_rounds - len(self._kept) - 1
            text = round_text(self._node, printed, len(result.images), self._protocol.name, seen=seen, left=left)
            images = tuple(result.images)[:MAX_IMAGES] if seen else ()
        elif result.status == "error":
            ename, evalue = self._error(result)
            hint = module_hint(evalue, self._installed) if ename == "ModuleNotFoundError" else ""
            traceback = result.error.traceback if result.error else ()
            text, images = fix_text(ename, evalue, traceback, self._protocol.name, hint), ()
        else:  # a timeout or a death: the engine's words say what stopped it and what the kernel kept
            text, images = stopped_text(told.text, self._protocol.name), ()
        return Feedback(text, images, files=told.files, note=told.note)

    async def recorded(self, round_: Round) -> tuple[Sequence[Event], StopReason | None]:
        """The round kept in the node's cells; ``answer`` (the policy's end) when the node is finished."""
        if round_.usage is not None:
            self.usage += round_.usage
        assert self._step is not None  # code_of saw the round's reply
        reply, step = self._step
        if self._node.kind == "text":
            self.result = NodeResult(self._node.id, "done", attempts=1, text=_prose(reply, step))
            return (), "answer"
        result = round_.result
        if round_.code is None or result is None:
            if self._kept and step.answer is not None:  # the protocol's answer: the model says it is done
                self.result = self._ended("done", analysis=step.answer.strip())
                return (), "answer"
            return self._failure("the reply had no code")
        cell = self._cell(result, round_.code)
        if self._probing:
            if result.status == "ok":  # a failed probe is not kept: the notebook must replay
                self._probes.append(CellRecord(cell.code, cell.outputs, cell.execution_count, probe=True))
            return (), None
        if result.status != "ok":
            self._failed.append(cell)
            ename, evalue = self._error(result)
            return self._failure(f"{ename}: {evalue}")
        self._kept.append(cell)
        rounds = self._options.max_task_rounds
        if len(self._kept) >= rounds:
            reason = (
                f"stopped after {rounds} code round(s) without the model saying the task was done "
                f"(max_task_rounds {rounds})"
            )
            self.result = self._ended("done", reason=reason)
            return (), "answer"
        return (), None

    def _failure(self, problem: str) -> tuple[Sequence[Event], StopReason | None]:
        """A failed attempt: answered with a fix request (a new attempt) or, past the budget, the node failed."""
        self._failures.append(problem)
        if len(self._failures) > self._options.max_fix_attempts:
            reason = f"still failing after {len(self._failures)} attempts: {problem}"
            self.result = self._ended("failed", reason=reason)
            return (), "answer"
        self._attempts.append(NodeStarted(self._node.id, self._node.title, len(self._failures) + 1))
        return (), None

    def _cell(self, result: ExecutionResult, code: str | None = None) -> CellRecord:
        if code is None:
            assert self._step is not None
            reply, step = self._step
            code = step.code or code_in(reply.text or "")
        return CellRecord(code, tuple(result.outputs), result.execution_count)

    @staticmethod
    def _error(result: ExecutionResult) -> tuple[str, str]:
        error = result.error
        return (error.ename, error.evalue) if error else (result.status, result.note)

    def _ended(self, status: NodeStatus, *, analysis: str = "", reason: str = "") -> NodeResult:
        """The node's result: its probes and kept rounds, its failures and failed cells."""
        failures = self._failures
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


def _prose(reply: ModelReply, step: Step) -> str:
    """The prose of a reply that should have no code: its answer, else its reasoning, else its text."""
    return (step.answer or step.reasoning or reply.text or "").strip()
