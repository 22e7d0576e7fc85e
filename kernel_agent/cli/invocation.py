"""How the user's shell runs this kernel-agent: ``command_line`` for every command the CLI tells the user to run.

Owns one decision: what to print so that a suggested command (``Next: … kernel-agent show RUN.ipynb``) runs as
printed in the shell the user is in. ``make demo`` starts ``.venv/bin/kernel-agent`` without putting ``.venv/bin``
on PATH, so a bare ``kernel-agent`` there would be "command not found": the name is printed bare only when
PATH's ``kernel-agent`` is this very program, else the path this program was started by (relative to the current
folder when under it). Not started as the console script (``python -m kernel_agent.cli``, or ``main()`` called
in-process), it is this interpreter with ``-m kernel_agent.cli``. Every argument is quoted for a POSIX shell.
``warn_of_relative_pythonpath``: the console script's one word on how it was started that no code of ours can
mend, a ``PYTHONPATH`` entry relative to the current folder (Python imported from there before we ran).
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import sys
from pathlib import Path

from .._python import relative_pythonpath

__all__ = ["command_line", "warn_of_relative_pythonpath"]

SCRIPT = "kernel-agent"


def command_line(*arguments: str | os.PathLike[str]) -> str:
    """``kernel-agent ARGUMENTS…`` as the user's shell runs it, quoted. Raises nothing."""
    return shlex.join([*_program(), *(os.fspath(argument) for argument in arguments)])


def _program() -> list[str]:
    started = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if started is not None and started.name == SCRIPT and started.is_file():
        found = shutil.which(SCRIPT)
        if found is not None and _same(found, started):
            return [SCRIPT]
        return [_shown_path(started)]
    return [_shown_path(Path(sys.executable)), "-m", "kernel_agent.cli"]


def _same(one: str | Path, other: Path) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False


def _shown_path(path: Path) -> str:
    """``path`` relative to the current folder when under it (with a ``/``, so the shell does not search PATH),
    else absolute. Symbolic links are kept: ``.venv/bin/python`` stays itself."""
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(Path.cwd())
    except (ValueError, OSError):
        return str(absolute)
    return str(relative) if len(relative.parts) > 1 else f"./{relative}"


def warn_of_relative_pythonpath() -> None:
    """Log a warning when ``PYTHONPATH`` holds an entry relative to the current folder. Raises nothing."""
    entries = relative_pythonpath()
    if entries:
        named = ", ".join(repr(entry) if entry else "an empty entry" for entry in entries)
        logging.getLogger(__name__).warning(
            "PYTHONPATH holds %s, relative to the folder kernel-agent started in (%s): Python imports modules "
            "from there before kernel-agent runs, so a json.py or pandas.py in that folder runs as you. Give "
            'PYTHONPATH absolute folders (PYTHONPATH="$PWD" in your own project), or start kernel-agent from '
            "a folder of your own.",
            named,
            os.getcwd(),
        )
