"""The analyst: ``AsyncAgent``, which wires a run's parts together.

Owns the agent's settings, its model and where its kernels come from, and one run's wiring: the data
files staged (``staging.DataStaging``), the kernel started, the run prepared (``preparation.Preparation``:
setup cell, probe, opening prompt) and its rounds driven (``rounds.Rounds``); ``run()`` is ``stream()``
collected; ``resume`` and plan mode start the same way. Every piece of a run's state lives in that run's
objects, never here. It does not run rounds, parse replies or lay out notebooks itself.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, aclosing, asynccontextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._loop import in_thread
from ...errors import ConfigError, NotebookError, PlanError
from ...events import Event, PlanEvent, PlanFinished, RunFinished
from ...kernel.interface import (
    Kernel,
    KernelFactory,
    KernelMaker,
    KernelsAhead,
    MadeKernels,
    interchangeable,
    kernel_factory,
    kernels_ahead,
)
from ...kernel.kernelspec import KERNEL_NAME, choose_kernel
from ...kernel.python_env import require_setup_packages
from ...kernel.sandbox.bwrap import SandboxMode
from ...kernel.session import AsyncKernelSession
from ...kernel.workspace import check_outside, default_workspace, fresh_beside, records_beside
from ...model.chat import ChatModel
from ...notebook.export import warm_up
from ...notebook.load import load_resumable
from ...records import Run, RunInfo
from ..config import NO_MODEL_HELP, AgentConfig, settings_in
from ..datafiles.data import warm_describer
from ..names import DataFormat, ProtocolName
from .live import LiveSources, factory_sources, provided_for, reconnected, split_data
from .loop import Ask
from .preparation import Preparation, Prompt
from .rounds import Rounds
from .staging import DataStaging, resumed_files

if TYPE_CHECKING:  # plan mode is imported when a plan starts
    from ..plan.runner import PlanOptions

__all__ = ["AsyncAgent", "warm_host"]


def chat_model_from(config: AgentConfig, model_options: dict[str, Any] | None) -> ChatModel:
    """The model ``config`` names, from the ``kernel_agent.models`` registry (``--model theirs:x``; any
    other name at the OpenAI-compatible endpoint). Raises ``ConfigError`` when no model is configured."""
    if not config.model.name:
        raise ConfigError(NO_MODEL_HELP)
    from ...model.registry import ModelSettings, make_model

    settings = ModelSettings(
        base_url=config.model.base_url,
        api_key=config.model.api_key,
        temperature=config.model.temperature,
        top_p=config.model.top_p,
        stream=config.model.stream,
        request_timeout=config.model.request_timeout,
        options=dict(model_options or {}),
    )
    return make_model(config.model.name, settings)


def _warm_up_of(model: ChatModel) -> Callable[[], None] | None:
    """A model's optional ``ready()``: blocking work (its SDK's import) worth doing in a thread while the
    kernel starts. None when the model has none (a plug-in's model need not)."""
    ready = getattr(model, "ready", None)
    return ready if callable(ready) else None


class AsyncAgent:
    """An analyst model working in a live kernel, reached over any OpenAI-compatible endpoint.

    Arguments after ``vision`` are keyword-only: ``chat_model`` replaces the
    endpoint with any ``ChatModel`` (e.g. the scripted demo model);
    ``session_factory(workspace)`` returns an async context manager yielding
    a started ``Kernel`` (``interface.KernelFactory``, e.g. a ``KernelPool``, or
    a plain callable, whose kernels work in the run's folder; default: an
    ``AsyncKernelSession`` with ``session_options``, local or on a gateway);
    ``model_options`` go to the model's plug-in (the OpenAI-compatible one's: ``max_retries``, ``backoff``,
    ``request_timeout``, ``extra_body`` such as vLLM's ``top_k``);
    every other setting of ``settings.SETTINGS`` (``stuck_after``, ``preload``, ...) is a keyword argument
    too (None: unset, so the environment or the default).
    Raises ``ConfigError`` when no model is configured or a setting is invalid.
    """

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        protocol: ProtocolName | str | None = None,
        max_rounds: int | None = None,
        exec_timeout: float | None = None,
        temperature: float | None = None,
        vision: bool | None = None,
        *,
        chat_model: ChatModel | None = None,
        session_factory: KernelFactory | KernelMaker | None = None,
        session_options: dict[str, Any] | None = None,
        model_options: dict[str, Any] | None = None,
        request_timeout: float | None = None,
        top_p: float | None = None,
        stream: bool | None = None,
        data_format: DataFormat | None = None,
        vllm_extras: bool | None = None,
        max_new_tokens: int | None = None,
        stuck_after: int | None = None,
        feedback_chars: int | None = None,
        full_feedback_rounds: int | None = None,
        old_feedback_chars: int | None = None,
        disk_quota_mb: int | None = None,
        preload: bool | None = None,
        rebuild: bool | None = None,
        sandbox: SandboxMode | None = None,
        network: bool | None = None,
        kernel: str | None = None,
        python: str | None = None,
        template: bool | None = None,
        provider: str | None = None,
        gateway_url: str | None = None,
        gateway_token: str | None = None,
        gateway_kernel: str | None = None,
        memory_mb: int | None = None,
    ) -> None:
        self.config = AgentConfig.resolve(**settings_in(locals()))
        self._ready_model: Callable[[], None] | None = None  # readies the model this agent made, ahead of a run
        if chat_model is None:
            made = chat_model_from(self.config, model_options)
            chat_model, self._ready_model = made, _warm_up_of(made)
        self.chat_model: ChatModel = chat_model
        self._preparation = Preparation(self.config, self.chat_model)
        self._session_options = dict(session_options or {})
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
        if config.kernel.provider_name() != "local" or not (config.kernel.name or config.kernel.python):
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

    def _resume_factory(self, info: RunInfo, sockets: dict[str, Path]) -> KernelFactory:
        """Where a resumed run's kernel comes from: the kernelspec its notebook records (an installed one of
        that name, confined as any other; a claim, so nothing else of it is used) when the user named none
        and the kernels are this agent's own local ones, given the live sources' ``sockets``; else the usual
        factory (``_factory_for``: a fresh kernel given the ``sockets``)."""
        recorded = info.kernelspec.get("name", "")
        if (
            not self._own_kernels
            or self.config.kernel.name
            or self.config.kernel.python
            or self.config.kernel.gateway_url
            or recorded in ("", "python3", KERNEL_NAME)
        ):
            return self._factory_for(sockets)
        given = {"sockets": sockets} if sockets else {}
        return MadeKernels(lambda workspace: self.new_session(workspace, kernel_name=recorded, **given))

    def _factory_for(self, sockets: dict[str, Path], live: LiveSources | None = None) -> KernelFactory:
        """Where a run's kernel comes from: the usual factory; for a run with live sources (``sockets``, the
        broker's to bind), a fresh kernel of this agent's own settings given them (a pooled kernel started
        without the socket cannot reach it); the usual factory again when the sources (``live``) are its
        own (``live.factory_sources``: its kernels have their socket). Raises ``ConfigError`` for a factory of
        another's kernels (a service thread's, a chat's) without sources of its own: they cannot be given a
        socket."""
        if not sockets or (live is not None and live is factory_sources(self._session_factory)):
            return self._session_factory
        if not (self._own_kernels or interchangeable(self._session_factory)):
            raise ConfigError("live data sources need a kernel this agent starts: this agent's kernels are given")
        return MadeKernels(lambda workspace: self.new_session(workspace, sockets=sockets))

    def _kernels_apart(self) -> bool:
        """Whether this agent's kernels work in folders of their own, known before one starts: on a gateway
        (its own kernels), or as the factory says (a pool: ``KernelFactory.kernels_apart``)."""
        return self._session_factory.kernels_apart

    def _kernels_ahead(self) -> KernelsAhead | None:
        """What this agent's kernels are before one starts: its own, from the settings and session options
        (``KernelConfig.ahead``); a factory's, as it says (``KernelFactory``'s optional ``kernels_ahead``)."""
        if self._own_kernels:
            return self.config.kernel.ahead(**self._session_options)
        return kernels_ahead(self._session_factory)

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
        # Checked now, then described while the kernel starts. A kernel that works in the workspace finds its
        # copies there when it starts (the sandbox binds them read-only); a kernel apart gets its own once
        # started, and the workspace's, the run's record, are made beside the first round's code.
        provided = factory_sources(self._session_factory)
        async with await DataStaging.check(data, root, provided) as staging:
            factory = self._factory_for(staging.live.kernel_sockets(), staging.live)
            if not factory.kernels_apart:
                await staging.into_workspace()
            async with aclosing(self._run(task, staging, root, notebook_path, setup, factory)) as events:
                async for event in events:
                    staging.started()  # the first event is RunStarted: the notebook is saved
                    yield event

    async def _run(
        self, task: str, staging: DataStaging, root: Path, notebook_path: Path, setup: str, factory: KernelFactory
    ) -> AsyncGenerator[Event, None]:
        """The run's kernel started from ``factory`` (the first request sent meanwhile when it can be), prepared
        and its rounds driven: ``stream``'s events once its data files are staged."""
        kernels = (
            self._kernels_ahead()
            if factory is self._session_factory
            else self.config.kernel.ahead(**self._session_options)
        )
        language = self._preparation.language_ahead(kernels)
        async with AsyncExitStack() as stack:
            if self._ready_model is not None:  # the SDK's import meanwhile: the first request goes out at once
                stack.push_async_callback(_settled, asyncio.ensure_future(in_thread(self._ready_model)))
            prompt: Prompt | None = None
            first: Ask | None = None
            if language is None:
                session = await stack.enter_async_context(factory(root))
            else:  # the first request goes out while the kernel starts; its first code waits for it
                starting = await stack.enter_async_context(_starting(factory(root)))
                assert kernels is not None  # language_ahead knows a language only of kernels said ahead
                prompt = await self._preparation.ahead(task, staging, language, kernels)
                first = Ask(self.chat_model, prompt.protocol, prompt.messages)
                stack.push_async_callback(first.aclose)  # a run that ends before its first round drops it
                session = await starting
            opening = await self._preparation.new_run(
                session, task, staging, root, notebook_path, setup, prompt, kernels
            )
            rounds = Rounds(self.config, self.chat_model, session, opening, notebook_path, root, staging, first)
            async with aclosing(rounds.events()) as events:  # closing this stream stops the code too
                async for event in events:
                    yield event

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
        given_files, given_sources = split_data(data)
        recorded_names = [recorded.name for recorded in loaded.info.sources]
        provided = factory_sources(self._session_factory, given_sources)
        if provided is None:
            live = reconnected(recorded_names, given_sources)
            opened: AbstractAsyncContextManager[LiveSources] = live
        else:  # the factory's kernels come with their sources, open: theirs to close
            live = provided_for(recorded_names, provided)
            opened = nullcontext(live)
        files = await in_thread(resumed_files, loaded.info, source, given, root, given_files)
        names = tuple(dict.fromkeys([*loaded.info.data_files, *(f.name for f in files)]))
        # The sockets once the sources are open (the factory's own kernels have theirs already).
        async with (
            opened,
            self._resume_factory(loaded.info, {} if provided is not None else live.kernel_sockets())(root) as session,
        ):
            await session.files.put([root / f.name for f in files])
            opening = await self._preparation.resumed(
                session, loaded, task, files, str(root.resolve()), names, restore=restore, live=live
            )
            rounds = Rounds(self.config, self.chat_model, session, opening, target, root)
            async with aclosing(rounds.events()) as events:
                async for event in events:
                    yield event

    async def plan(
        self,
        task: str,
        data: Sequence[str | os.PathLike[str]] = (),
        workspace: str | os.PathLike[str] | None = None,
        notebook: str | os.PathLike[str] | None = None,
        *,
        options: PlanOptions | None = None,
        resume: str | os.PathLike[str] | None = None,
    ) -> PlanFinished:
        """Run ``task`` in plan mode to its end (see ``stream_plan``); return the ``PlanFinished`` event.
        Raises as ``stream_plan`` does."""
        finished: PlanFinished | None = None
        async for event in self.stream_plan(task, data, workspace, notebook, options=options, resume=resume):
            if isinstance(event, PlanFinished):
                finished = event
        if finished is None:
            raise PlanError("plan mode ended without its PlanFinished event")
        return finished

    async def stream_plan(
        self,
        task: str,
        data: Sequence[str | os.PathLike[str]] = (),
        workspace: str | os.PathLike[str] | None = None,
        notebook: str | os.PathLike[str] | None = None,
        *,
        options: PlanOptions | None = None,
        resume: str | os.PathLike[str] | None = None,
    ) -> AsyncIterator[PlanEvent | Event]:
        """Plan mode (``agent.plan.api.stream_plan``) in this agent's kernel sessions, with its model.

        ``options`` is a ``PlanOptions`` (budgets); every cell gets this agent's ``exec_timeout``.
        Raises ``PlanError``, ``NotebookError``, ``DataFileError``, ``ModelError``, ``KernelError``.
        """
        from ..plan.api import stream_plan
        from ..plan.runner import PlanOptions

        options = options or PlanOptions()
        events = stream_plan(
            self.config,
            self.chat_model,
            self._preparation,
            self._session_factory,
            task,
            data,
            workspace,
            notebook,
            options=options,
            resume=resume,
            kernels_apart=self._kernels_apart(),
        )
        async with aclosing(events):  # closing this stream stops the code too
            async for event in events:
                yield event


