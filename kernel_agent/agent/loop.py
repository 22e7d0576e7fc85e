"""The analysis loop: ``AsyncAgent``.

Owns the rounds: ask the model, parse its reply with the chosen protocol,
run the code in the session's live kernel, feed the result back, record the
round and write the notebook, until an answer, a limit or a failure. Every
step is an ``Event``; ``run()`` is ``stream()`` collected. It does not parse
replies (``protocols``), talk HTTP (``llm``), fold kernel messages
(``session``) or lay out notebooks (``notebook``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from .._loop import in_thread
from ..errors import ConfigError, DataFileError, KernelError, ModelError, NotebookError, StorageError
from ..events import (
    AnswerReady,
    CodeReady,
    Event,
    ExecutionFinished,
    ExecutionStarted,
    Notice,
    ReasoningDelta,
    RoundFinished,
    RoundStarted,
    RunError,
    RunFinished,
    RunStarted,
    TextDelta,
    TextReset,
)
from ..kernel.interface import Kernel, KernelFactory, KernelMaker, MadeKernels, kernel_factory
from ..kernel.kernelspec import KERNEL_NAME, choose_kernel
from ..kernel.python_env import require_setup_packages
from ..kernel.rebuild import RebuildCell, RebuildPlan
from ..kernel.session import AsyncKernelSession
from ..kernel.workspace import (
    Snapshot,
    check_outside,
    default_workspace,
    fresh_beside,
    records_beside,
    workspace_from,
)
from ..model.chat import ChatModel, ModelReply
from ..notebook.claims import DataSources
from ..notebook.export import clean_path, warm_up
from ..notebook.load import load_resumable
from ..notebook.writer import RunWriter
from ..records import Round, Run, RunInfo, StopReason, Usage
from ..result import ExecutionResult, RebuildReport
from .config import NO_MODEL_HELP, AgentConfig
from .data import CheckedData, DataFile, check_data, data_summary, prepare_data, stage_recorded, warm_describer
from .environment import Environment, probe
from .execution import StreamedExecution
from .history import StuckGuard, clip_old_feedback
from .languages import PYTHON, Language, language_of
from .protocols import Feedback, FileInfo, PromptContext, Protocol, get_protocol
from .quota import over_quota, workspace_usage

__all__ = ["AsyncAgent", "warm_host"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Retry:
    reason: str


@dataclass(frozen=True)
class _Thought:
    text: str


@dataclass(frozen=True)
class _Replied:
    """The model's whole reply: the last thing ``_ask`` yields."""

    reply: ModelReply


@dataclass(frozen=True)
class _RoundDone:
    """The finished round: the last thing ``_round`` yields (the driver records it; nobody sees it)."""

    round: Round


@dataclass
class _Live:
    """The mutable state of one run in progress (the values it builds are frozen)."""

    run: Run
    session: Kernel
    protocol: Protocol
    messages: list[dict[str, Any]]
    notebook: Path
    workspace: Path
    first_round: int = 1
    feedback_at: list[range] = field(default_factory=list)  # per executed round: its feedback in ``messages``
    baseline: int = 0  # bytes the workspace took when the run started (its disk quota counts growth)
    running: Round | None = None  # the round whose code is executing: kept in the notebook if the run is cancelled
    calls: dict[int, int] = field(default_factory=dict)  # session execute() number -> round (0: setup or rebuild)
    # The kernel's files as the last round left them: the next round's "before" (files written between
    # rounds, by a thread the code started, count for the next round instead of for none).
    listing: Snapshot | None = None
    # The data files' copies into the workspace when the kernel has copies of its own (a pooled or remote
    # kernel): the run's record, begun as the first round's code starts, awaited before any file comes back
    # from the kernel and before the first round is saved.
    start_recording: Callable[[], asyncio.Future[None]] | None = None
    recording: asyncio.Future[None] | None = None
    record_error: DataFileError | StorageError | None = None  # why they failed: raised once the round is saved
    writer: RunWriter = field(init=False)

    def __post_init__(self) -> None:
        self.writer = RunWriter(self.notebook)

    @property
    def recorded(self) -> bool:
        """Whether the data files' record copies are made (or were never this run's to make)."""
        return self.start_recording is None and self.recording is None

    def begin_recording(self) -> None:
        """Start the record copies if they are still to start (``start_recording``)."""
        if self.start_recording is not None:
            self.recording, self.start_recording = self.start_recording(), None


