"""The execute engine: one request in, one ``ExecutionResult`` out, over any provider.

Owns the execute pipeline, written once for every place a kernel can live:
send the request, fold its iopub messages with ``OutputCollector``, enforce
the timeout ladder (interrupt, a grace, a second interrupt, then a restart
that loses state), tell a death from a normal end, and rebuild lost state by
re-running the cells that succeeded. While a request runs, its output so far
goes to an optional ``on_output`` callback, throttled (``partial.PartialOutput``).
Each pipeline step ends in an ``Outcome``; ``classify`` turns an outcome into a
status and words (pure) and ``ExecuteEngine._finish`` acts on it in one place.
Where the kernel lives, how it is interrupted or restarted and why it died
are the provider's (``interface.KernelProvider``).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import time
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from ..errors import KernelError
from ..result import ErrorInfo, ExecutionResult, Status
from .outputs import OutputCaps, OutputCollector
from .partial import OutputCallback, PartialOutput
from .providers.base import ChannelClient, KernelProvider
from .rebuild import RebuildCell, RebuildPlan
from .sandbox.limit_notes import limit_note
from .sandbox.limits import Limits

__all__ = ["ExecuteEngine", "Outcome", "Verdict", "classify"]

log = logging.getLogger(__name__)

POLL_S = 0.2  # how often a silent kernel is checked for death
_REPLY_WAIT_S = 5.0
_PROBE_S = 0.5  # how often the probe after a lost message is sent again until its idle is seen


class Outcome(Enum):
    """How one pass of the pipeline ended."""

    IDLE = "idle"  # the request ran to its end (status idle seen)
    DEADLINE = "deadline"  # the timeout passed with the request still running
    DIED = "died"  # the kernel stopped being alive
    EXITED = "exited"  # the code asked the kernel to exit (``exit()``, ``quit()``)
    INTERRUPTED = "interrupted"  # stopped by an interrupt; state kept
    RESTARTED = "restarted"  # did not stop after interrupts; the kernel was restarted
    STUCK = "stuck"  # did not stop, and the kernel is not ours to restart


@dataclass(frozen=True)
class Verdict:
    """What an outcome means for the result: its status, whether state is gone, the words,
    and whether the kernel must now be restarted."""

    status: Status
    state_lost: bool = False
    note: str = ""
    restart: bool = False


def classify(
    outcome: Outcome,
    reply: dict[str, Any],
    error: ErrorInfo | None,
    *,
    limits: Limits,
    timeout: float | None,
    grace: float,
    death: str = "",
    owns_kernel: bool = True,
) -> Verdict:
    """The verdict for ``outcome`` (pure). ``death`` is the provider's description of an exit."""
    if outcome is Outcome.IDLE:
        if reply.get("status") == "aborted":
            return Verdict("error", note="the request was aborted by the kernel")
        failed = reply.get("status") == "error" or error is not None
        return Verdict("error" if failed else "ok", note=limit_note(error, limits))
    if outcome is Outcome.INTERRUPTED:
        return Verdict("timeout", note=f"stopped by an interrupt after {timeout:g}s")
    if outcome is Outcome.RESTARTED:
        note = f"did not stop within {grace:g}s of an interrupt after {timeout:g}s; the kernel was restarted"
        return Verdict("timeout", state_lost=True, note=note)
    if outcome is Outcome.STUCK:
        note = f"still running after {timeout:g}s and an interrupt; the attached kernel was left as it is"
        return Verdict("timeout", note=note)
    note = "the code asked the kernel to exit" if outcome is Outcome.EXITED else f"the kernel died ({death})"
    if owns_kernel:
        note += "; the kernel was restarted"
    return Verdict("died", state_lost=True, note=note, restart=owns_kernel)


