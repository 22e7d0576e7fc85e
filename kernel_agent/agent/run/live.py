"""A run's live data sources: ``split_data`` and ``LiveSources``.

Owns telling the ``--data`` values that name a live source (``sources.spec.is_source``: a registered kind's
URI, or ``NAME=`` and one) from data files, and, for one session, the sources opened, described for the prompt
and served to the kernel by a ``Broker`` on a Unix socket in a fresh private host folder (never a workspace),
all closed when the session ends. It does not parse a URI (``sources/spec.py``), query a database
(``sources/``'s kinds) or start the kernel (it hands the kernel's factory the socket: ``kernel_sockets``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._loop import LoopThread, in_thread
from ...errors import SourceError
from ...sources.base import DescribeLimits, QueryLimits, Source
from ...sources.spec import SourceSpec, is_source, parse_source

if TYPE_CHECKING:
    from ...notebook.replay import ReplayReport
    from ...sources.broker import Broker

__all__ = ["LiveSources", "factory_sources", "reconnected", "replay_with_sources", "split_data"]


def split_data(values: Iterable[str | os.PathLike[str]]) -> tuple[list[str | os.PathLike[str]], tuple[SourceSpec, ...]]:
    """``--data`` values as (data files, live sources), each in the order given: the one place they are told
    apart. Raises ``SourceError`` (a ``ConfigError``) for a source carrying a password or malformed, and for two
    sources of one name."""
    if isinstance(values, str | os.PathLike):  # one value, not an iterable of characters
        values = [values]
    files: list[str | os.PathLike[str]] = []
    sources: list[SourceSpec] = []
    for value in values:
        if isinstance(value, str) and is_source(value):
            sources.append(parse_source(value))
        else:
            files.append(value)
    names = [spec.name for spec in sources]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise SourceError(
            f"two data sources are named {twice[0]!r}: name each one (--data NAME=postgresql://...)", source=twice[0]
        )
    return files, tuple(sources)


class LiveSources:
    """The live sources of one session: opened (``open``: off the loop, each a connection the host makes with
    its own credentials), described, and brokered to the kernel on one socket; ``aclose`` (or leaving the
    async context) stops the broker, closes every source and removes the private folder, even on error
    or cancel. Empty (no specs): nothing opened, no socket."""

    def __init__(
        self, specs: Sequence[SourceSpec], limits: QueryLimits | None = None, *, recorded: Iterable[str] = ()
    ) -> None:
        self.specs = tuple(specs)
        self.limits = limits or QueryLimits()
        self._recorded = frozenset(recorded)  # names a notebook recorded that nobody gave again: their services
        self._stack = AsyncExitStack()
        self._sources: dict[str, Source] = {}
        self._broker: Broker | None = None
        self._folder: Path | None = None
        self._descriptions: asyncio.Future[str] | None = None

    def __repr__(self) -> str:
        return f"<LiveSources {[spec.name for spec in self.specs]} socket={self.socket}>"

    @property
    def socket(self) -> Path | None:
        """The broker's socket on the host (None before ``open`` or without sources)."""
        return self._broker.socket if self._broker is not None else None

    def kernel_sockets(self) -> dict[str, Path]:
        """What the kernel's provider binds: the sql client's variable → the broker's socket ({} without)."""
        socket = self.socket
        if socket is None:
            return {}
        from ...kernel.inside.sql_client import SOCKET_ENV

        return {SOCKET_ENV: socket}

    async def open(self) -> LiveSources:
        """Open every source and start the broker (before the kernel starts); describing them begins. Raises
        ``SourceError`` naming a source that cannot be opened (its error, never a password; for a recorded name
        nobody gave again, how to give it); nothing is left open then."""
        if not self.specs:
            return self
        try:
            await self._open()
        except BaseException:
            await self.aclose()
            raise
        self._descriptions = asyncio.ensure_future(self._describe())
        return self

    async def _open(self) -> None:
        from ...sources.broker import Broker
        from ...sources.registry import open_source

        self._folder = Path(await in_thread(tempfile.mkdtemp, prefix="kernel-agent-sql-"))  # 0700
        self._stack.callback(shutil.rmtree, self._folder, ignore_errors=True)
        for spec in self.specs:
            try:
                source = await in_thread(open_source, spec)
            except SourceError as exc:
                raise self._unreachable(spec, exc) from exc
            self._stack.push_async_callback(in_thread, source.close)
            self._sources[spec.name] = source
        self._broker = await self._stack.enter_async_context(Broker(self._sources, self._folder, self.limits))

    def _unreachable(self, spec: SourceSpec, exc: SourceError) -> SourceError:
        if spec.name not in self._recorded:
            return exc
        return SourceError(
            f"the notebook's data source {spec.name!r} is not given: pass --data {spec.name}=postgresql://... "
            f"or define a pg_service.conf service named {spec.name!r} ({exc})",
            source=spec.name,
        )

    async def __aenter__(self) -> LiveSources:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop describing, stop the broker, close the sources, remove the folder. Idempotent."""
        describing = self._descriptions
        if describing is not None:
            if not describing.done():
                describing.cancel()
                await asyncio.wait({describing})
            if not describing.cancelled():
                describing.exception()  # a run that ended before it read its prompt has no use for the error
        try:
            await self._stack.aclose()
        finally:
            self._broker = None
            self._sources = {}

    async def described(self) -> str:
        """Each source's description (its ``describe``), under its name, kind and the line that queries it;
        "" without sources."""
        if self._descriptions is None:
            return ""
        return await asyncio.shield(self._descriptions)

    async def _describe(self) -> str:
        parts = []
        for name, source in self._sources.items():
            try:
                text = await in_thread(source.describe, DescribeLimits())
            except SourceError as exc:
                raise self._unreachable(source.spec, exc) from exc
            parts.append(f"{_heading(name, source.spec.kind)}\n{text.strip()}")
        return "\n\n".join(parts)


def _heading(name: str, kind: str) -> str:
    """A source's heading, with the call that queries it by name (right beside database files and other
    sources too)."""
    return f'## {name} · live {kind} database · `df = sql("SELECT …", source={json.dumps(name)})`'


def factory_sources(factory: object, given: Sequence[SourceSpec] = ()) -> LiveSources | None:
    """The live sources a kernel factory's kernels come with (its optional ``live_sources``: open, the
    factory's to close; a service thread's), else None. Raises ``SourceError`` when ``given`` names sources
    besides them: such a factory's sources are its own (its operator's), not a run's."""
    said = getattr(factory, "live_sources", None)
    if not isinstance(said, LiveSources):
        return None
    if given:
        raise SourceError(
            f"this agent's kernels come with their own data sources ({', '.join(s.name for s in said.specs)}): "
            f"a run cannot add {given[0].name!r}",
            source=given[0].name,
        )
    return said