def warm_host() -> None:
    """Pay this process's first-run costs ahead (the notebook validator's compile, the data describer's
    first parse), e.g. while a server's warm pool starts. Blocking (call it in a thread); raises nothing."""
    warm_up()
    warm_describer()


@asynccontextmanager
async def _starting(manager: AbstractAsyncContextManager[Kernel]) -> AsyncIterator[asyncio.Future[Kernel]]:
    """``manager`` entered in the background (the kernel starts while the run prepares): its kernel's future.
    On the way out, a start still under way is cancelled (the provider cleans a half-started kernel up)
    and a started kernel is closed."""
    start = asyncio.ensure_future(manager.__aenter__())
    try:
        yield start
    finally:
        if not start.done():
            start.cancel()
            await asyncio.wait({start})
        if not start.cancelled() and start.exception() is None:
            await manager.__aexit__(None, None, None)


async def _settled(work: asyncio.Future[Any]) -> None:
    """Wait for ``work``; what it raised is not this run's to report (the first request meets it again)."""
    await asyncio.wait({work})
    if not work.cancelled():
        work.exception()


async def _last_run(events: AsyncIterator[Event]) -> Run:
    final: Run | None = None
    async for event in events:
        if isinstance(event, RunFinished):
            final = event.run
    assert final is not None, "a run stream always ends with RunFinished"
    return final