class _LostMessages:
    """While outputs are collected: a message from the kernel over the size bound drops its connection
    (``providers/guard.py``), and the execution's ``idle`` may be lost with it. Then a probe (an empty
    silent execute) goes to the kernel, again every ``_PROBE_S`` until its ``idle`` comes: the kernel
    answers requests in order, so that ``idle`` means the execution is over."""

    def __init__(self, provider: KernelProvider) -> None:
        self.provider = provider
        self.dropped = provider.dropped_messages
        self.probe: str | None = None
        self.sent = 0.0

    def check(self, collector: OutputCollector, client: ChannelClient, now: float) -> None:
        dropped = self.provider.dropped_messages
        if dropped != self.dropped:
            collector.lost_messages += dropped - self.dropped
            self.dropped, self.probe = dropped, None
        if collector.lost_messages and (self.probe is None or now - self.sent >= _PROBE_S):
            self.probe, self.sent = client.execute("", silent=True, store_history=False, allow_stdin=False), now

    def seen(self, msg: dict[str, Any], collector: OutputCollector) -> None:
        if (
            self.probe is not None
            and msg.get("msg_type") == "status"
            and msg.get("content", {}).get("execution_state") == "idle"
            and msg.get("parent_header", {}).get("msg_id") == self.probe
        ):
            collector.idle = True


