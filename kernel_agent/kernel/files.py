"""The workspace seam: the run's files on this machine and the kernel's working directory.

Owns moving files between the run's local folder and the kernel:
``LocalFiles`` where the kernel's cwd *is* the local folder (nothing to
move; listings run off the event loop), ``RemoteFiles`` where the kernel's
files are not ours (a gateway kernel): data files go in, chunked through
the kernel itself as silent executes, and the files a round created or
changed come back into the local folder, so the notebook, the artifacts
and a replay stay local and complete. Both list changes the same way
(``workspace.snapshot``'s shape). The encoding of chunks is pure
(``put_code``, ``read_expression``).
"""

from __future__ import annotations

import ast
import base64
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from .._loop import in_thread
from ..errors import KernelError, WorkspaceFileError
from ..result import Artifact
from .door import Door
from .workspace import Snapshot, changed_files, snapshot

__all__ = ["CopiedFiles", "KernelFiles", "LocalFiles", "NoFiles", "RemoteFiles", "put_code", "read_expression"]

log = logging.getLogger(__name__)

CHUNK = 4 * 1024 * 1024  # raw bytes per silent execute
MAX_PULL = 256 * 1024 * 1024  # a larger artifact is listed but left on the kernel's side
SilentRun = Callable[[str, dict[str, str]], Awaitable[dict[str, Any]]]

_LISTING = (  # JSON text: IPython's repr would shorten a dict of more than 1000 files
    "__import__('json').dumps({p: (s.st_size, s.st_mtime_ns) for d, _, fs in __import__('os').walk('.') for f in fs "
    "for p in [__import__('os').path.relpath(__import__('os').path.join(d, f))] "
    "if not any(part.startswith('.') for part in p.split('/')) "
    "for s in [__import__('os').stat(p)]})"
)


class KernelFiles(Protocol):
    """The files of a run, seen from both sides."""

    local: Path
    # Whether the kernel works in ``local`` itself: its data files are the ones copied there (else it has
    # copies of its own, from ``put``, and ``local``'s are only the run's record).
    in_local: bool

    async def put(self, paths: Sequence[Path], names: Sequence[str] | None = None) -> None:
        """Make these host files (the caller's own, trusted paths) available in the kernel's cwd under
        ``names`` (default: each path's own name). Where the kernel works in ``local`` itself, the data
        files are already there and nothing is done."""
        ...

    async def snapshot(self, exclude: Iterable[Path] = ()) -> Snapshot: ...

    async def changes(
        self, before: Snapshot, exclude: Iterable[Path] = (), *, after: Snapshot | None = None
    ) -> tuple[Artifact, ...]:
        """What changed since ``before``, with each changed file present in ``local`` afterwards. ``after``:
        the caller's ``snapshot`` just taken (kept as the next round's ``before``), else one is taken."""
        ...


class LocalFiles:
    """The kernel works in ``local`` itself."""

    in_local = True

    def __init__(self, local: Path) -> None:
        self.local = local

    async def put(self, paths: Sequence[Path], names: Sequence[str] | None = None) -> None:
        return None  # already there: the data files were copied into the kernel's cwd

    async def snapshot(self, exclude: Iterable[Path] = ()) -> Snapshot:
        return await in_thread(snapshot, self.local, tuple(exclude))

    async def changes(
        self, before: Snapshot, exclude: Iterable[Path] = (), *, after: Snapshot | None = None
    ) -> tuple[Artifact, ...]:
        return changed_files(before, after if after is not None else await self.snapshot(exclude))


class CopiedFiles:
    """The kernel works in its own folder on this machine (a pooled kernel, started before the run had one):
    data files are copied in, changed files copied back into ``local``. The kernel never writes ``local``."""

    in_local = False

    def __init__(self, kernel_folder: Path, local: Path) -> None:
        self.kernel_folder = kernel_folder
        self.local = local

    async def put(self, paths: Sequence[Path], names: Sequence[str] | None = None) -> None:
        await in_thread(_copy_in, paths, _names(paths, names), Door(self.kernel_folder))

    async def snapshot(self, exclude: Iterable[Path] = ()) -> Snapshot:
        return await in_thread(snapshot, self.kernel_folder, ())

    async def changes(
        self, before: Snapshot, exclude: Iterable[Path] = (), *, after: Snapshot | None = None
    ) -> tuple[Artifact, ...]:
        artifacts = changed_files(before, after if after is not None else await self.snapshot())
        if not artifacts:
            return artifacts
        await in_thread(_copy_back, [a.path for a in artifacts], Door(self.kernel_folder), Door(self.local))
        return artifacts


