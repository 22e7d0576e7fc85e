"""The round engine: ``RoundEngine``, rounds in one live kernel the same for every caller, under a ``RoundPolicy``.

Owns a round: ask the model (``Ask``, one request; the first may be sent ahead, while the kernel starts),
stream its reply as events, parse it with the run's protocol, run the code in the live kernel, feed the
result back; and what ends the rounds whatever the caller (stuck, the disk quota, the rounds run out).
What a caller decides (the code a reply runs, what the model is told, how a round is recorded) is its
policy: run mode's is ``rounds.Rounds``, a plan node's ``plan/runner.py``'s ``NodeRun``. It does not
prepare the run (``preparation``), move data files (``staging``), parse replies (``protocols``), talk
HTTP (``llm``), fold kernel messages (``session``) or lay out notebooks (``notebook``).
"""

from __future__ import annotations

import asyncio
import time
import typing
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..._loop import in_thread
from ...errors import DataFileError, StorageError
from ...events import (
    CodeDelta,
    CodeReady,
    Event,
    ExecutionFinished,
    ExecutionStarted,
    Notice,
    ReasoningDelta,
    RoundStarted,
    TextDelta,
    TextReset,
)
from ...kernel.interface import Kernel
from ...kernel.workspace import Snapshot
from ...model.chat import (
    ChatModel,
    ModelReply,
    Piece,
    ReasoningPiece,
    Retry,
    TextPiece,
    ToolCallDelta,
    close_stream,
    no_reply,
)
from ...model.messages import ChatMessage
from ...records import Round, StopReason, Usage, now
from ...result import ExecutionResult
from ..config import AgentConfig
from ..protocols import Feedback, Protocol, Step
from .execution import StreamedExecution
from .history import StuckGuard, clip_old_feedback
from .quota import over_quota, unmeasured, workspace_usage
from .staging import DataStaging

__all__ = ["Ask", "RoundEngine", "RoundPolicy", "Stopped"]


