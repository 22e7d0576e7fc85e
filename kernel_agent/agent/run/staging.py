"""One run's data files on their way in: ``DataStaging``.

Owns the data files' life in a run: checked (off the loop, before any model call), described (in a worker
thread, the bounded host-side describer, while the kernel starts), copied into the kernel (a kernel that
works in the workspace finds them there; a pooled or remote kernel gets its own copies), the run's record
(the workspace's copies, made beside the first round's code when the kernel works apart) and closed once
every thread reading them has ended; a resumed run's files come from ``resumed_files``. The run's live data
sources (``--data`` database URIs, told apart from the files here: ``live.split_data``) are its too: opened
and brokered (``live.LiveSources``) on entry, before the kernel starts, and closed on the way out. It reads the
checked files only, never the workspace the kernel reaches. It does not run code, talk to the model or
write notebooks.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any

from ..._loop import in_thread
from ...errors import ConfigError, DataFileError, SourceError
from ...kernel.interface import Kernel
from ...notebook.claims import DataSources
from ...records import RunInfo
from ...sources.spec import SourceSpec
from ..datafiles.data import CheckedData, DataFile, check_data, data_attributes, prepare_data, stage_recorded
from .live import LiveSources, split_data

__all__ = ["DataStaging", "resumed_files"]

log = logging.getLogger(__name__)


class DataStaging:
    """The data files of one run, from checked to closed (see the module docstring); an async context manager
    owned by the run, closed on the way out (``close``).

    ``check`` makes one; ``into_workspace`` copies the files into the workspace now (for a kernel that
    works there); ``into_kernel`` gives a started kernel its copies; ``described`` awaits their summaries;
    ``started`` (the owner's: the run's notebook is saved) makes the record's copies due; the round engine
    starts them ``beside_code`` and awaits them ``before_files``. ``in_workspace``: whether the workspace
    has the data copies.
    """

    def __init__(self, checked: CheckedData, sources: tuple[SourceSpec, ...] = ()) -> None:
        self.checked = checked
        self.live = LiveSources(sources)
        self.in_workspace = False
        self._reading: list[asyncio.Future[Any]] = []  # what must end before the checked files are closed
        self._description = self._started(_described(checked))
        self._run_started = False  # the run's notebook is saved: keep what was copied, make the record
        self._record_due = False  # the record's copies are still to start
        self._recording: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        return f"<DataStaging {list(self.names)} in_workspace={self.in_workspace} recorded={self.recorded}>"

    @classmethod
    async def check(cls, paths: Sequence[str | os.PathLike[str]], root: Path) -> DataStaging:
        """The files checked and the workspace ``root`` made (off the loop), their description begun; the live
        sources among ``paths`` parsed (opened on entry). Raises ``DataFileError``, ``ConfigError`` (a source
        with a password, before anything else), ``StorageError``."""
        files, sources = split_data(paths)
        _check_names_apart(files, sources)
        return cls(await in_thread(_checked_data, files, root), sources)

    async def __aenter__(self) -> DataStaging:
        """The live sources opened and brokered (before the kernel starts). Raises as ``LiveSources.open``
        does, having closed everything."""
        try:
            await self.live.open()
        except BaseException:
            self.close(discard=True)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            self.close(discard=not self._run_started)
        finally:
            await self.live.aclose()

    @property
    def sources(self) -> tuple[SourceSpec, ...]:
        """The run's live sources, as given."""
        return self.live.specs

    @property
    def files(self) -> tuple[DataFile, ...]:
        """The run's data files, without summaries."""
        return self.checked.files

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.checked.files)

    @property
    def recorded(self) -> bool:
        """Whether the record's copies are made (or were never this run's to make)."""
        return not self._record_due and self._recording is None

    async def into_workspace(self) -> None:
        """Copy the files into the workspace now. Raises ``DataFileError``, ``ConfigError``, ``StorageError``."""
        await self._started(in_thread(self.checked.install))
        self.in_workspace = True

    async def into_kernel(self, session: Kernel) -> None:
        """The kernel's own copies from the checked files (nothing to copy where it works in the workspace);
        when the workspace has its copies, each file is then checked unchanged so every copy holds the same
        bytes (else the record's copies check). Raises ``DataFileError``, ``KernelError``, ``StorageError``."""
        if not self.in_workspace and session.files.in_local:  # said to work apart, and this kernel does not
            log.warning("the kernel works in the run's folder after all: its data files are copied in now")
            await self.into_workspace()
        await session.files.put(list(self.checked.reads), list(self.names))
        if self.in_workspace:
            await in_thread(self.checked.check_unchanged)

    async def described(self) -> tuple[DataFile, ...]:
        """The files with their summaries. Raises ``DataFileError`` for a file that cannot be described."""
        summaries = await self._description
        if isinstance(summaries, DataFileError):
            raise summaries
        return self.checked.with_summaries(summaries)

    def started(self) -> None:
        """The run has started (its notebook is saved): its copies are kept on close, and when the workspace
        lacks them they are the record's to make. Idempotent."""
        if not self._run_started:
            self._run_started = True
            self._record_due = not self.in_workspace

    def beside_code(self) -> None:
        """Start the record's copies if they are due: beside a round's code, not before the first request."""
        if self._record_due:
            self._record_due = False
            self._recording = self._started(_recorded_copies(self.checked))

    async def before_files(self) -> bool:
        """The record's copies made (started now if due) and awaited, before any file comes back from the
        kernel and before a round is saved; True when it waited (the workspace grew). Raises
        ``DataFileError``, ``StorageError`` (the caller saves its round first)."""
        self.beside_code()
        if self._recording is None:
            return False
        recording, self._recording = self._recording, None
        await recording
        return True

    def close(self, *, discard: bool = False) -> None:
        """Start the record's copies if due (a run stopped before its first code still gets them), then close
        the checked files once every thread reading them has ended: now, or when they end. ``discard`` (the
        run never started: nothing was saved) also removes the workspace's copies and the folders made for
        them (``CheckedData.discard``). Idempotent."""
        if not discard:
            self.beside_code()
        work = self._reading
        running = [future for future in work if not future.done()]
        for future in work:  # their errors are not the run's to report when it failed before it awaited them
            if future.done() and not future.cancelled():
                future.exception()

        def end() -> None:
            self.checked.close()
            if discard:
                self.checked.discard()

        if not running:
            end()
            return
        asyncio.gather(*running, return_exceptions=True).add_done_callback(lambda _: end())

    def _started(self, work: Awaitable[Any]) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(work)
        self._reading.append(task)
        return task