class NoFiles:
    """Files of a kernel that has none to give (not started, closed, no local folder): each call raises ``error``."""

    in_local = False

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.local = Path()

    async def put(self, paths: Sequence[Path], names: Sequence[str] | None = None) -> None:
        raise self.error

    async def snapshot(self, exclude: Iterable[Path] = ()) -> Snapshot:
        raise self.error

    async def changes(
        self, before: Snapshot, exclude: Iterable[Path] = (), *, after: Snapshot | None = None
    ) -> tuple[Artifact, ...]:
        raise self.error


class RemoteFiles:
    """The kernel works in a folder we cannot see; ``run`` executes silent code there."""

    in_local = False

    def __init__(self, local: Path, run: SilentRun) -> None:
        self.local = local
        self._run = run

    async def put(self, paths: Sequence[Path], names: Sequence[str] | None = None) -> None:
        """Send each file in chunks. Raises ``KernelError`` when the kernel refuses one."""
        for path, name in zip(paths, _names(paths, names), strict=True):
            data = await in_thread(path.read_bytes)
            for offset in range(0, max(len(data), 1), CHUNK):
                reply = await self._run(put_code(name, data[offset : offset + CHUNK], append=offset > 0), {})
                if reply.get("status") != "ok":
                    raise KernelError(f"could not copy {name} to the kernel: {reply.get('evalue', reply)}")

    async def snapshot(self, exclude: Iterable[Path] = ()) -> Snapshot:
        listing = await self._evaluate(_LISTING)
        return Snapshot((path, (size, mtime)) for path, (size, mtime) in json.loads(listing or "{}").items())

    async def changes(
        self, before: Snapshot, exclude: Iterable[Path] = (), *, after: Snapshot | None = None
    ) -> tuple[Artifact, ...]:
        artifacts = changed_files(before, after if after is not None else await self.snapshot())
        for artifact in artifacts:
            if artifact.size > MAX_PULL:
                log.warning(
                    "%s (%d bytes) stays on the kernel's side: larger than %d", artifact.path, artifact.size, MAX_PULL
                )
                continue
            await self._pull(artifact)
        return artifacts

    async def _pull(self, artifact: Artifact) -> None:
        parts = []
        for offset in range(0, max(artifact.size, 1), CHUNK):
            chunk = await self._evaluate(read_expression(artifact.path, offset, CHUNK))
            if chunk is None:
                log.warning("could not read %s back from the kernel", artifact.path)
                return
            parts.append(base64.b64decode(chunk))
        try:
            await in_thread(Door(self.local).write, artifact.path, b"".join(parts))
        except (OSError, WorkspaceFileError) as exc:  # the kernel names these paths: "../x" is refused here
            log.warning("%s from the kernel was not copied back: %s", artifact.path, exc)

    async def _evaluate(self, expression: str) -> Any:
        reply = await self._run("", {"value": expression})
        value = reply.get("user_expressions", {}).get("value", {})
        if value.get("status") != "ok":
            return None
        return ast.literal_eval(value["data"]["text/plain"])


def put_code(name: str, data: bytes, *, append: bool) -> str:
    """Silent code that writes ``data`` to ``name`` in the kernel's cwd (leaves no names behind)."""
    mode = "ab" if append else "wb"
    encoded = base64.b64encode(data).decode("ascii")
    return f"with open({name!r}, {mode!r}) as _f: _f.write(__import__('base64').b64decode({encoded!r}))\ndel _f"


def read_expression(path: str, offset: int, size: int) -> str:
    """An expression giving ``size`` bytes of ``path`` from ``offset``, base64 (a str)."""
    return (
        f"(lambda f: (f.seek({offset}), __import__('base64').b64encode(f.read({size})).decode(), f.close())[1])"
        f"(open({path!r}, 'rb'))"
    )


def _names(paths: Sequence[Path], names: Sequence[str] | None) -> Sequence[str]:
    if names is None:
        return [path.name for path in paths]
    if len(names) != len(paths):
        raise ValueError(f"{len(paths)} files but {len(names)} names")
    return names


def _copy_in(paths: Sequence[Path], names: Sequence[str], kernel: Door) -> None:
    """The run's data files (the host's own files) into a pooled kernel's folder, each by its name."""
    for path, name in zip(paths, names, strict=True):
        kernel.copy_in(path, name, mode=0o444)  # read-only, as in a run folder (the prompt says so)


def _copy_back(paths: Sequence[str], kernel: Door, local: Door) -> None:
    """What a round changed in a pooled kernel's folder, into the run's folder: each file read from the
    fd the door opened, so a link the kernel planted is never followed to a host file."""
    for path in paths:
        try:
            _size, chunks = kernel.stream(path)
            local.write_from(path, chunks)
        except (OSError, WorkspaceFileError) as exc:
            log.warning("%s was not copied back from the kernel's folder: %s", path, exc)