class Ask:
    """One request to the model, sent when made: ``pieces()`` yields the model's stream (``Piece``s: text,
    tool-call and reasoning pieces as they arrive, retries) up to and including its ``ModelReply``; raises
    ``ModelError``. ``aclose()`` drops it."""

    def __init__(
        self,
        chat_model: ChatModel,
        protocol: Protocol,
        messages: Sequence[ChatMessage],
        options: dict[str, Any] | None = None,
    ) -> None:
        """``options``: the request's, when not the protocol's (a prose plan task is offered no tools)."""
        self.started, self.started_at = time.monotonic(), now()
        self._model = chat_model
        self._stream = chat_model.stream(list(messages), protocol.request_options() if options is None else options)
        self._first = asyncio.ensure_future(self._first_piece())  # the request goes out now, not when read

    async def _first_piece(self) -> Piece | None:
        try:
            return await anext(self._stream)
        except StopAsyncIteration:
            return None

    async def pieces(self) -> AsyncGenerator[Piece, None]:
        try:
            piece = await self._first
            while piece is not None:
                yield piece
                if isinstance(piece, ModelReply):
                    return
                piece = await anext(self._stream, None)
            raise no_reply(self._model)
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Drop the request (when its reply is not in yet) and wait until it has ended. Idempotent."""
        self._first.cancel()
        await asyncio.wait({self._first})
        if not self._first.cancelled():
            self._first.exception()  # read: a request dropped unread is no "exception never retrieved"
        await close_stream(self._stream)


@dataclass(frozen=True)
class _RoundDone:
    """The finished round: the last thing ``_round`` yields (``rounds`` records it; nobody sees it)."""

    round: Round


@dataclass(frozen=True)
class Stopped:
    """Why the engine's rounds stopped: the last thing ``RoundEngine.rounds`` yields (``why``: the notice's
    words for a stop the engine made, stuck or over the disk quota)."""

    reason: StopReason
    why: str = ""


class RoundPolicy(typing.Protocol):
    """What a caller of ``RoundEngine`` decides (run mode: ``Rounds``; plan mode: a node's policy): the
    request's options, the code a reply runs, what the model is told, how a round is recorded and when
    the rounds end. The engine does the rest, the same for every caller."""

    def request_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The options of the next request, from the protocol's."""
        ...

    def code_of(self, reply: ModelReply, step: Step) -> str | None:
        """The code ``step`` runs (None: none)."""
        ...

    def no_code(self, step: Step) -> list[ChatMessage]:
        """The messages answering a reply that runs no code (none when it ends the rounds)."""
        ...

    def feedback(self, step: Step, result: ExecutionResult, told: Feedback) -> Feedback:
        """What the model is told of a round's result; ``told`` is the engine's (its text, the files written
        and the note on a partly used reply)."""
        ...

    async def recorded(self, round_: Round) -> tuple[Sequence[Event], StopReason | None]:
        """Record a finished round; the events that say so and why the rounds end with it (None: they go on).
        Raises ``StorageError`` when it cannot be saved."""
        ...


class RoundEngine:
    """Rounds in one live kernel, the same for every caller: ask (streaming the reply's text, code and
    reasoning as events), parse with the protocol, run the code (``StreamedExecution``: timeouts, rebuilds),
    feed the result back (old feedback clipped; a partly used reply explained), until the ``policy`` ends
    them, the model goes round in circles (``StuckGuard``), the workspace outgrows its disk quota or the
    rounds run out. ``running`` is the round whose code is executing (a cancelled caller keeps it).
    ``staging``, when the run has data files still to record, gives the record's copies (awaited before
    any file comes back and before a round is recorded); ``first_ask``, the first request sent ahead."""

    def __init__(
        self,
        config: AgentConfig,
        chat_model: ChatModel,
        session: Kernel,
        protocol: Protocol,
        messages: list[ChatMessage],
        policy: RoundPolicy,
        *,
        workspace: Path,
        exclude: tuple[Path, ...] = (),
        packages: tuple[str, ...] = (),
        calls: dict[int, int] | None = None,
        staging: DataStaging | None = None,
        first_ask: Ask | None = None,
    ) -> None:
        self.config = config
        self.chat_model = chat_model
        self.session = session
        self.protocol = protocol
        self.messages = messages
        self.policy = policy
        self.workspace = workspace
        self.exclude = exclude  # the records in the workspace: not the code's files, not its disk use
        self.packages = packages  # the analysis packages the kernel has (the feedback's hints)
        self.calls = calls if calls is not None else {}  # session execute() number -> round (0: ours)
        self.staging = staging
        self.first_ask = first_ask
        self.feedback_at: list[range] = []  # per executed round: its feedback in ``messages``
        self.baseline: int | None = None  # bytes the workspace took at the start (its disk quota counts growth)
        self.running: Round | None = None  # the round whose code is executing: kept if the caller is cancelled
        self.record_failed: DataFileError | StorageError | None = None  # the record's copies, this round
        # The kernel's files as the last round left them: the next round's "before" (files written between
        # rounds, by a thread the code started, count for the next round instead of for none).
        self.listing: Snapshot | None = None

    def __repr__(self) -> str:
        return f"<RoundEngine {type(self.policy).__name__} {len(self.messages)} messages>"

    async def rounds(self, first: int, last: int) -> AsyncGenerator[Event | Stopped, None]:
        """Rounds ``first`` to ``last`` at most, each recorded by the policy; the last thing yielded is why
        they stopped. Raises ``ModelError``, ``KernelError``, ``DataFileError``, ``StorageError``."""
        if self.baseline is None and (self.staging is None or self.staging.recorded):
            self.baseline, _ = await self._disk_usage()  # else measured once the record's copies are in
        guard = StuckGuard(self.config.protocol.stuck_after)
        for index in range(first, last + 1):
            yield RoundStarted(index, last)
            round_: Round | None = None
            async with aclosing(self._round(index)) as events:
                async for event in events:
                    if isinstance(event, _RoundDone):
                        round_ = event.round
                    else:
                        yield event
            assert round_ is not None  # _round ends with _RoundDone
            failed = await self._recorded()
            said, stop = await self.policy.recorded(round_)
            if failed is not None:
                raise failed  # the round is kept; the run cannot go on without its record
            for event in said:
                yield event
            if stop is not None:
                yield Stopped(stop)
                return
            if guard.add(round_):
                yield Notice(guard.reason, round=index)
                yield Stopped("stuck", guard.reason)
                return
            full = await self._over_quota()
            if full:
                yield Notice(full, round=index)
                yield Stopped("disk_quota", full)
                return
        yield Stopped("max_rounds")

    async def _round(self, index: int) -> AsyncGenerator[Event | _RoundDone, None]:
        """Ask → parse → execute → feed back; the last thing yielded is the round."""
        sent = clip_old_feedback(
            self.messages,
            self.feedback_at,
            keep=self.config.protocol.full_feedback_rounds,
            clip_chars=self.config.protocol.old_feedback_chars,
        )
        options = self.policy.request_options(self.protocol.request_options())
        ask, self.first_ask = self.first_ask or Ask(self.chat_model, self.protocol, sent, options), None
        reply: ModelReply | None = None
        async with aclosing(self._reply(ask, index)) as pieces:
            async for event in pieces:
                if isinstance(event, ModelReply):
                    reply = event
                else:
                    yield event
        assert reply is not None  # _reply ends with the ModelReply or raises
        model_s = time.monotonic() - ask.started
        step = self.protocol.parse(reply)
        self.messages.append(self.protocol.assistant_message(reply, step))
        if step.problem:
            yield Notice(f"round {index}: {step.problem}", round=index)
        code = self.policy.code_of(reply, step)
        base = Round(
            index=index,
            reply=reply.text,
            reasoning=step.reasoning,
            code=code,
            usage=reply.usage or Usage(),
            model_s=model_s,
            started_at=ask.started_at,
            problem=step.problem,
            reasoning_content=reply.reasoning,
        )
        if code is None:
            self.messages.extend(self.policy.no_code(step))
            yield _RoundDone(replace(base, answer=step.answer))
            return
        async with aclosing(self._executed(base, code, step)) as executed:
            async for done in executed:
                yield done

    async def _reply(self, ask: Ask, index: int) -> AsyncGenerator[Event | ModelReply, None]:
        """The model's stream as events (its text, code and reasoning as they arrive), ending in its reply."""
        code_stream = self.protocol.code_stream()
        async with aclosing(ask.pieces()) as pieces:
            async for piece in pieces:
                if isinstance(piece, TextPiece):
                    yield TextDelta(index, piece.text)
                elif isinstance(piece, ToolCallDelta):
                    if added := code_stream.feed(piece):
                        yield CodeDelta(index, added)
                elif isinstance(piece, ReasoningPiece):
                    yield ReasoningDelta(index, piece.text)
                elif isinstance(piece, Retry):
                    code_stream = self.protocol.code_stream()  # the retried request's call starts over
                    yield TextReset(index, piece.reason)
                else:
                    if rest := code_stream.flush():
                        yield CodeDelta(index, rest)
                    yield piece

    async def _executed(self, base: Round, code: str, step: Step) -> AsyncGenerator[Event | _RoundDone, None]:
        """``code`` run in the kernel, the files it wrote listed and the model told; the last thing yielded
        is the round (``base`` with its result)."""
        index = base.index
        yield CodeReady(index, code, step.reasoning)
        yield ExecutionStarted(index, self.config.kernel.exec_timeout)
        before = self.listing if self.listing is not None else await self.session.files.snapshot(self.exclude)
        self.listing = None  # taken again after this round's code (a round cancelled meanwhile leaves none)
        self.running = base
        if self.staging is not None:
            self.staging.beside_code()  # the record's copies beside the kernel's work, not before the first request
        execution = StreamedExecution(self.session, code, self.config.kernel.exec_timeout, index)
        try:
            async with aclosing(execution.events()) as outputs:
                async for output in outputs:
                    yield output
        except (asyncio.CancelledError, GeneratorExit):
            self.running = replace(base, result=execution.partial)
            raise
        assert execution.result is not None  # events() ran to its end
        self.running = None
        self.calls[execution.result.call] = index
        result = _in_rounds(execution.result, self.calls)
        after = await self.session.files.snapshot(self.exclude)
        self.record_failed = await self._recorded()  # first: a file coming back may bear a data file's name
        artifacts = await self.session.files.changes(before, self.exclude, after=after)
        self.listing = after
        yield ExecutionFinished(index, result, artifacts)
        if after.partial is not None:  # the files listed may not be all the round wrote: said, never hidden
            yield Notice(f"round {index}: the list of files written is partial: {after.partial}", round=index)
        told = self.policy.feedback(step, result, self._feedback(result, artifacts, step.problem))
        feedback = self.protocol.feedback_messages(step, told)
        self.feedback_at.append(range(len(self.messages), len(self.messages) + len(feedback)))
        self.messages.extend(feedback)
        yield _RoundDone(replace(base, result=result, artifacts=artifacts, exec_s=result.duration_s))

    def _feedback(self, result: ExecutionResult, artifacts: Sequence[Any], problem: str | None = None) -> Feedback:
        text = result.to_llm_text(max_chars=self.config.protocol.feedback_chars)
        if result.error is not None:
            hint = self.protocol.language.hint(result.error.ename, result.error.evalue, self.packages)
            text += f"\n{hint}\n" if hint else ""
        files = ""
        if artifacts:
            listed = ", ".join(f"{a.path} ({a.size} bytes, {a.change})" for a in artifacts[:20])
            files = f"[files written: {listed}]\n"
        images = tuple(result.images) if self.config.protocol.vision else ()
        note = f"\n[about your reply: {problem}]\n" if problem else ""  # a partly used reply: what was not
        return Feedback(text=text, images=images, files=files, note=note)

    async def _recorded(self) -> DataFileError | StorageError | None:
        """Wait for the data files' record copies when they are still to make, then measure the disk quota's
        baseline, which counts them. Returns why they failed (raised once the round is saved), else None."""
        failed, self.record_failed = self.record_failed, None
        if self.staging is None or failed is not None:
            return failed
        try:
            grew = await self.staging.before_files()
        except (DataFileError, StorageError) as exc:
            return exc
        if grew:
            self.baseline, _ = await self._disk_usage()  # a count not whole stops the run at its next check
        return None

    async def _disk_usage(self) -> tuple[int, str | None]:
        """Bytes the workspace takes, and why that count is not whole (None: it is)."""
        if not self.config.kernel.disk_quota_mb:
            return 0, None
        return await in_thread(workspace_usage, self.workspace, self.exclude)

    async def _over_quota(self) -> str | None:
        """Why the rounds must stop for the disk quota, or None (also when it is off). A workspace the walk
        could not count whole stops them too: a count it never finished is no proof of staying under."""
        if not self.config.kernel.disk_quota_mb:
            return None
        used, unwalked = await self._disk_usage()
        if unwalked is not None:
            return unmeasured(unwalked)
        return over_quota(used - (self.baseline or 0), self.config.kernel.disk_quota_mb)


def _in_rounds(result: ExecutionResult, calls: dict[int, int]) -> ExecutionResult:
    """A crash rebuild's report told in rounds (the engine counts its execute calls, setup included)."""
    rebuild = result.rebuild
    report = rebuild.relabel(calls) if rebuild is not None else None
    if rebuild is None or report is None:
        return result
    note = result.note.replace(rebuild.describe("cell"), report.describe("round"))
    return replace(result, note=note, rebuilt_cells=report.rerun, rebuild=report)
