"""Run mode's rounds: ``Rounds``, one run's rounds from its opening to its end, and its event stream.

Owns what run mode decides around the engine's rounds (``loop.RoundEngine``): every reply's code runs; a
reply without code ends the run with its answer, or is nudged; each round is saved in the run's notebook;
the run's record (``Run``) kept up to date, saved also when it is cancelled or the machinery fails.
It does not run a round (``loop``), prepare the run (``preparation``) or move data files (``staging``);
``AsyncAgent`` (``agent.py``) wires them.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..._loop import in_thread
from ...errors import DataFileError, KernelError, ModelError, StorageError
from ...events import AnswerReady, Event, Notice, RoundFinished, RunError, RunFinished, RunStarted
from ...kernel.interface import Kernel
from ...model.chat import ChatModel, ModelReply
from ...model.messages import ChatMessage
from ...notebook.export import clean_path
from ...notebook.writer import RunWriter
from ...records import Round, StopReason, now
from ...result import ExecutionResult
from ..config import AgentConfig
from ..protocols import Feedback, Step
from .loop import Ask, RoundEngine, Stopped
from .preparation import Opening
from .staging import DataStaging

__all__ = ["Rounds"]


class Rounds:
    """One run's rounds in ``session`` from its ``opening``, recorded in ``notebook``:
    run mode's policy for the ``RoundEngine`` (every reply's code runs; a reply without code ends the run
    with its answer, or is nudged; each round is saved in the run's notebook) and the run's event stream.

    The mutable state of the run in progress lives here (the values it builds are frozen). ``staging``,
    when the run has data files still to record, gives the record's copies; ``first_ask``, the first
    round's request when it was sent ahead (``Ask``, with the opening messages). ``events()`` runs it once.
    """

    def __init__(
        self,
        config: AgentConfig,
        chat_model: ChatModel,
        session: Kernel,
        opening: Opening,
        notebook: Path,
        workspace: Path,
        staging: DataStaging | None = None,
        first_ask: Ask | None = None,
    ) -> None:
        self.config = config
        self.session = session
        self.run = opening.run
        self.first_round = opening.first_round
        self.notebook = notebook
        self.workspace = workspace
        self.writer = RunWriter(notebook)
        self.engine = RoundEngine(
            config,
            chat_model,
            session,
            opening.protocol,
            opening.messages,
            self,
            workspace=workspace,
            exclude=(notebook, clean_path(notebook)),
            packages=opening.packages,
            calls=dict(opening.calls),
            staging=staging,
            first_ask=first_ask,
        )

    def __repr__(self) -> str:
        return f"<Rounds {self.notebook.name} from round {self.first_round}>"

    async def events(self) -> AsyncGenerator[Event, None]:
        """The run's events, ``RunStarted`` to ``RunFinished``. Model failures end the run (``llm_error``);
        ``KernelError``, ``DataFileError`` and ``StorageError`` are raised carrying the saved run."""
        await self._save()
        yield self._started()
        if self.session.workspace is not None and self.session.limits.sandbox == "off":  # a remote one: the gateway's
            yield Notice(
                f"the kernel runs unconfined (sandbox off): model-written code can do whatever you can "
                f"({self.session.limits.describe()})"
            )
        stop: StopReason | None = None
        last = self.first_round + self.config.protocol.max_rounds - 1
        try:
            async with aclosing(self.engine.rounds(self.first_round, last)) as rounds:  # closing stops the code too
                async for event in rounds:
                    if isinstance(event, Stopped):
                        stop = event.reason
                        if event.reason == "disk_quota":
                            self.run = replace(self.run, error=event.why)
                    else:
                        yield event
        except ModelError as exc:
            stop = "llm_error"
            self.run = replace(self.run, error=str(exc))
            yield RunError(str(exc), type(exc).__name__)
        except (asyncio.CancelledError, KeyboardInterrupt, GeneratorExit):  # GeneratorExit: the stream was closed
            kept = (self.engine.running,) if self.engine.running is not None else ()
            self.run = replace(
                self.run,
                rounds=(*self.run.rounds, *kept),
                stop_reason="cancelled",
                error="cancelled by the user",
                finished_at=now(),
            )
            await self._save()
            raise
        except (KernelError, DataFileError, StorageError) as exc:  # the machinery, not the analysed code
            self.run = replace(self.run, error=f"{type(exc).__name__}: {exc}", finished_at=now())
            await self._save()
            exc.run = self.run
            raise
        if not self.run.finished_at:  # an answer's round saved the finished run already
            self.run = replace(self.run, stop_reason=stop, finished_at=now())
            await self._save()
        yield RunFinished(self.run)

    def _started(self) -> RunStarted:
        info = self.run.info
        return RunStarted(
            info.task,
            info.model,
            info.protocol,
            os.path.abspath(self.workspace),  # absolute for every kind of run (resume was given a relative one)
            os.path.abspath(self.notebook),
            info.scripted,
            info.confinement,
            self.config.protocol.reason,
            info.question or info.task,
        )

    # ----------------------------------------------------------- the policy
    def request_options(self, options: dict[str, Any]) -> dict[str, Any]:
        return options

    def code_of(self, reply: ModelReply, step: Step) -> str | None:
        return step.code

    def no_code(self, step: Step) -> list[ChatMessage]:
        return self.engine.protocol.nudge_messages(step) if step.answer is None else []

    def feedback(self, step: Step, result: ExecutionResult, told: Feedback) -> Feedback:
        return told

    async def recorded(self, round_: Round) -> tuple[Sequence[Event], StopReason | None]:
        self.run = replace(self.run, rounds=(*self.run.rounds, round_), usage=self.run.usage + round_.usage)
        if round_.answer is not None:  # the run ends with this round: its save is the finished run's
            self.run = replace(self.run, answer=round_.answer, stop_reason="answer", finished_at=now())
        await self._save()
        if round_.answer is None:
            return (RoundFinished(round_),), None
        return (RoundFinished(round_), AnswerReady(round_.index, round_.answer)), "answer"

    async def _save(self) -> None:
        self.run = replace(self.run, notebook_path=self.notebook)
        # The full view now (off the loop: a service runs many threads on it); the clean view alongside the next round.
        await in_thread(self.writer.save, self.run)
