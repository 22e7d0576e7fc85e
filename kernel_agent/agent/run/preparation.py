"""A run's preparation: ``Preparation`` makes its ``Opening`` (setup cell, probe, the opening prompt).

Owns what happens between a started kernel and the first round: the setup cell (the language's preload,
the caller's extra setup, the notebook's folder), the probe of what the kernel has (``environment.probe``;
the analysis packages once per environment, ``KnownPackages``), the run's ``RunInfo`` and the protocol's
opening messages; for a resumed run, the rebuild of the earlier cells and the resume messages. It does not
run rounds (``loop``), move data files (``staging``) or talk to the model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import cast

from ..._loop import in_thread
from ...kernel.interface import Kernel, KernelsAhead
from ...kernel.rebuild import RebuildCell, RebuildPlan
from ...kernel.workspace import workspace_from
from ...model.chat import ChatModel
from ...model.messages import ChatMessage
from ...notebook.export import warm_up
from ...notebook.load import LoadedRun
from ...records import RecordedSource, Run, RunInfo, now
from ...result import ExecutionResult, RebuildReport
from ...sources.base import SourceSpec
from ..config import AgentConfig
from ..datafiles.data import DataFile, sql_setup, with_sql
from ..environment import Environment, host_packages, probe, prompt_context
from ..languages import PYTHON, Language, language_of
from ..protocols import PromptContext, Protocol, get_protocol
from .live import LiveSources
from .staging import DataStaging

__all__ = ["SETUP_TIMEOUT_S", "KnownPackages", "Opening", "Preparation", "Prompt", "endpoint"]

SETUP_TIMEOUT_S = 120.0  # the setup cell is ours: a short per-round timeout for the model's code is not its


@dataclass(frozen=True)
class Opening:
    """A run ready for its rounds: its record so far, the protocol, the opening messages, the analysis
    packages the kernel has (for the feedback's hints) and which execute call ran which round (0: ours)."""

    run: Run
    protocol: Protocol
    messages: list[ChatMessage]
    packages: tuple[str, ...]
    calls: dict[int, int] = field(default_factory=dict)
    first_round: int = 1


@dataclass(frozen=True)
class Prompt:
    """The opening prompt, made before the kernel has started (``Preparation.ahead``): the protocol, the
    opening messages and the analysis packages they name."""

    protocol: Protocol
    messages: list[ChatMessage]
    packages: tuple[str, ...]
    started_at: str = field(default_factory=lambda: now())  # the run's start (before its first round's)


class KnownPackages:
    """The analysis packages each environment has, as probed, by ``(language, kernel, python)``: a local
    kernel's packages cannot change between its starts, so one probe per environment in a process."""

    def __init__(self) -> None:
        self._by_environment: dict[tuple[str, str, str], tuple[str, ...]] = {}

    def get(self, key: tuple[str, str, str] | None) -> tuple[str, ...] | None:
        return self._by_environment.get(key) if key is not None else None

    def put(self, key: tuple[str, str, str] | None, packages: tuple[str, ...]) -> None:
        if key is not None:
            self._by_environment[key] = packages


KNOWN_PACKAGES = KnownPackages()  # this process's: every agent's local kernels share their environments


class Preparation:
    """How this agent's runs are prepared (its settings and model name what the record says)."""

    def __init__(self, config: AgentConfig, chat_model: ChatModel, known: KnownPackages = KNOWN_PACKAGES) -> None:
        self.config = config
        self.chat_model = chat_model
        self._known = known

    def protocol(self, language: Language = PYTHON) -> Protocol:
        config = self.config
        return get_protocol(
            config.protocol.name,
            vision=config.protocol.vision,
            data_format=config.protocol.data_format,
            vllm_extras=config.protocol.vllm_extras,
            max_new_tokens=config.protocol.max_new_tokens,
            language=language,
        )

    def setup_code(
        self,
        language: Language,
        files: Sequence[DataFile],
        extra: str,
        notebook: Path,
        root: Path,
        sources: Sequence[str] = (),
    ) -> str:
        """The setup cell: the language's preload (or its plain setup), ``sql`` for the live ``sources`` named and
        the database files (Python's), the extra setup, the notebook's folder."""
        code = language.setup(files) if self.config.kernel.preload else language.plain_setup
        if language.key == PYTHON.key:
            code = with_sql(code, files, sources)
        if extra:
            code = _merged_setup(code, extra)
        return language.beside(code, workspace_from(notebook, root))

    def language_ahead(self, kernels: KernelsAhead | None) -> Language | None:
        """The kernel's language when the opening prompt can be made before it starts: its factory says
        what its kernels are (``KernelsAhead``), and their packages are known without them: this
        interpreter's (the kernels run it, so it can be asked here) or probed earlier in this process for
        that environment (``KnownPackages``). Else None: the run waits for the kernel, as it must."""
        if kernels is None:
            return None
        if kernels.this_interpreter or self._known.get(kernels.environment) is not None:
            return language_of({"name": kernels.language})
        return None

    async def ahead(self, task: str, staging: DataStaging, language: Language, kernels: KernelsAhead) -> Prompt:
        """The opening prompt before the kernel has started, for kernels ``language_ahead`` accepted: the
        data files' description (the host-side describer's), the packages known for their environment or
        asked of this interpreter, no names (a factory that says ``kernels_ahead`` gives fresh kernels).
        Raises ``DataFileError``."""
        key = kernels.environment
        packages = self._known.get(key)
        files, live, found = await asyncio.gather(
            staging.described(),
            staging.live.described(),
            in_thread(host_packages) if packages is None else _given(packages),
        )
        self._known.put(key, found)
        protocol = self.protocol(language)
        messages = protocol.initial_messages(self.prompt_context(Environment(found), task, files, language, live))
        return Prompt(protocol, messages, found)

    async def new_run(
        self,
        session: Kernel,
        task: str,
        staging: DataStaging,
        root: Path,
        notebook: Path,
        extra_setup: str,
        prompt: Prompt | None = None,
        kernels: KernelsAhead | None = None,
    ) -> Opening:
        """The setup cell run, the data files copied to the kernel and described, the opening messages made
        (or taken from ``prompt``, made ahead); ``kernels``, what the factory said its kernels are, keys the
        packages' probe. Raises ``KernelError``, ``DataFileError``, ``StorageError``."""
        language = language_of(session.kernel_info.get("language_info"))
        setup_code = self.setup_code(
            language, staging.files, extra_setup, notebook, root, [spec.name for spec in staging.sources]
        )
        put = staging.into_kernel(session)
        if extra_setup:  # it may load its variables from the data files: they must be there first
            await put

        async def setup_then_environment() -> tuple[ExecutionResult, Environment]:
            ran = await session.execute(setup_code, _setup_timeout(self.config.kernel.exec_timeout))
            # A kernel whose first cell was the setup holds only the setup's names: nothing to ask for.
            key = kernels.environment if kernels is not None else None
            return ran, await self.environment(session, language, names=ran.execution_count != 1, key=key)

        # While the kernel runs the setup cell and answers the probe, this process is idle: finish describing
        # the data files and copying them in (begun as the kernel started; the cell only names them, the
        # preload never opens them) and compile the notebook validator then. A file that cannot be described
        # or copied is raised once all of it is done (nothing left running).
        done = await asyncio.gather(
            setup_then_environment(),
            in_thread(warm_up),
            *([] if extra_setup else [put]),
            staging.live.described(),
            staging.described(),
            return_exceptions=True,
        )
        for outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome
        (setup, environment), files = (
            cast(tuple[ExecutionResult, Environment], done[0]),
            cast(tuple[DataFile, ...], done[-1]),
        )
        protocol = prompt.protocol if prompt is not None else self.protocol(language)
        info = RunInfo(
            task=task,
            model=self.chat_model.name,
            protocol=self.config.protocol.name,
            endpoint=endpoint(self.config.model.base_url, self.chat_model),
            data_files=staging.names,
            workspace=str(root.resolve()),
            setup_code=setup_code,
            scripted=self.chat_model.scripted,
            confinement=session.confinement,
            started_at=prompt.started_at if prompt is not None else now(),
            language_info=dict(session.kernel_info.get("language_info", {})),
            kernelspec=session.kernelspec,
            sources=tuple(RecordedSource(spec.name, spec.kind) for spec in staging.sources),
        )
        run = Run(info=info, setup_result=setup)
        if prompt is not None:
            return Opening(run, protocol, prompt.messages, prompt.packages, {setup.call: 0})
        live = cast(str, done[-2])
        messages = protocol.initial_messages(self.prompt_context(environment, task, files, language, live))
        return Opening(run, protocol, messages, environment.packages, {setup.call: 0})

    async def resumed(
        self,
        session: Kernel,
        loaded: LoadedRun,
        task: str,
        files: Sequence[DataFile],
        workspace: str,
        names: tuple[str, ...],
        *,
        restore: bool = True,
        live: LiveSources | None = None,
    ) -> Opening:
        """A resumed run's opening: the earlier cells rebuilt (unless not ``restore``), the model told what
        was done (the ``live`` sources described again), a new turn opened for ``task``.
        Raises ``KernelError``, ``SourceError``."""
        calls: dict[int, int] = {}
        described = await live.described() if live is not None else ""
        report = await self._restore(session, loaded.rebuild_cells, calls) if restore else None
        language = language_of(session.kernel_info.get("language_info"))
        setup_code = loaded.info.setup_code
        if live is not None and live.specs:
            setup_code = await self._sql_step(session, language, setup_code, files, live.specs, calls)
        protocol = self.protocol(language)
        environment = await self.environment(session, language)
        context = self.prompt_context(environment, loaded.info.task, files, language, described)
        messages = protocol.resume_messages(context, loaded.run, task, report)
        run = self._next_turn(loaded.run, task, session, workspace, names)
        if live is not None and live.specs:
            sources = tuple(RecordedSource(spec.name, spec.kind) for spec in live.specs)
            run = replace(run, info=replace(run.info, sources=sources, setup_code=setup_code))
        return Opening(run, protocol, messages, environment.packages, calls, first_round=len(loaded.rounds) + 1)

    async def _sql_step(
        self,
        session: Kernel,
        language: Language,
        setup_code: str,
        files: Sequence[DataFile],
        specs: Sequence[SourceSpec],
        calls: dict[int, int],
    ) -> str:
        """A resumed run's ``sql`` for its live sources (``specs``), when its recorded setup cell does not define
        it so (a run started without them): run in the kernel as a setup step, and the setup cell with it, so
        the resumed notebook replays; else ``setup_code`` as it was. Python's only (as a new run's)."""
        if language.key != PYTHON.key:
            return setup_code
        live = [spec.name for spec in specs]
        step = sql_setup(files, live)
        if step in setup_code:
            return setup_code
        ran = await session.execute(step, _setup_timeout(self.config.kernel.exec_timeout))
        calls[ran.call] = 0
        return with_sql(setup_code, files, live)  # the same step, where a new run's setup cell has it

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
            endpoint=endpoint(self.config.model.base_url, self.chat_model),
            scripted=self.chat_model.scripted,
            started_at=now(),
            confinement=session.confinement,
            workspace=workspace,
            data_files=data_files,
            kernelspec=session.kernelspec,
            language_info=dict(session.kernel_info.get("language_info") or run.info.language_info),
        )
        return replace(run, info=info, turns=run.all_turns(), answer=None, stop_reason=None, error=None, finished_at="")

    def prompt_context(
        self, environment: Environment, task: str, files: Sequence[DataFile], language: Language, live: str = ""
    ) -> PromptContext:
        """What the opening prompt tells the model: the one view every mode builds from
        (``environment.prompt_context``), with this language's words; ``live``, the live sources' descriptions
        (``LiveSources.described``), said with how this language queries them."""
        preloaded = language.setup_words(files) if self.config.kernel.preload else ""
        return prompt_context(
            environment,
            task,
            files,
            preloaded=preloaded,
            missing=language.missing(environment.packages),
            opens=language.opens,
            live=live_words(live, language),
        )

    async def environment(
        self, session: Kernel, language: Language, *, names: bool = True, key: tuple[str, str, str] | None = None
    ) -> Environment:
        """What the kernel has: its analysis packages, probed once per environment (``KnownPackages``, under
        ``key`` or the settings' kernel; a gateway's or another provider's kernels are asked each time), and
        the names the code defined so far, asked every time (unless not ``names``). Raises ``KernelError``."""
        names_probe = language.names_probe if names else ""
        config = self.config
        if key is None and config.kernel.provider_name() == "local":
            key = (language.key, config.kernel.name or "", config.kernel.python or "")
        cached = self._known.get(key)
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
        self._known.put(key, found.packages)
        return found


