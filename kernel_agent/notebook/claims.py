"""What a notebook's metadata may lead the host to read: a claim, never an order.

A notebook's (or a plan state's) ``workspace`` and ``data_files`` were written by whoever wrote it:
another user, or model code that forged one. ``resume``, ``replay`` and ``plan --resume`` never open a
path taken from them as given. One rule for every reader (``check_data_files``): a data file is a plain
name (one component, not hidden: no sub-folder, no dot-folder, no absolute or ``..`` path); a record
claiming anything else is refused before anything runs, the claim shown in the error, never used
(only below a folder the user names, ``replay --workspace``, may a name have plain sub-folders: an MCP
session records its uploads so). A
data file is looked for only in the folder the user names, or else beside the notebook (and in the
recorded workspace only when that is a relative folder of plain, unhidden names under the notebook's
own); every file is read through the door, so a link leads nowhere. Owns that lookup and the copy into
a kernel's folder; the callers own what a missing file means (replay: an error; resume: the rebuild
reports it).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePath

from ..errors import KernelAgentError, NotebookError
from ..kernel.door import Door

__all__ = ["DataSources", "check_data_files", "plain", "plain_name"]


def plain(name: str) -> bool:
    """True for a relative path of plain, unhidden names (no ``..``, no dot-folder): the only kind of
    workspace a notebook may name."""
    relative = PurePath(name)
    return (
        bool(name)
        and not relative.is_absolute()
        and "\0" not in name
        and "\\" not in name
        and all(not part.startswith(".") for part in relative.parts)
    )


def plain_name(name: object) -> bool:
    """True for a plain file name: one component, not hidden, no NUL or backslash. The only kind of data
    file a notebook or plan state may name."""
    return isinstance(name, str) and plain(name) and len(PurePath(name).parts) == 1 and "/" not in name


def check_data_files(names: Iterable[object], record: str | os.PathLike[str], *, in_named_folder: bool = False) -> None:
    """Raise ``NotebookError`` naming every claimed data file of ``record`` that is not a plain name
    (``plain_name``); nothing is read, copied or run for such a record. ``in_named_folder``: the files
    are read from a folder the user named (``replay --workspace``), where a path of plain, unhidden
    names below it (``notes/a.txt``, as an MCP session records its uploads) is the user's own choice."""
    allowed = plain if in_named_folder else plain_name
    refused = [name for name in names if not (isinstance(name, str) and allowed(name))]
    if refused:
        shown = ", ".join(repr(name) for name in refused)
        nested = all(isinstance(name, str) and plain(name) for name in refused)
        hint = (
            "; a sub-folder is read only from a folder you name: pass --workspace (workspace=)"
            if nested and not in_named_folder
            else ""
        )
        raise NotebookError(
            f"{record} claims the data file {shown}: not a plain file name (no sub-folder, hidden name, absolute "
            f"or '..' path); a record's paths are shown, never used, so nothing was run or changed{hint}",
            path=str(record),
        )


def _under(claim: object, folder: Path) -> str:
    """The claimed workspace as a relative path under ``folder`` ('' when it is not one): a plain relative
    path (no ``..``, no dot-folder), or an absolute one inside ``folder`` that is one (``load_run`` makes
    recorded paths absolute)."""
    if not isinstance(claim, str) or not claim:
        return ""
    if os.path.isabs(claim):
        absolute, base = Path(os.path.normpath(claim)), Path(os.path.abspath(folder))
        if not absolute.is_relative_to(base) or absolute == base:
            return ""
        claim = absolute.relative_to(base).as_posix()
    return PurePath(claim).as_posix() if plain(claim) and PurePath(claim).parts else ""


@dataclass(frozen=True)
class DataSources:
    """Where a notebook's data files may be read from: ``(folder, prefix)`` pairs, each read through a
    door on ``folder`` (so ``prefix``, a claimed workspace, is walked without following a link)."""

    places: tuple[tuple[Path, str], ...]
    named: bool = False  # the one place is a folder the user named: ``check_data_files(in_named_folder=True)``

    @classmethod
    def for_notebook(cls, notebook: Path, claimed_workspace: object, given: Path | None = None) -> DataSources:
        """``given`` (the folder the user names) alone when there is one; else the recorded workspace
        when it is a plain relative folder under the notebook's, then the notebook's folder."""
        if given is not None:
            return cls(((given, ""),), named=True)
        places = []
        claim = _under(claimed_workspace, notebook.parent)
        if claim:
            places.append((notebook.parent, claim))
        places.append((notebook.parent, ""))
        return cls(tuple(places))

    def looked_in(self, name: str) -> list[str]:
        return [str(folder / prefix / name) if prefix else str(folder / name) for folder, prefix in self.places]

    def copy(self, name: str, target: Path) -> bool:
        """Copy the data file ``name`` (a plain name, ``plain_name``; below a folder the user named, a path of
        them) into ``target`` read-only, from the first place that has it as a regular file. False when
        none does. A file that already is the target's (the user named the kernel's own folder) is left
        as it is."""
        if not (plain(name) if self.named else plain_name(name)):
            return False
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
