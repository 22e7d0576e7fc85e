"""One MCP client's live kernel and the record of what it ran: ``Workbench``.

Owns, for one MCP connection, the kernel session (built lazily by the same
``new_session`` the agent uses, so the same sandbox, limits and secret
rules apply), the ``Run`` that records every execution as a round, and the
notebook written after each one (``export_run``, the exporter of agent runs)
off the call's path, so a killed server loses at most the last moment's calls:
rebuilding the notebook grows with the session (~0.1 s of CPU at 300 cells), so
after each write the writer rests ``WRITE_REST`` times as long as it took
before the next, leaving the loop (and the GIL) to the calls; ``flush`` cuts the
rest short. A restart is recorded too: the setup code
runs again as its own cell, so the notebook replays. The session's live sources
(``--data NAME=URI``) are opened with its kernel, which is started given their
broker's socket (``sql()`` in the setup cell), and closed with it. It knows nothing of MCP:
the server turns its values into content blocks.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from .._loop import in_thread
from ..agent.datafiles.data import DataFile, data_summary, opened_beside, preload_code, with_sql
from ..agent.languages import PYTHON
from ..agent.run.live import LiveSources
from ..agent.run.preparation import live_words
from ..errors import KernelError, SessionClosedError
from ..kernel.door import Door, plain_parts
from ..kernel.interface import EXEC_TIMEOUT_S
from ..kernel.partial import OutputCallback
from ..kernel.session import AsyncKernelSession
from ..kernel.workspace import check_outside, records_beside, workspace_from
from ..notebook.export import build_notebook, clean_path, export_run, notebook_text
from ..notebook.kinds import MCP_PROTOCOL
from ..records import RecordedSource, Round, Run, RunInfo
from ..result import ExecutionResult
from ..sources.base import SourceSpec
from .files import FileEntry, write_file

__all__ = ["SessionBuilder", "Workbench", "close_ahead", "default_session"]

log = logging.getLogger(__name__)

WRITE_REST = 4.0  # the writer's pause after a write, in multiples of that write's time (busy at most 1/5)


class SessionBuilder(Protocol):
    """Makes a connection's kernel session (not started) for ``workspace``; ``options`` add ``AsyncKernelSession``
    arguments (``sockets``: the live sources' broker)."""

    def __call__(self, workspace: Path, /, **options: Any) -> AsyncKernelSession: ...


_RESTART_NOTE = (
    "> **Kernel restarted** by the MCP client: the variables defined above are gone. The setup code runs again below."
)
_LOST_NOTE = (
    "> **The kernel was restarted** after the cell above: its variables are gone. The setup code runs again below."
)
# Evaluated silently in the kernel: a JSON list of the user's variables, bounded, never raising.
_VARIABLES = """__import__('json').dumps([
    [n, type(v).__name__, str(getattr(v, 'shape', '')), (repr(v) if not hasattr(v, 'shape') else '')[:80]]
    for n, v in sorted(globals().items())
    if not n.startswith('_') and n not in ('In', 'Out', 'exit', 'quit', 'get_ipython')
    and type(v).__name__ not in ('module', 'function', 'type', 'builtin_function_or_method')
][:LIMIT])"""


def default_session(workspace: Path, /, **options: Any) -> AsyncKernelSession:
    """The agent's default kernel session for ``workspace`` (our kernelspec, default limits), with ``options``."""
    return AsyncKernelSession(workspace, **options)


class Workbench:
    """A live kernel for one MCP client, with every execution recorded in a notebook.

    ``files`` are data files already installed in ``workspace`` (``prepare_data``);
    the setup cell preloads them as the agent does. ``timeout`` is the default
    per-execution deadline in seconds. ``client`` names the MCP client in the
    notebook's header. ``ahead`` is a kernel session already starting for this
    workbench (used instead of a new one from ``session_factory``; shut down on
    ``close`` if never used; never given with ``sources``, whose kernel must have their socket).
    ``sources`` are live databases, opened (their broker) as the kernel starts and closed with it.
    """

    def __init__(
        self,
        workspace: Path,
        *,
        files: Sequence[DataFile] = (),
        session_factory: SessionBuilder = default_session,
        timeout: float = EXEC_TIMEOUT_S,
        client: str = "an MCP client",
        notebook: Path | None = None,
        ahead: asyncio.Future[AsyncKernelSession] | None = None,
        sources: Sequence[SourceSpec] = (),
    ) -> None:
        self.workspace = workspace
        self.files = tuple(files)
        self.live = LiveSources(sources)
        self._live_open = False
        self.timeout = timeout
        self.notebook = notebook or records_beside(workspace)  # out of the kernel's reach
        check_outside(self.notebook, workspace)
        self._factory = session_factory
        self._client = client
        self._session: AsyncKernelSession | None = None
        self._ahead = ahead
        self._starting = asyncio.Lock()
        self._closed = False
        self._settling: asyncio.Future[None] | None = None
        self._uploads: list[str] = []
        self._dirty = False
        self._writer: asyncio.Future[None] | None = None
        self._hurry = asyncio.Event()  # set by flush: write now, no rest
        self._remote_files = False  # the kernel works elsewhere (a gateway): files travel through session.files
        self.run = Run(info=RunInfo(task=""))

    def __repr__(self) -> str:
        return f"<Workbench {self.workspace} {len(self.run.rounds)} rounds>"

    @property
    def setup_code(self) -> str:
        setup = preload_code(self.files) if self.files else "%matplotlib inline\n"
        setup = with_sql(setup, self.files, [spec.name for spec in self.live.specs])
        return opened_beside(setup, workspace_from(self.notebook, self.workspace))

    async def session(self) -> AsyncKernelSession:
        """The live kernel session, started on first use. Raises ``KernelStartError``, or
        ``SessionClosedError`` once the workbench is closed."""
        async with self._starting:
            if self._closed:
                raise SessionClosedError("this MCP session has ended")
            if self._session is None:
                session = await self._started()
                self._session = session
                self._remote_files = await in_thread(_elsewhere, session, self.workspace)
                # A kernel elsewhere (a gateway) gets the data files through the files seam; locally a no-op.
                await session.files.put([self.workspace / name for name in self._data_names()])
                setup = await session.execute(self.setup_code, self.timeout)
                self.run = Run(info=self._info(session), setup_result=setup)
                await self._save()
            session = self._session
        if self._settling is not None:
            settling, self._settling = self._settling, None
            await settling
        return session

    async def _started(self) -> AsyncKernelSession:
        """The session started ahead when there is one (a failed one is followed by a new try),
        else a new one. Cancelled while the one ahead starts, it keeps it for the next call."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            try:
                return await asyncio.shield(ahead)
            except asyncio.CancelledError:
                self._ahead = ahead
                raise
            except KernelError:
                log.warning("the kernel started ahead failed; starting another", exc_info=True)
        if not self.live.specs:
            session = self._factory(self.workspace)
        else:  # the sources first: the kernel is started given their broker's socket
            if not self._live_open:
                await self.live.open()
                self._live_open = True
            session = self._factory(self.workspace, sockets=self.live.kernel_sockets())
        await session.start()
        return session

    async def execute(
        self, code: str, timeout: float | None = None, *, on_output: OutputCallback | None = None
    ) -> ExecutionResult:
        """Run ``code`` in the live kernel and record it; ``on_output`` gets its output while it runs.
        Errors in the code are data. Raises ``KernelError`` when the kernel cannot be started or restarted."""
        session = await self.session()
        started, clock = _now(), time.monotonic()
        before = await session.files.snapshot() if self._remote_files else None
        try:
            result = await session.execute(code, timeout or self.timeout, on_output=on_output)
        except asyncio.CancelledError:
            # The client cancelled: the engine interrupted the code. Keep the record honest
            # without a cell that a replay would run.
            self._record(
                Round(
                    index=len(self.run.rounds) + 1,
                    reply="",
                    started_at=started,
                    reasoning=_stopped_note("Cancelled by the MCP client", code, time.monotonic() - clock),
                )
            )
            self._settling = asyncio.ensure_future(self._settle(session))
            self._schedule_save()
            raise
        if result.error is not None and result.error.ename == "KeyboardInterrupt":
            # Stopped by the interrupt tool: as a cell, a replay would run it again, endlessly.
            note = _stopped_note("Interrupted by the MCP client", code, result.duration_s)
            self._record(Round(index=len(self.run.rounds) + 1, reply="", reasoning=note, started_at=started))
        else:
            self._record(
                Round(
                    index=len(self.run.rounds) + 1,
                    reply="",
                    code=code,
                    result=result,
                    exec_s=result.duration_s,
                    started_at=started,
                )
            )
        if before is not None and not result.state_lost:  # what the kernel wrote, back where list/read_file look
            await session.files.changes(before)
        if result.state_lost:  # a fresh kernel: plotting and data files as the client had them
            await self._setup_again(session, _LOST_NOTE)
        self._schedule_save()
        return result

    async def interrupt(self) -> bool:
        """Interrupt whatever runs now; False when no kernel was started yet."""
        if self._session is None:
            return False
        await self._session.interrupt()
        return True

    async def restart(self) -> ExecutionResult:
        """Restart the kernel (all state lost), run the setup code again and record both.
        Raises ``KernelError`` for a kernel that cannot be restarted."""
        session = await self.session()
        await session.restart()
        setup = await self._setup_again(session, _RESTART_NOTE)
        self._schedule_save()
        return setup

    async def _setup_again(self, session: AsyncKernelSession, note: str) -> ExecutionResult:
        # ``%reset -f`` does nothing in the fresh kernel, but in a replay (one kernel for the
        # whole notebook) it drops the variables here as the restart did.
        code = "%reset -f\n" + self.setup_code
        setup = await session.execute(code, self.timeout)
        self._record(
            Round(index=len(self.run.rounds) + 1, reply="", reasoning=note, code=code, result=setup, started_at=_now())
        )
        return setup

    async def upload(self, relative: str, content: str, encoding: Literal["text", "base64"] = "text") -> FileEntry:
        """Write a file into the workspace for the client and list it among the run's data files,
        so a replay stages it. Raises ``WorkspaceFileError`` as ``files.write_file`` does."""
        entry = await in_thread(write_file, self.workspace, relative, content, encoding)
        if self._session is not None and self._remote_files:
            await self._session.files.put([self.workspace / entry.path])  # the kernel works on a copy
        if entry.path not in self._uploads:
            self._uploads.append(entry.path)
        if self.run.info.task:  # the kernel has started: the record exists
            self.run = replace(self.run, info=replace(self.run.info, data_files=self._data_names()))
            self._schedule_save()
        return entry

    def _data_names(self) -> tuple[str, ...]:
        names = [f.name for f in self.files]
        return (*names, *(path for path in self._uploads if path not in names))

    async def variables(self, limit: int = 100) -> list[list[str]]:
        """The user's variables: ``[name, type, shape, short repr]`` rows, at most ``limit``.
        Raises ``KernelError`` when the kernel does not answer."""
        session = await self.session()
        found = await session.evaluate({"v": _VARIABLES.replace("LIMIT", str(int(limit)))})
        if found["v"] is None:
            raise KernelError("the kernel could not list its variables")
        rows: list[list[str]] = json.loads(ast.literal_eval(found["v"]))
        return rows

    async def describe_data(self) -> str:
        """The data summary our own model gets (types, sizes, columns, previews; how a database file opens), then
        each live source's description and how ``sql()`` queries it (their kernel started first). Raises
        ``SourceError`` for a source that cannot be reached, ``KernelError``."""
        parts = [data_summary(self.files, opens=PYTHON.opens)] if self.files else []  # our kernels are Python's
        if self.live.specs:
            await self.session()
            parts.append(live_words(await self.live.described(), PYTHON))
        return "\n\n".join(parts) or "No data files were given to this session."

    async def export(self, relative: str | None = None) -> Path:
        """Write the notebook of everything run so far to ``relative`` in the workspace (through the door:
        the kernel may have made any folder on the way a link) or to the live one; return its path.
        Raises ``NotebookError`` when it cannot be written, ``WorkspaceFileError`` for a refused path."""
        await self.session()
        if relative is None:
            run = replace(self.run, notebook_path=self.notebook)
            return await in_thread(export_run, run, self.notebook)
        target = self.workspace / "/".join(plain_parts(relative))
        run = replace(self.run, notebook_path=target)
        await in_thread(_export_through_door, run, Door(self.workspace), target.relative_to(self.workspace))
        return target

    async def close(self) -> None:
        """Shut the kernel down and write the final notebook. Idempotent."""
        async with self._starting:
            if self._closed:
                return
            self._closed = True
            session, self._session = self._session, None
            ahead, self._ahead = self._ahead, None
            if self._settling is not None:
                self._settling.cancel()
        if ahead is not None:
            await close_ahead(ahead)
        if session is None:
            await self.live.aclose()
            return
        try:
            # The client's own cells: setup re-runs after restarts carry a note, cancelled code has no cell.
            count = sum(1 for rnd in self.run.rounds if rnd.code is not None and not rnd.reasoning)
            self.run = replace(
                self.run, answer=f"The MCP session ended after {count} code execution(s).", finished_at=_now()
            )
            await self._save()
        finally:
            try:
                await session.close()
            finally:
                await self.live.aclose()

    async def _settle(self, session: AsyncKernelSession) -> None:
        """Wait until a cancelled cell has ended (the engine interrupted it). A request sent while
        it still runs would be queued behind it and aborted by its error; a probe that comes back
        aborted means that error has now happened."""
        for _attempt in range(3):
            try:
                if (await session.evaluate({"settled": "1"}, self.timeout))["settled"] == "1":
                    return
            except KernelError:
                log.warning("the kernel did not settle after a cancelled execution", exc_info=True)
                return

    def _record(self, rnd: Round) -> None:
        self.run = replace(self.run, rounds=(*self.run.rounds, rnd))

    def _schedule_save(self) -> None:
        """Write the notebook soon, off the call's path: rebuilding it grows with the session,
        and the client should not wait for it. Saves requested while one runs coalesce."""
        if not self.run.info.task:  # the kernel has not started: nothing is recorded yet
            return
        self._dirty = True
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._write_while_dirty())

    async def _write_while_dirty(self) -> None:
        while self._dirty:
            self._dirty = False
            run = replace(self.run, notebook_path=self.notebook)
            started = time.monotonic()
            try:
                await in_thread(export_run, run, self.notebook)
            except Exception:  # the kernel result still reached the client; the next save retries
                log.exception("could not write the MCP session notebook %s", self.notebook)
            if self._dirty and not self._hurry.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._hurry.wait(), WRITE_REST * (time.monotonic() - started))
        self._hurry.clear()  # the writer ends: the next flush asks afresh

    async def flush(self) -> None:
        """Wait until the notebook on disk holds everything recorded so far (no rest in between)."""
        self._schedule_save()
        if self._writer is not None:
            self._hurry.set()
            await asyncio.shield(self._writer)

    async def _save(self) -> None:
        await self.flush()

    def _info(self, session: AsyncKernelSession) -> RunInfo:
        return RunInfo(
            task=f"Code run through the kernel-agent MCP server by {self._client}.",
            model=self._client,
            protocol=MCP_PROTOCOL,
            data_files=self._data_names(),
            workspace=str(self.workspace.resolve()),
            setup_code=self.setup_code,
            started_at=_now(),
            language_info=dict(session.kernel_info.get("language_info", {})),
            sources=tuple(RecordedSource(spec.name, spec.kind) for spec in self.live.specs),
        )


async def close_ahead(ahead: asyncio.Future[AsyncKernelSession]) -> None:
    """Shut down a session started ahead that nobody used, once its start has ended (cut short,
    a start could leave its kernel behind); a failed start has nothing left to shut down."""
    try:
        session = await asyncio.shield(ahead)
    except asyncio.CancelledError:
        if not ahead.done():
            await asyncio.wait({ahead})
        if not ahead.cancelled() and ahead.exception() is None:
            await ahead.result().close()
        raise
    except Exception:
        return
    await session.close()


def _stopped_note(what: str, code: str, seconds: float) -> str:
    fence = "````" if "```" in code else "```"
    return (
        f"> **{what}** after {seconds:.1f} s: the code did not finish, so it is not kept as a "
        f"cell.\n\n{fence}python\n{code.rstrip()}\n{fence}"
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _elsewhere(session: AsyncKernelSession, workspace: Path) -> bool:
    """True when the kernel does not work in ``workspace`` itself (it runs on a gateway):
    files then travel through ``session.files``."""
    return session.workspace is None or session.workspace.resolve() != workspace.resolve()


def _export_through_door(run: Run, door: Door, relative: Path) -> None:
    """Both views of ``run`` written at ``relative`` under the door's folder (the full one first)."""
    folder = door.root / relative.parent
    for view, name in (("full", relative), ("clean", clean_path(relative))):
        nb = build_notebook(run, view=view, notebook_dir=folder)  # type: ignore[arg-type]  # full or clean, above
        door.write(name.as_posix(), notebook_text(nb, door.root / name).encode("utf-8"))