class AsyncAgent:
    """An analyst model working in a live kernel, reached over any OpenAI-compatible endpoint.

    Arguments after ``vision`` are keyword-only: ``chat_model`` replaces the
    endpoint with any ``ChatModel`` (e.g. the scripted demo model);
    ``session_factory(workspace)`` returns an async context manager yielding
    a started ``Kernel`` (``interface.KernelFactory``, e.g. a ``KernelPool``, or
    a plain callable, whose kernels work in the run's folder; default: an
    ``AsyncKernelSession`` with ``session_options``, local or on a gateway);
    ``model_options`` go to ``OpenAIChatModel`` (``max_retries``, ``backoff``,
    ``request_timeout``, ``extra_body`` such as vLLM's ``top_k``);
    other ``AgentConfig`` fields (``stuck_after``, ``preload``, ...) are accepted too.
    Raises ``ConfigError`` when no model is configured or a setting is invalid.
    """

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        protocol: str | None = None,
        max_rounds: int | None = None,
        exec_timeout: float | None = None,
        temperature: float | None = None,
        vision: bool | None = None,
        *,
        chat_model: ChatModel | None = None,
        session_factory: KernelFactory | KernelMaker | None = None,
        session_options: dict[str, Any] | None = None,
        model_options: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        self.config = AgentConfig.resolve(
            model=model,
            base_url=base_url,
            api_key=api_key,
            protocol=protocol,
            max_rounds=max_rounds,
            exec_timeout=exec_timeout,
            temperature=temperature,
            vision=vision,
            **options,
        )
        if chat_model is None:
            if not self.config.model.name:
                raise ConfigError(NO_MODEL_HELP)
            from ..model.llm import OpenAIChatModel

            options = dict(model_options or {})
            if self.config.model.request_timeout is not None:
                options.setdefault("request_timeout", self.config.model.request_timeout)
            chat_model = OpenAIChatModel(
                self.config.model.name,
                base_url=self.config.model.base_url,
                api_key=self.config.model.api_key,
                temperature=self.config.model.temperature,
                stream=self.config.model.stream,
                **options,
            )
        self.chat_model = chat_model
        self._session_options = dict(session_options or {})
        self._installed: tuple[str, ...] = ()  # the analysis packages the kernel has (probed with the prompt)
        # Its own kernels (``new_session``: local, or apart on a gateway), or the factory given.
        self._own_kernels = session_factory is None
        self._session_factory: KernelFactory = (
            MadeKernels(self.new_session, kernels_apart=bool(self.config.kernel.gateway_url))
            if session_factory is None
            else kernel_factory(session_factory)
        )

    def __repr__(self) -> str:
        return f"<AsyncAgent {self.chat_model.name} protocol={self.config.protocol.name}>"

    def _check_kernel(self) -> None:
        """The local kernel asked for is installed and has what the setup cell needs. Raises ``ConfigError``."""
        config = self.config
        if config.kernel.gateway_url or not (config.kernel.name or config.kernel.python):
            return
        choice = choose_kernel(config.kernel.name or KERNEL_NAME, config.kernel.python)
        if choice.python is not None and config.kernel.preload:  # the setup cell's imports
            require_setup_packages(choice.python.executable)

    def new_session(self, workspace: Path, **options: Any) -> AsyncKernelSession:
        """A kernel session as this agent's runs get one by default (not started): local, or on the gateway.
        ``options`` add or override ``AsyncKernelSession`` arguments (``gateway_kernel_id``, ``kernel_name``
        for a resumed run's own kernelspec...)."""
        return AsyncKernelSession(
            workspace, **{**self.config.kernel.session_options(), **self._session_options, **options}
        )

    def _resume_factory(self, info: RunInfo) -> KernelFactory:
        """Where a resumed run's kernel comes from: the kernelspec its notebook records (an installed one of
        that name, confined as any other; a claim, so nothing else of it is used) when the user named none
        and the kernels are this agent's own local ones; else the usual factory."""
        recorded = info.kernelspec.get("name", "")
        if (
            not self._own_kernels
            or self.config.kernel.name
            or self.config.kernel.python
            or self.config.kernel.gateway_url
            or recorded in ("", "python3", KERNEL_NAME)
        ):
            return self._session_factory
        return MadeKernels(lambda workspace: self.new_session(workspace, kernel_name=recorded))

    async def close(self) -> None:
        """Release the model client. Idempotent."""
        await self.chat_model.aclose()

    async def __aenter__(self) -> AsyncAgent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ----------------------------------------------------------------- public
    async def run(
        self,
        task: str,
        data: Sequence[str | os.PathLike[str]] = (),
        workspace: str | os.PathLike[str] | None = None,
        notebook: str | os.PathLike[str] | None = None,
        *,
        setup: str = "",
    ) -> Run:
        """Run the analysis to its end and return the ``Run`` (also on disk as a notebook).

        Model failures end the run with ``stop_reason="llm_error"``; they are
        not raised. Raises ``DataFileError`` for bad data files (before any
        model call), ``KernelError`` when the kernel cannot be started and
        ``StorageError`` when the disk fills while the data files are copied.
        """
        return await _last_run(self.stream(task, data, workspace, notebook, setup=setup))

    async def stream(
        self,
        task: str,
        data: Sequence[str | os.PathLike[str]] = (),
        workspace: str | os.PathLike[str] | None = None,
        notebook: str | os.PathLike[str] | None = None,
        *,
        setup: str = "",
    ) -> AsyncGenerator[Event, None]:
        """The same run as ``run()``, as an async iterator of events ending with ``RunFinished``.

        ``setup`` is extra code for the setup cell, run after the preload (e.g. loading
        variables shared from a notebook); it is recorded there, so the notebook replays.
        """
        root = Path(workspace) if workspace is not None else default_workspace(task)
        notebook_path = Path(notebook) if notebook is not None else records_beside(root)
        check_outside(notebook_path, root)
        await in_thread(self._check_kernel)  # before any model call
        # Checked now, off the loop, then described while the kernel starts and runs its setup cell, in a worker
        # thread that reads the checked files, never the workspace the kernel reaches. A kernel that works in
        # the workspace finds its copies there when it starts (the sandbox binds them read-only); a kernel
        # apart gets its own in ``_begin``, and the workspace's, the run's record, are made later.
        checked = await asyncio.to_thread(_checked_data, list(data), root)
        reading: list[asyncio.Future[Any]] = [asyncio.ensure_future(_described(checked))]
        live: _Live | None = None
        try:
            installed = not self._kernels_apart()
            if installed:
                await _started(reading, asyncio.to_thread(checked.install))
            async with self._session_factory(root) as session:
                live = await self._begin(session, task, checked, root, notebook_path, setup, reading, installed)
                async with aclosing(self._drive(live)) as events:  # closing this stream stops the code too
                    async for event in events:
                        yield event
        finally:  # a kernel that would not start, a run stopped early: once what reads the files has ended
            if live is not None:
                live.begin_recording()  # a run stopped before its first code: its record still gets the data
            _close_when_done(checked, *reading)

    async def resume(
        self,
        notebook_path: str | os.PathLike[str],
        task: str,
        *,
        notebook: str | os.PathLike[str] | None = None,
        workspace: str | os.PathLike[str] | None = None,
        data: Sequence[str | os.PathLike[str]] = (),
    ) -> Run:
        """Continue an earlier run with a new question (see ``stream_resume``)."""
        return await _last_run(
            self.stream_resume(notebook_path, task, notebook=notebook, workspace=workspace, data=data)
        )

    async def stream_resume(
        self,
        notebook_path: str | os.PathLike[str],
        task: str,
        *,
        notebook: str | os.PathLike[str] | None = None,
        workspace: str | os.PathLike[str] | None = None,
        data: Sequence[str | os.PathLike[str]] = (),
        restore: bool = True,
    ) -> AsyncGenerator[Event, None]:
        """Rebuild the kernel state from ``notebook_path``'s successful cells, tell the model
        what was done, continue with ``task``, and append the new rounds to the same
        notebook (or to ``notebook`` when given).

        The notebook's metadata is a claim, never an order (``notebook/claims.py``): the kernel works
        in ``workspace`` when given, else in a new folder beside the notebook, never in a folder the
        notebook names. Its data files are ``data`` (paths the user passes) and, for the names it
        records that ``data`` does not supply, files read through the door from ``workspace``, else
        beside the notebook (or in its recorded workspace when that is a plain folder under it).
        ``restore=False`` skips the rebuild, for a session factory that hands back the very kernel
        that ran the notebook (the service's live thread kernels). Raises ``NotebookError``, before
        any kernel starts, for a notebook that is not a kernel-agent run or a ``workspace`` that is
        not a folder; ``DataFileError`` for a bad ``data`` path."""
        loaded = await in_thread(load_resumable, notebook_path)
        source = Path(notebook_path)
        target = Path(notebook) if notebook is not None else source
        given = Path(workspace) if workspace is not None else None
        if given is not None and not given.is_dir():
            raise NotebookError(
                f"the workspace {given} is not a folder; pass the folder to continue in "
                "(or none: a new one beside the notebook)",
                path=str(source),
            )
        root = given if given is not None else fresh_beside(source)
        check_outside(target, root)
        files = await in_thread(_resume_data, loaded.info, source, given, root, list(data))
        names = tuple(dict.fromkeys([*loaded.info.data_files, *(f.name for f in files)]))
        async with self._resume_factory(loaded.info)(root) as session:
            await session.files.put([root / f.name for f in files])
            calls: dict[int, int] = {}
            report = await self._restore(session, loaded.rebuild_cells, calls) if restore else None
            protocol = self._protocol(language_of(session.kernel_info.get("language_info")))
            context = await self._context(session, loaded.info.task, files, protocol.language)
            messages = protocol.resume_messages(context, loaded.run, task, report)
            run = self._next_turn(loaded.run, task, session, str(root.resolve()), names)
            live = _Live(
                run, session, protocol, messages, target, root, first_round=len(loaded.rounds) + 1, calls=calls
            )
            async with aclosing(self._drive(live)) as events:
                async for event in events:
                    yield event

    async def _restore(self, session: Kernel, cells: Sequence[RebuildCell], calls: dict[int, int]) -> RebuildReport:
        """Re-run the earlier cells a fresh kernel needs, in order; report exactly what was restored and lost.
        ``calls`` learns which session execute() ran which round."""
        plan = RebuildPlan(tuple(cells), str(session.kernel_info.get("language_info", {}).get("name") or "python"))
        for cell in cells:
            if plan.should_run(cell):
                result = await session.execute(cell.code, self.config.kernel.exec_timeout)
                calls[result.call] = cell.label
                plan.record(cell, result.ok, str(result.error) if result.error else result.status)
        return plan.report()

    def _next_turn(self, run: Run, task: str, session: Kernel, workspace: str, data_files: tuple[str, ...]) -> Run:
        """``run`` with its current turn closed into ``turns`` and a new one opened for ``task``.

        Append-only: the earlier answers stay in ``turns``; the new turn records the model,
        protocol and endpoint this agent uses, not the ones of the session that started the run.
        """
        info = replace(
            run.info,
            task=f"{run.info.task}\n\nFollow-up: {task}",
            question=task,
            model=self.chat_model.name,
            protocol=self.config.protocol.name,
            endpoint=_endpoint(self.config.model.base_url, self.chat_model),
            scripted=self.chat_model.scripted,
            started_at=_now(),
            confinement=session.confinement,
            workspace=workspace,
            data_files=data_files,
            kernelspec=session.kernelspec,
            language_info=dict(session.kernel_info.get("language_info") or run.info.language_info),
        )
        return replace(run, info=info, turns=run.all_turns(), answer=None, stop_reason=None, error=None, finished_at="")

    async def plan(
        self,
        task: str,
        data: Sequence[str | os.PathLike[str]] = (),
        workspace: str | os.PathLike[str] | None = None,
        notebook: str | os.PathLike[str] | None = None,
        *,
        options: Any = None,
        resume: str | os.PathLike[str] | None = None,
    ) -> Any:
        """Run ``task`` in plan mode to its end (see ``stream_plan``); return the ``PlanFinished`` event."""
        finished = None
        async for event in self.stream_plan(task, data, workspace, notebook, options=options, resume=resume):
            finished = event
        return finished

    async def stream_plan(
        self,
        task: str,
        data: Sequence[str | os.PathLike[str]] = (),
        workspace: str | os.PathLike[str] | None = None,
        notebook: str | os.PathLike[str] | None = None,
        *,
        options: Any = None,
        resume: str | os.PathLike[str] | None = None,
    ) -> AsyncIterator[Any]:
        """Plan mode (``agent.plan.api.stream_plan``) in this agent's kernel sessions, with its model.

        ``options`` is a ``PlanOptions`` (budgets); ``exec_timeout`` defaults to this agent's.
        Raises ``PlanError``, ``NotebookError``, ``DataFileError``, ``ModelError``, ``KernelError``.
        """
        from .plan.api import stream_plan
        from .plan.runner import PlanOptions

        options = options or PlanOptions(exec_timeout=self.config.kernel.exec_timeout)
        async for event in stream_plan(
            self.chat_model,
            self._session_factory,
            task,
            data,
            workspace,
            notebook,
            options=options,
            resume=resume,
            preload=self.config.kernel.preload,
            protocol=self._protocol(),
        ):
            yield event

    # ----------------------------------------------------------------- the loop
    async def _begin(
        self,
        session: Kernel,
        task: str,
        checked: CheckedData,
        root: Path,
        notebook: Path,
        extra_setup: str,
        reading: list[asyncio.Future[Any]],
        installed: bool,
    ) -> _Live:
        """The setup cell run, the data files copied to the kernel and described, the opening messages made.
        ``reading`` holds the description under way (its first item); the copies' tasks join it.
        ``installed``: the workspace has its copies already (else they are made while the first round runs)."""
        described = reading[0]
        files = checked.files
        names = [f.name for f in files]
        language = language_of(session.kernel_info.get("language_info"))
        setup_code = language.setup(files) if self.config.kernel.preload else language.plain_setup
        if extra_setup:
            setup_code = _merged_setup(setup_code, extra_setup)
        setup_code = language.beside(setup_code, workspace_from(notebook, root))
        if not installed and session.files.in_local:  # a factory said its kernels work apart, and this one does not
            log.warning("the kernel works in the run's folder after all: its data files are copied in now")
            await _started(reading, asyncio.to_thread(checked.install))
            installed = True
        # The kernel's own copies (a pooled or remote kernel's; nothing where it works in the workspace), then
        # each file checked unchanged when the workspace's copies are made too. Else those, the run's record,
        # are made while the first round's code runs (``_Live.recording``), off the way to the first request.
        put = _put(session, checked, installed)
        if extra_setup:  # it may load its variables from the data files: they must be there first
            await put
        protocol = self._protocol(language)

        async def setup_then_environment() -> tuple[ExecutionResult, Environment]:
            ran = await session.execute(setup_code, _setup_timeout(self.config.kernel.exec_timeout))
            # A kernel whose first cell was the setup holds only the setup's names: nothing to ask for.
            return ran, await self._environment(session, language, names=ran.execution_count != 1)

        # While the kernel runs the setup cell and answers the probe, this process is idle: finish describing
        # the data files and copying them in (begun as the kernel started; the cell only names them, the
        # preload never opens them) and compile the notebook validator then. A file that cannot be described
        # or copied is raised once all of it is done (nothing left running).
        done = await asyncio.gather(
            setup_then_environment(),
            asyncio.to_thread(warm_up),
            described,
            *([] if extra_setup else [put]),
            return_exceptions=True,
        )
        for outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome
        (setup, environment), _, summaries, *_ = cast(list[Any], done)  # none is an exception: raised above
        if isinstance(summaries, DataFileError):
            raise summaries
        files = tuple(replace(f, summary=summary) for f, summary in zip(files, summaries, strict=True))
        info = RunInfo(
            task=task,
            model=self.chat_model.name,
            protocol=self.config.protocol.name,
            endpoint=_endpoint(self.config.model.base_url, self.chat_model),
            data_files=tuple(names),
            workspace=str(root.resolve()),
            setup_code=setup_code,
            scripted=self.chat_model.scripted,
            confinement=session.confinement,
            started_at=_now(),
            language_info=dict(session.kernel_info.get("language_info", {})),
            kernelspec=session.kernelspec,
        )
        messages = protocol.initial_messages(self._prompt_context(environment, task, files, language))
        start = None if installed else lambda: _started(reading, _recorded_copies(checked))
        return _Live(
            Run(info=info, setup_result=setup),
            session,
            protocol,
            messages,
            notebook,
            root,
            calls={setup.call: 0},
            start_recording=start,
        )

    def _protocol(self, language: Language = PYTHON) -> Protocol:
        config = self.config
        return get_protocol(
            config.protocol.name,
            vision=config.protocol.vision,
            data_format=config.protocol.data_format,
            vllm_extras=config.protocol.vllm_extras,
            max_new_tokens=config.protocol.max_new_tokens,
            language=language,
        )

    async def _context(
        self, session: Kernel, task: str, files: Sequence[DataFile], language: Language
    ) -> PromptContext:
        return self._prompt_context(await self._environment(session, language), task, files, language)

    def _prompt_context(
        self, environment: Environment, task: str, files: Sequence[DataFile], language: Language
    ) -> PromptContext:
        """What the opening prompt tells the model: the task, the data, and the kernel as probed."""
        self._installed = environment.packages
        return PromptContext(
            task=task,
            data_summary=data_summary(files),
            packages=environment.packages,
            missing=language.missing(environment.packages),
            preloaded=language.setup_words(files) if self.config.kernel.preload else "",
            files=tuple(FileInfo(f.name, f.size, f.summary) for f in files),
            names=environment.names,
        )

    async def _environment(self, session: Kernel, language: Language, *, names: bool = True) -> Environment:
        """What the kernel has: its analysis packages, probed once per environment in this process (a
        local kernel's packages cannot change between its starts; a gateway's kernels are asked each
        time), and the names the code defined so far, asked every time (unless not ``names``)."""
        names_probe = language.names_probe if names else ""
        config = self.config
        key = (
            None if config.kernel.gateway_url else (language.key, config.kernel.name or "", config.kernel.python or "")
        )
        cached = _PROBED.get(key) if key is not None else None
        if language.probe_prints:  # a kernel without user_expressions (IRkernel): quiet executes
            packages = (
                cached
                if cached is not None
                else (language.parse_probe(await session.run_quietly(language.probe)) if language.probe else ())
            )
            defined = language.parse_probe(await session.run_quietly(names_probe)) if names_probe else ()
            found = Environment(packages, defined)
        else:
            found = await probe(session, packages=language.probe if cached is None else "", names=names_probe)
            if cached is not None:
                found = Environment(cached, found.names)
        if key is not None:
            _PROBED[key] = found.packages
        return found

    async def _drive(self, live: _Live) -> AsyncGenerator[Event, None]:
        run = live.run
        info = run.info
        await self._save(live)
        yield RunStarted(
            info.task,
            info.model,
            info.protocol,
            os.path.abspath(live.workspace),  # absolute for every kind of run (resume was given a relative one)
            os.path.abspath(live.notebook),
            info.scripted,
            info.confinement,
            self.config.protocol.reason,
            info.question or info.task,
        )
        if (
            live.session.workspace is not None and live.session.limits.sandbox == "off"
        ):  # a remote kernel is the gateway's
            yield Notice(
                f"the kernel runs unconfined (sandbox off): model-written code can do whatever you can "
                f"({live.session.limits.describe()})"
            )
        guard = StuckGuard(self.config.protocol.stuck_after)
        if live.recorded:  # else measured once the data files' record copies are in (``_recorded``)
            live.baseline = await self._disk_usage(live)
        last = live.first_round + self.config.protocol.max_rounds - 1
        stop: StopReason | None = None
        try:
            for index in range(live.first_round, last + 1):
                yield RoundStarted(index, last)
                round_: Round | None = None
                async with aclosing(self._round(live, index)) as events:
                    async for event in events:
                        if isinstance(event, _RoundDone):
                            round_ = event.round
                        else:
                            yield event
                assert round_ is not None  # _round ends with _RoundDone
                await self._recorded(live)
                live.run = replace(live.run, rounds=(*live.run.rounds, round_), usage=live.run.usage + round_.usage)
                if round_.answer is not None:  # the run ends with this round: its save is the finished run's
                    stop = "answer"
                    live.run = replace(live.run, answer=round_.answer, stop_reason=stop, finished_at=_now())
                await self._save(live)
                if live.record_error is not None:  # the round is kept; the run cannot go on without its record
                    raise live.record_error
                yield RoundFinished(round_)
                if round_.answer is not None:
                    yield AnswerReady(index, round_.answer)
                    break
                if guard.add(round_):
                    stop = "stuck"
                    yield Notice(guard.reason, round=index)
                    break
                full = await self._over_quota(live)
                if full:
                    stop = "disk_quota"
                    live.run = replace(live.run, error=full)
                    yield Notice(full, round=index)
                    break
            else:
                stop = "max_rounds"
        except ModelError as exc:
            stop = "llm_error"
            live.run = replace(live.run, error=str(exc))
            yield RunError(str(exc), type(exc).__name__)
        except (asyncio.CancelledError, KeyboardInterrupt, GeneratorExit):  # GeneratorExit: the stream was closed
            kept = (live.running,) if live.running is not None else ()
            live.run = replace(
                live.run,
                rounds=(*live.run.rounds, *kept),
                stop_reason="cancelled",
                error="cancelled by the user",
                finished_at=_now(),
            )
            await self._save(live)
            raise
        except (
            KernelError,
            DataFileError,
            StorageError,
        ) as exc:  # the machinery, not the analysed code: raise, carrying the saved run
            live.run = replace(live.run, error=f"{type(exc).__name__}: {exc}", finished_at=_now())
            await self._save(live)
            exc.run = live.run
            raise
        if not live.run.finished_at:  # an answer's round saved the finished run already
            live.run = replace(live.run, stop_reason=stop, finished_at=_now())
            await self._save(live)
        yield RunFinished(live.run)

    async def _round(self, live: _Live, index: int) -> AsyncGenerator[Event | _RoundDone, None]:
        started_at = _now()
        t0 = time.monotonic()
        reply: ModelReply | None = None
        sent = clip_old_feedback(
            live.messages,
            live.feedback_at,
            keep=self.config.protocol.full_feedback_rounds,
            clip_chars=self.config.protocol.old_feedback_chars,
        )
        async for piece in self._ask(sent, live.protocol):
            if isinstance(piece, str):
                yield TextDelta(index, piece)
            elif isinstance(piece, _Thought):
                yield ReasoningDelta(index, piece.text)
            elif isinstance(piece, _Replied):
                reply = piece.reply
            else:
                yield TextReset(index, piece.reason)
        assert reply is not None  # _ask ends with _Replied or raises
        model_s = time.monotonic() - t0
        step = live.protocol.parse(reply)
        live.messages.append(live.protocol.assistant_message(reply, step))
        if step.problem:
            yield Notice(f"round {index}: {step.problem}", round=index)
        base = Round(
            index=index,
            reply=reply.text,
            reasoning=step.reasoning,
            code=step.code,
            usage=reply.usage or Usage(),
            model_s=model_s,
            started_at=started_at,
            problem=step.problem,
            reasoning_content=reply.reasoning,
        )
        if step.code is None:
            if step.answer is None:
                live.messages.extend(live.protocol.nudge_messages(step))
            yield _RoundDone(replace(base, answer=step.answer))
            return
        yield CodeReady(index, step.code, step.reasoning)
        yield ExecutionStarted(index, self.config.kernel.exec_timeout)
        exclude = (live.notebook, clean_path(live.notebook))
        before = live.listing if live.listing is not None else await live.session.files.snapshot(exclude)
        live.listing = None  # taken again after this round's code (a round cancelled meanwhile leaves none)
        live.running = base
        live.begin_recording()  # the record copies beside the kernel's work, not before the first request
        execution = StreamedExecution(live.session, step.code, self.config.kernel.exec_timeout, index)
        try:
            async with aclosing(execution.events()) as outputs:
                async for output in outputs:
                    yield output
        except (asyncio.CancelledError, GeneratorExit):
            live.running = replace(base, result=execution.partial)
            raise
        assert execution.result is not None  # events() ran to its end
        result = execution.result
        live.running = None
        live.calls[result.call] = index
        result = _in_rounds(result, live.calls)
        after = await live.session.files.snapshot(exclude)
        await self._recorded(live)  # the record's copies first: a file coming back may bear a data file's name
        artifacts = await live.session.files.changes(before, exclude, after=after)
        live.listing = after
        yield ExecutionFinished(index, result, artifacts)
        feedback = live.protocol.feedback_messages(
            step, self._feedback(result, artifacts, step.problem, live.protocol.language)
        )
        live.feedback_at.append(range(len(live.messages), len(live.messages) + len(feedback)))
        live.messages.extend(feedback)
        yield _RoundDone(replace(base, result=result, artifacts=artifacts, exec_s=result.duration_s))

    async def _ask(
        self, messages: list[dict[str, Any]], protocol: Protocol
    ) -> AsyncIterator[str | _Retry | _Thought | _Replied]:
        """Call the model; yield text and reasoning deltas as they stream (and retries), then the whole reply."""
        queue: asyncio.Queue[str | _Retry | _Thought] = asyncio.Queue()
        task = asyncio.ensure_future(
            self.chat_model.complete(
                list(messages),
                options=protocol.request_options(),
                on_delta=queue.put_nowait,
                on_retry=lambda reason: queue.put_nowait(_Retry(reason)),
                on_reasoning=lambda text: queue.put_nowait(_Thought(text)),
            )
        )
        getter: asyncio.Future[str | _Retry | _Thought] | None = None
        try:
            while not task.done() or not queue.empty():
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield getter.result()
                else:
                    getter.cancel()
            yield _Replied(task.result())
        finally:
            for pending in (task, getter):
                if pending is not None and not pending.done():
                    pending.cancel()

    def _feedback(
        self, result: ExecutionResult, artifacts: Sequence[Any], problem: str | None = None, language: Language = PYTHON
    ) -> Feedback:
        text = result.to_llm_text(max_chars=self.config.protocol.feedback_chars)
        if result.error is not None:
            hint = language.hint(result.error.ename, result.error.evalue, self._installed)
            text += f"\n{hint}\n" if hint else ""
        files = ""
        if artifacts:
            listed = ", ".join(f"{a.path} ({a.size} bytes, {a.change})" for a in artifacts[:20])
            files = f"[files written: {listed}]\n"
        images = tuple(result.images) if self.config.protocol.vision else ()
        note = f"\n[about your reply: {problem}]\n" if problem else ""  # a partly used reply: what was not
        return Feedback(text=text, images=images, files=files, note=note)

    def _kernels_apart(self) -> bool:
        """Whether this agent's kernels work in folders of their own, known before one starts: on a gateway
        (its own kernels), or as the factory says (a pool: ``KernelFactory.kernels_apart``)."""
        return self._session_factory.kernels_apart

    async def _recorded(self, live: _Live) -> None:
        """Wait for the data files' record copies when they are still to make (``_Live.recording``), then
        measure the disk quota's baseline, which counts them. When they failed, ``live.record_error`` says
        why (``_drive`` raises it once the round is saved)."""
        live.begin_recording()
        if live.recording is None:
            return
        recording, live.recording = live.recording, None
        try:
            await recording
        except (DataFileError, StorageError) as exc:
            live.record_error = exc
        live.baseline = await self._disk_usage(live)

    async def _disk_usage(self, live: _Live) -> int:
        if not self.config.kernel.disk_quota_mb:
            return 0
        exclude = (live.notebook, clean_path(live.notebook))
        return await asyncio.to_thread(workspace_usage, live.workspace, exclude)

    async def _over_quota(self, live: _Live) -> str | None:
        """Why the run must stop for the disk quota, or None (also when it is off)."""
        if not self.config.kernel.disk_quota_mb:
            return None
        return over_quota(await self._disk_usage(live) - live.baseline, self.config.kernel.disk_quota_mb)

    async def _save(self, live: _Live) -> None:
        live.run = replace(live.run, notebook_path=live.notebook)
        # The full view now (off the loop: a service runs many threads on it); the clean view alongside the next round.
        await in_thread(live.writer.save, live.run)


