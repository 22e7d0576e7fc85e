"""Naming the limit behind an error: ``limit_note``.

Owns recognising the errors our own confinement causes in analysed code (a
``MemoryError`` under the memory limit, ``File too large`` past the file size
limit, ``Resource temporarily unavailable`` or "can't start new thread"
under the process limit) and the words that say so, with the limit's value,
so the model and the user see a policy of the session rather than a bug in
the code. Does not own the limits themselves or applying them
(``limits.py``, ``inside/launcher.py``). Pure: an error and a ``Limits`` in, words out.
"""

from __future__ import annotations

from ...result import ErrorInfo
from .limits import Limits

__all__ = ["limit_note"]

_MEMORY_ERRORS = frozenset({"MemoryError", "_ArrayMemoryError", "ArrayMemoryError", "OutOfMemoryError"})
_FILE_TOO_LARGE = ("File too large", "[Errno 27]")
_NO_PROCESSES = ("Resource temporarily unavailable", "[Errno 11]", "can't start new thread")
# EAGAIN also comes from non-blocking sockets and pipes: only a failed fork, spawn or thread start counts.
_STARTING = ("fork", "_execute_child", "spawn", "Popen", "start_new_thread", "Thread", "can't start new thread")


def limit_note(error: ErrorInfo | None, limits: Limits) -> str:
    """Why ``error`` probably comes from one of ``limits``, with its value; "" when it does not. Raises nothing."""
    if error is None:
        return ""
    text = f"{error.ename}: {error.evalue}"
    if limits.memory_mb is not None and error.ename in _MEMORY_ERRORS:
        return (
            f"the kernel's memory limit of {limits.memory_mb:,} MB (address space, Limits.memory_mb) was reached: "
            "a policy of this session, not a bug in the code; use less memory (fewer rows or columns, smaller "
            "dtypes, chunks) or raise the limit"
        )
    if limits.max_file_mb is not None and any(marker in text for marker in _FILE_TOO_LARGE):
        return (
            f"the file size limit of {limits.max_file_mb:,} MB (Limits.max_file_mb) was reached: a policy of this "
            "session, not a bug in the code; write smaller files or raise the limit"
        )
    starting = any(marker in part for part in (text, *error.traceback) for marker in _STARTING)
    if limits.max_processes is not None and starting and any(marker in text for marker in _NO_PROCESSES):
        return (
            f"the limit of {limits.max_processes:,} processes and threads (Limits.max_processes) was probably "
            "reached: a policy of this session, not a bug in the code; use fewer workers or threads"
        )
    return ""