def resumed_files(
    info: RunInfo, notebook: Path, given: Path | None, root: Path, data: list[Any]
) -> tuple[DataFile, ...]:  # ``data``: files only (``live.split_data``)
    """The data files of a resumed run, now in ``root``: ``data`` copied in as for a new run, then each
    recorded name ``data`` does not supply, staged from where the notebook's claims allow. Blocking;
    raises ``DataFileError``."""
    given_files = prepare_data(data, root) if data else ()
    supplied = {f.name for f in given_files}
    sources = DataSources.for_notebook(notebook, info.workspace, given)
    recorded = stage_recorded(sources, [name for name in info.data_files if name not in supplied], root)
    return (*recorded, *given_files)


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
        return await in_thread(checked.summaries)
    except DataFileError as exc:
        return exc


async def _recorded_copies(checked: CheckedData) -> None:
    """The workspace's copies of the data files, then each file checked unchanged since the kernel's copy
    was made from it. Raises ``DataFileError``, ``StorageError`` (the disk filled up meanwhile)."""
    try:
        await in_thread(checked.install)
    except DataFileError:
        raise
    except ConfigError as exc:  # the workspace is gone and cannot be made again
        raise DataFileError(f"cannot copy the data files into {checked.workspace}: {exc}") from exc
    await in_thread(checked.check_unchanged)


def _check_names_apart(files: Sequence[str | os.PathLike[str]], sources: Sequence[SourceSpec]) -> None:
    """A live source may not share its name with a data file's ``data`` name (``sql(source=NAME)`` names
    either). Raises ``SourceError``."""
    taken = data_attributes([Path(file).name for file in files])
    for spec in sources:
        if spec.name in taken:
            raise SourceError(
                f"the live source {spec.name!r} and the data file {taken[spec.name]!r} have one name, which "
                f"sql(source=...) could not tell apart: name the source otherwise (--data OTHER=postgresql://...)",
                source=spec.name,
            )