def warm_host() -> None:
    """Pay this process's first-run costs ahead (the notebook validator's compile, the data describer's
    first parse), e.g. while a server's warm pool starts. Blocking (call it in a thread); raises nothing."""
    warm_up()
    warm_describer()


def _checked_data(paths: list[Any], root: Path) -> CheckedData:
    """The data files checked and the workspace made (the kernel starts there). Blocking; raises
    ``DataFileError`` and ``ConfigError`` as ``check_data`` and ``make_workspace`` do."""
    checked = check_data(paths, root)
    try:
        checked.make_workspace()
    except BaseException:
        checked.close()
        raise
    return checked


async def _described(checked: CheckedData) -> tuple[str, ...] | DataFileError:
    """The checked files' summaries (made in a worker thread), or the ``DataFileError`` one raised."""
    try:
        return await asyncio.to_thread(checked.summaries)
    except DataFileError as exc:
        return exc


async def _put(session: Kernel, checked: CheckedData, installed: bool) -> None:
    """The data files copied to the kernel from the checked files (``KernelFiles.put``, a no-op where the kernel
    works in the workspace); when the workspace has its copies (``installed``), each file is then checked
    unchanged, so every copy holds the same bytes (else ``_recorded_copies`` checks). Raises
    ``DataFileError``, ``KernelError``."""
    await session.files.put(list(checked.reads), [f.name for f in checked.files])
    if installed:
        await asyncio.to_thread(checked.check_unchanged)