def provided_for(recorded: Iterable[str], provided: LiveSources) -> LiveSources:
    """``provided`` (a factory's sources) for a notebook that recorded the names ``recorded``. Raises
    ``SourceError`` naming a recorded source ``provided`` lacks (its queries would fail)."""
    have = {spec.name for spec in provided.specs}
    for name in recorded:
        if name not in have:
            raise SourceError(
                f"the notebook's data source {name!r} is not one of this agent's sources "
                f"({', '.join(sorted(have)) or 'none'})",
                source=name,
            )
    return provided


def reconnected(recorded: Iterable[str], given: Sequence[SourceSpec]) -> LiveSources:
    """The live sources of a notebook that recorded the names ``recorded``, for its replay or resume: each the
    one ``given`` again (``--data NAME=URI``), else the libpq service of that name
    (``postgresql:///?service=NAME``, whose password comes from the replaying user's own pgpass); sources given
    beyond the recorded ones are kept. Not opened: ``open`` fails naming a recorded source nobody gave.
    Raises ``SourceError`` for a recorded name that cannot be a service's."""
    by_name = {spec.name: spec for spec in given}
    specs, missing = [], []
    for name in dict.fromkeys(recorded):
        if name in by_name:
            specs.append(by_name.pop(name))
        else:
            specs.append(parse_source(f"{name}=postgresql:///?service={name}"))
            missing.append(name)
    return LiveSources((*specs, *by_name.values()), recorded=missing)


def replay_with_sources(path: str | os.PathLike[str], given: Sequence[SourceSpec] = (), **options: Any) -> ReplayReport:
    """``notebook.replay.replay`` (same ``options``) with the live sources the notebook recorded reconnected
    (``reconnected``) and each reached before any cell runs. Raises as ``replay`` does, and ``SourceError``
    naming a recorded source that is not given and has no service."""
    runner = LoopThread("kernel-agent-replay")
    try:
        return runner.run(_replayed(path, given, options))
    finally:
        runner.stop()


async def _replayed(path: str | os.PathLike[str], given: Sequence[SourceSpec], options: dict[str, Any]) -> ReplayReport:
    from ...notebook.replay import async_replay, recorded_sources

    async with reconnected(await in_thread(recorded_sources, path), given) as live:
        await live.described()  # each one reached (a missing one named) before the kernel starts
        return await async_replay(path, sockets=live.kernel_sockets(), **options)
