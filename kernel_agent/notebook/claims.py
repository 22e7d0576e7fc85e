"""What a notebook's metadata may lead the host to read: a claim, never an order.

A notebook's ``workspace`` and ``data_files`` were written by whoever wrote the notebook: another
user, or model code that forged one. ``resume`` and ``replay`` never open a path taken from them as
given. A data file is looked for only in the folder the user names, or else beside the notebook (and in
the recorded workspace only when that is a plain relative folder under the notebook's own); an absolute
or ``..`` path is never read (only its file name is looked for); every file is read through the door,
so a link leads nowhere. Owns that lookup and the copy into a kernel's folder; the callers own what a
missing file means (replay: an error; resume: the rebuild reports it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePath

from ..errors import KernelAgentError
from ..kernel.door import Door

__all__ = ["DataSources", "plain", "recorded_name"]


def plain(name: str) -> bool:
    """True for a relative path with no ``..``: the only kind a notebook may name."""
    relative = PurePath(name)
    return bool(name) and not relative.is_absolute() and ".." not in relative.parts and "\0" not in name


def recorded_name(name: str) -> str:
    """The name a recorded data file is looked for as: itself when plain, else its file name only."""
    return PurePath(name).as_posix() if plain(name) else PurePath(name).name


def _under(claim: object, folder: Path) -> str:
    """The claimed workspace as a relative path under ``folder`` ('' when it is not one): a plain relative
    path, or an absolute one inside ``folder`` (``load_run`` makes recorded paths absolute)."""
    if not isinstance(claim, str) or not claim:
        return ""
    if os.path.isabs(claim):
        absolute, base = Path(os.path.normpath(claim)), Path(os.path.abspath(folder))
        return absolute.relative_to(base).as_posix() if absolute.is_relative_to(base) and absolute != base else ""
    return PurePath(claim).as_posix() if plain(claim) and PurePath(claim).parts else ""


@dataclass(frozen=True)
class DataSources:
    """Where a notebook's data files may be read from: ``(folder, prefix)`` pairs, each read through a
    door on ``folder`` (so ``prefix``, a claimed workspace, is walked without following a link)."""

    places: tuple[tuple[Path, str], ...]

    @classmethod
    def for_notebook(cls, notebook: Path, claimed_workspace: object, given: Path | None = None) -> DataSources:
        """``given`` (the folder the user names) alone when there is one; else the recorded workspace
        when it is a plain relative folder under the notebook's, then the notebook's folder."""
        if given is not None:
            return cls(((given, ""),))
        places = []
        claim = _under(claimed_workspace, notebook.parent)
        if claim:
            places.append((notebook.parent, claim))
        places.append((notebook.parent, ""))
        return cls(tuple(places))

    def looked_in(self, name: str) -> list[str]:
        return [str(folder / prefix / name) if prefix else str(folder / name) for folder, prefix in self.places]

    def copy(self, name: str, target: Path) -> bool:
        """Copy the data file ``name`` (a plain relative name) into ``target`` read-only, from the first
        place that has it as a regular file. False when none does. A file that already is the target's
        (the user named the kernel's own folder) is left as it is."""
        destination = Door(target)
        for folder, prefix in self.places:
            relative = f"{prefix}/{name}" if prefix else name
            source = Door(folder)
            try:
                if os.path.abspath(folder / prefix) == os.path.abspath(target):
                    destination.file_stat(name)  # a regular file, no link on the way: it is already in place
                    return True
                _size, chunks = source.stream(relative)
            except (OSError, KernelAgentError):
                continue
            destination.write_from(name, chunks, mode=0o444)
            return True
        return False