async def _recorded_copies(checked: CheckedData) -> None:
    """The workspace's copies of the data files, then each file checked unchanged since the kernel's copy
    was made from it. Raises ``DataFileError``, ``StorageError`` (the disk filled up meanwhile)."""
    try:
        await asyncio.to_thread(checked.install)
    except DataFileError:
        raise
    except ConfigError as exc:  # the workspace is gone and cannot be made again
        raise DataFileError(f"cannot copy the data files into {checked.workspace}: {exc}") from exc
    await asyncio.to_thread(checked.check_unchanged)


def _started(reading: list[asyncio.Future[Any]], work: Awaitable[Any]) -> asyncio.Future[Any]:
    """``work`` as a task, added to ``reading`` (what must end before the checked files are closed)."""
    task = asyncio.ensure_future(work)
    reading.append(task)
    return task


def _close_when_done(checked: CheckedData, *work: asyncio.Future[Any]) -> None:
    """Close ``checked`` (its private copies) once the threads reading it are done: now, or when they end."""
    running = [future for future in work if not future.done()]
    for future in work:  # their errors are not this run's to report when it failed before it awaited them
        if future.done() and not future.cancelled():
            future.exception()
    if not running:
        checked.close()
        return
    asyncio.gather(*running, return_exceptions=True).add_done_callback(lambda _: checked.close())