class ExecuteEngine:
    """Runs requests on ``provider``'s kernel, one at a time; remembers what succeeded for a rebuild."""

    def __init__(self, provider: KernelProvider, caps: OutputCaps, *, interrupt_grace: float = 1.0) -> None:
        self.provider = provider
        self.caps = caps
        self.interrupt_grace = interrupt_grace
        self.lock = asyncio.Lock()
        self.language = "python"  # the kernel's (its language_info's name): how the rebuild reads cells
        self._history: list[RebuildCell] = []  # executed cells since the last state loss, labelled by call number
        self._history_before_loss: list[RebuildCell] = []
        self._calls = 0  # public execute() calls: the labels of the rebuild report
        self._label = 0

    @property
    def client(self) -> ChannelClient:
        if self.provider.client is None:
            raise KernelError("the kernel has no channels (not started, or closed)")
        return self.provider.client

    # ----------------------------------------------------------------- public
    async def execute(
        self,
        code: str,
        timeout: float | None,
        *,
        rebuild: bool,
        rebuild_timeout: float | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecutionResult:
        """Run ``code``; on state loss with ``rebuild``, re-run the earlier successful cells (each
        bounded by ``rebuild_timeout``). ``on_output`` gets the output so far while ``code`` runs
        (not while cells are rebuilt). Raises ``KernelStartError`` when a needed restart fails."""
        async with self.lock:
            self._calls += 1
            self._label = self._calls
            result = replace(await self._execute(code, timeout, on_output), call=self._calls)
        if result.state_lost and rebuild and self._history_before_loss:
            result = await self._rebuild(result, rebuild_timeout)
        return result

    async def evaluate(self, expressions: dict[str, str], timeout: float) -> dict[str, str | None]:
        """Silent ``user_expressions`` probe. Raises ``KernelError`` when the kernel does not answer."""
        reply = await self.run_silently("", expressions, timeout)
        values = reply.get("user_expressions", {})
        return {
            name: values[name]["data"].get("text/plain") if values.get(name, {}).get("status") == "ok" else None
            for name in expressions
        }

    async def run_silently(self, code: str, expressions: dict[str, str], timeout: float) -> dict[str, Any]:
        """Run ``code`` without outputs, history or execution count; the ``execute_reply`` content.
        Raises ``KernelError`` when the kernel does not answer within ``timeout``."""
        reply, _ = await self._outside_history(code, timeout, silent=True, user_expressions=expressions)
        return reply

    async def run_quietly(self, code: str, timeout: float) -> str:
        """Run ``code`` outside the history (no execution count, nothing recorded); what it printed.
        For kernels that evaluate no ``user_expressions`` (IRkernel). Raises ``KernelError`` when the
        kernel does not answer within ``timeout``."""
        _, collector = await self._outside_history(code, timeout, silent=False, allow_stdin=False)
        return "".join(out["text"] for out in collector.finish() if out["output_type"] == "stream")

    async def _outside_history(
        self, code: str, timeout: float, **request: Any
    ) -> tuple[dict[str, Any], OutputCollector]:
        """One request kept out of the history (``store_history=False``): its reply content and outputs.
        Raises ``KernelError`` when the kernel does not answer within ``timeout``."""
        async with self.lock:
            msg_id = self.client.execute(code, store_history=False, **request)
            collector = OutputCollector(msg_id, self.caps)
            outcome = await self._collect(collector, time.monotonic() + timeout)
            if outcome is not Outcome.IDLE:
                raise KernelError(f"the kernel did not answer a request outside the history ({outcome.value})")
            return await self._shell_reply(msg_id), collector

    async def restart(self) -> None:
        """Restart the kernel between requests; all state (and the rebuild history) is lost."""
        async with self.lock:
            await self.provider.restart()
            self._history.clear()

    async def interrupt_quietly(self) -> None:
        try:
            await self.provider.interrupt()
        except Exception:
            log.debug("interrupt failed", exc_info=True)

    # ----------------------------------------------------------------- pipeline
    async def _execute(
        self, code: str, timeout: float | None, on_output: OutputCallback | None = None
    ) -> ExecutionResult:
        self._history_before_loss = []
        started = time.monotonic()
        msg_id = self.client.execute(code, silent=False, store_history=True, allow_stdin=False, stop_on_error=True)
        collector = OutputCollector(msg_id, self.caps)
        partial = PartialOutput(on_output, started) if on_output is not None else None
        deadline = None if timeout is None else started + timeout
        reply: dict[str, Any] = {}
        try:
            outcome = await self._collect(collector, deadline, partial)
            if outcome is Outcome.IDLE:
                reply = await self._shell_reply(msg_id)
                if any(p.get("source") == "ask_exit" for p in reply.get("payload", []) or []):
                    outcome = Outcome.EXITED
            elif outcome is Outcome.DEADLINE:
                outcome = await self._stop_runaway(collector, partial)
        except asyncio.CancelledError as cancel:
            # Our owner was cancelled (Ctrl-C): stop the code so nothing runs on unseen, and hand the
            # output so far (plus the KeyboardInterrupt, if it comes within the grace) to whoever records it.
            await asyncio.shield(self.interrupt_quietly())
            await asyncio.shield(self._collect(collector, time.monotonic() + self.interrupt_grace))
            cancel.partial_result = self._cancelled(code, collector, time.monotonic() - started)  # type: ignore[attr-defined]  # rides on the error
            raise
        if partial is not None:
            partial.flush(time.monotonic())
        return await self._finish(code, collector, outcome, reply, time.monotonic() - started, timeout)

    async def _collect(
        self, collector: OutputCollector, deadline: float | None, partial: PartialOutput | None = None
    ) -> Outcome:
        """Feed iopub messages until idle (and ``partial``, if any); ``IDLE``, ``DEADLINE`` or ``DIED``."""
        client, lost = self.client, _LostMessages(self.provider)
        while not collector.idle:
            now = time.monotonic()
            if partial is not None:
                partial.tick(now)  # output held back by the throttle goes out even when the kernel falls silent
            if deadline is not None and now >= deadline:
                return Outcome.DEADLINE
            lost.check(collector, client, now)
            wait = POLL_S if deadline is None else max(min(POLL_S, deadline - now), 0.001)
            try:
                msg = await client.get_iopub_msg(timeout=wait)
            except queue.Empty:
                if not await self.provider.is_alive():
                    return Outcome.DIED
                continue
            if collector.feed(msg) and partial is not None:
                partial.feed(msg, time.monotonic())
            lost.seen(msg, collector)
        return Outcome.IDLE

    async def _shell_reply(self, msg_id: str) -> dict[str, Any]:
        end = time.monotonic() + _REPLY_WAIT_S
        while time.monotonic() < end:
            try:
                msg = await self.client.get_shell_msg(timeout=POLL_S)
            except queue.Empty:
                if not await self.provider.is_alive():
                    return {}
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                content: dict[str, Any] = msg.get("content", {})
                return content
        log.warning("no execute_reply for %s within %.0fs", msg_id, _REPLY_WAIT_S)
        return {}

    async def _stop_runaway(self, collector: OutputCollector, partial: PartialOutput | None = None) -> Outcome:
        """The timeout ladder: ``INTERRUPTED`` (state kept), ``DIED``, ``RESTARTED`` or ``STUCK``."""
        grace = self.interrupt_grace / 2
        if not collector.started:  # SIGINT before the cell starts is lost: wait to see it start
            await self._collect(collector, time.monotonic() + grace, partial)
        for _attempt in range(2):
            if collector.idle:
                break
            await self.interrupt_quietly()
            if await self._collect(collector, time.monotonic() + grace, partial) is Outcome.DIED:
                return Outcome.DIED
        if collector.idle:
            await self._shell_reply(collector.msg_id)
            return Outcome.INTERRUPTED
        if not self.provider.owns_kernel:
            return Outcome.STUCK
        await self.provider.restart()
        return Outcome.RESTARTED

    def _cancelled(self, code: str, collector: OutputCollector, duration: float) -> ExecutionResult:
        """What ran of ``code`` before its owner was cancelled (status ``cancelled``)."""
        return ExecutionResult(
            status="cancelled",
            outputs=tuple(collector.finish()),
            execution_count=collector.execution_count,
            duration_s=duration,
            error=collector.error,
            note="cancelled by the user (Ctrl-C or SIGTERM)",
            code=code,
            dropped_chars=collector.dropped_chars,
            dropped_images=collector.dropped_images,
        )

    async def _finish(
        self,
        code: str,
        collector: OutputCollector,
        outcome: Outcome,
        reply: dict[str, Any],
        duration: float,
        timeout: float | None,
    ) -> ExecutionResult:
        death = self.provider.describe_exit() if outcome is Outcome.DIED else ""
        verdict = classify(
            outcome,
            reply,
            collector.error,
            limits=self.provider.limits,
            timeout=timeout,
            grace=self.interrupt_grace,
            death=death,
            owns_kernel=self.provider.owns_kernel,
        )
        if verdict.restart:
            await self.provider.restart()
        if verdict.state_lost:
            self._history_before_loss = self._history[:]
            self._history.clear()
        elif verdict.status != "cancelled":  # a timed-out or failed cell may have set names too
            self._history.append(RebuildCell(code, self._label, verdict.status))
        return ExecutionResult(
            status=verdict.status,
            outputs=tuple(collector.finish()),
            execution_count=reply.get("execution_count", collector.execution_count),
            duration_s=duration,
            error=collector.error,
            state_lost=verdict.state_lost,
            note=verdict.note,
            code=code,
            dropped_chars=collector.dropped_chars,
            dropped_images=collector.dropped_images,
            display_ids=collector.display_ids,
            display_updates=tuple(collector.display_updates),
        )

    async def _rebuild(self, result: ExecutionResult, timeout: float | None) -> ExecutionResult:
        """Re-run, in order, the earlier cells whose names are still obtainable (``RebuildPlan``).

        Labels in the report are execute() call numbers; a caller that knows what the
        calls were (the agent: setup, rounds) relabels it.
        """
        cells = tuple(self._history_before_loss)
        plan = RebuildPlan(cells, self.language)
        for cell in cells:
            if not plan.should_run(cell):
                continue
            async with self.lock:
                self._label = cell.label
                again = await self._execute(cell.code, timeout)
            if again.state_lost:  # the re-run itself killed the kernel: stop, and say so
                plan.record(cell, False, again.note or "the kernel died on re-run")
                break
            plan.record(cell, again.ok, str(again.error) if again.error else again.status)
        self._history = list(cells)  # the record of what ran stays; a later loss plans from it again
        report = plan.report()
        note = f"{result.note}; state rebuilt: {report.describe('cell')}".lstrip("; ")
        return replace(result, note=note, rebuilt_cells=report.rerun, lost_names=report.missing, rebuild=report)