async def _given(packages: tuple[str, ...]) -> tuple[str, ...]:
    return packages


def endpoint(base_url: str | None, model: ChatModel) -> str:
    """Where the model is reached, as the record says it."""
    if model.scripted:
        return "scripted (no endpoint)"
    from ...model.llm import endpoint_host

    return endpoint_host(base_url)


def live_words(described: str, language: Language) -> str:
    """The data section's part for the live sources: how ``language`` queries them, then their descriptions
    ("" without any). ``sql()`` is Python's only for now."""
    if not described:
        return ""
    if language.key == PYTHON.key:
        lead = (
            "Live databases, queried read-only with `sql(query, source=None)` (defined by the setup cell): it "
            "returns a pandas DataFrame; `source` names the database when there are several. Each query runs in a "
            "read-only transaction with a time limit and a row cap: aggregate in SQL, fetch what you need."
        )
    else:
        lead = (
            f"Live databases, described below, are queried with `sql()`, which is Python-only for now: "
            f"this {language.name} kernel cannot query them."
        )
    return f"{lead}\n\n{described}"


def _setup_timeout(exec_timeout: float | None) -> float | None:
    """The setup cell's time limit: the rounds' own, but never below ``SETUP_TIMEOUT_S`` (importing the
    analysis stack on a loaded machine can take longer than a round may)."""
    return None if exec_timeout is None else max(exec_timeout, SETUP_TIMEOUT_S)


def _merged_setup(preload: str, extra: str) -> str:
    """The preload, then the extra setup without the import lines the preload already has."""
    have = {line.strip() for line in preload.splitlines() if line.startswith(("import ", "from "))}
    kept = [line for line in extra.strip().splitlines() if line.strip() not in have]
    return f"{preload.rstrip()}\n\n" + "\n".join(kept) + "\n"