async def _last_run(events: AsyncIterator[Event]) -> Run:
    final: Run | None = None
    async for event in events:
        if isinstance(event, RunFinished):
            final = event.run
    assert final is not None, "a run stream always ends with RunFinished"
    return final


def _in_rounds(result: ExecutionResult, calls: dict[int, int]) -> ExecutionResult:
    """A crash rebuild's report told in rounds (the engine counts its execute calls, setup included)."""
    rebuild = result.rebuild
    report = rebuild.relabel(calls) if rebuild is not None else None
    if rebuild is None or report is None:
        return result
    note = result.note.replace(rebuild.describe("cell"), report.describe("round"))
    return replace(result, note=note, rebuilt_cells=report.rerun, rebuild=report)


def _endpoint(base_url: str | None, model: ChatModel) -> str:
    if model.scripted:
        return "scripted (no endpoint)"
    from ..model.llm import endpoint_host

    return endpoint_host(base_url)


SETUP_TIMEOUT_S = 120.0  # the setup cell is ours: a short per-round timeout for the model's code is not its


def _setup_timeout(exec_timeout: float | None) -> float | None:
    """The setup cell's time limit: the rounds' own, but never below ``SETUP_TIMEOUT_S`` (importing the
    analysis stack on a loaded machine can take longer than a round may)."""
    return None if exec_timeout is None else max(exec_timeout, SETUP_TIMEOUT_S)


_PROBED: dict[tuple[str, str, str], tuple[str, ...]] = {}  # (language, kernel, python) -> installed packages


def _merged_setup(preload: str, extra: str) -> str:
    """The preload, then the extra setup without the import lines the preload already has."""
    have = {line.strip() for line in preload.splitlines() if line.startswith(("import ", "from "))}
    kept = [line for line in extra.strip().splitlines() if line.strip() not in have]
    return f"{preload.rstrip()}\n\n" + "\n".join(kept) + "\n"


def _resume_data(
    info: RunInfo, notebook: Path, given: Path | None, root: Path, data: list[Any]
) -> tuple[DataFile, ...]:
    """The data files of a resumed run, now in ``root``: ``data`` copied in as for a new run, then each
    recorded name ``data`` does not supply, staged from where the notebook's claims allow."""
    given_files = prepare_data(data, root) if data else ()
    supplied = {f.name for f in given_files}
    sources = DataSources.for_notebook(notebook, info.workspace, given)
    recorded = stage_recorded(sources, [name for name in info.data_files if name not in supplied], root)
    return (*recorded, *given_files)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
