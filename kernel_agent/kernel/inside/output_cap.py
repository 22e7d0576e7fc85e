"""The output cap inside the kernel: ``OutputCap``, ``install``.

Owns not *sending* more output per cell than the session keeps (``OUTPUT_CAP_ENV``, the session's
``OutputCaps.max_output_bytes``): stream writes (``print``, ``sys.stdout.write``, a subprocess's
output captured by ipykernel), ``display()`` and the cell's result all count against one budget of
characters; past it, text is cut and displays are not published, and after the cell one display says
how much was not sent, with the last few KB of the text, its metadata carrying the count for the
session's collector. A 400 MB ``print`` then never becomes a 400 MB message the host must read.

Runs *in the kernel process* (``startup.py`` installs it), so model code can undo it: the host's own
collector (``outputs.py``) still drops what arrives past the same budget as it reads, but one message
sent raw on the kernel's socket is read whole first (bounded by the kernel's own memory limit). Imports nothing of
ours from outside ``inside/``, and neither IPython nor ipykernel at module level.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

__all__ = ["OUTPUT_CAP_ENV", "SENT_KEY", "OutputCap", "data_size", "install"]

OUTPUT_CAP_ENV = "KERNEL_AGENT_OUTPUT_CAP"
SENT_KEY = "output_not_sent"  # under the display metadata key ``kernel_agent``: characters not sent
_TAIL_KEEP = 4096


def data_size(data: Any) -> int:
    """What a display's data weighs against the output budget, here and in the host's collector
    (``outputs.py``): the characters of its values (nbformat's multi-line lists joined, any other JSON
    value by its compact encoding)."""
    if not isinstance(data, dict):
        return 0
    total = 0
    for value in data.values():
        if isinstance(value, str):
            total += len(value)
        elif isinstance(value, list) and all(isinstance(part, str) for part in value):
            total += sum(len(part) for part in value)
        else:
            total += len(json.dumps(value, default=str, separators=(",", ":")))
    return total


class OutputCap:
    """Counts what the running cell has sent and cuts it at ``budget`` characters."""

    def __init__(self, shell: Any, budget: int) -> None:
        self.shell = shell
        self.budget = budget
        self.sent = 0
        self.dropped = 0
        self.dropped_displays = 0
        self.tail = ""
        self._reporting = False

    # -- what is counted
    def take_text(self, text: str) -> str:
        """The part of ``text`` that may still be sent (the rest is counted, its end kept)."""
        room = self.budget - self.sent
        if len(text) <= room:
            self.sent += len(text)
            return text
        kept = text[: max(room, 0)]
        self.sent += len(kept)
        self.dropped += len(text) - len(kept)
        self.tail = (self.tail + text[len(kept) :])[-_TAIL_KEEP:]
        return kept

    def take_display(self, data: Any) -> bool:
        """True when a display of ``data`` may still be sent."""
        if self._reporting:
            return True
        size = data_size(data)
        if self.sent + size > self.budget:
            self.dropped += size
            self.dropped_displays += 1
            return False
        self.sent += size
        return True

    # -- the cell's life
    def pre_run_cell(self, *args: Any) -> None:
        self.sent = self.dropped = self.dropped_displays = 0
        self.tail = ""

    def post_run_cell(self, *args: Any) -> None:
        dropped, displays, tail = self.dropped, self.dropped_displays, self.tail
        self.pre_run_cell()
        if not dropped:
            return
        from IPython.display import display

        among = f" ({displays} displays among them)" if displays else ""
        shown = f"; the last {len(tail)} characters of the text follow:\n{tail}" if tail else ""
        text = (
            f"[kernel-agent: this cell's output passed the cap of {self.budget} characters; {dropped} characters "
            f"were not sent{among}{shown}]"
        )
        self._reporting = True
        try:
            display({"text/plain": text}, raw=True, metadata={"kernel_agent": {SENT_KEY: dropped}})
        finally:
            self._reporting = False


def _wrap_stream(stream: Any, cap: OutputCap) -> None:
    write = stream.write

    def capped_write(text: Any) -> int:
        if isinstance(text, str):
            kept = cap.take_text(text)
            if kept:
                write(kept)
            return len(text)
        written: int = write(text)
        return written

    stream.write = capped_write


def _wrap_display(shell: Any, cap: OutputCap) -> None:
    publisher = shell.display_pub
    publish = publisher.publish

    def capped_publish(data: Any, *args: Any, **kwargs: Any) -> Any:
        return publish(data, *args, **kwargs) if cap.take_display(data) else None

    publisher.publish = capped_publish
    hook = shell.displayhook
    if hasattr(hook, "write_format_data"):
        write_format_data = hook.write_format_data

        def capped_result(format_dict: Any, md_dict: Any = None) -> Any:
            if cap.take_display(format_dict):
                return write_format_data(format_dict, md_dict)
            return write_format_data({"text/plain": "[kernel-agent: result not sent: over the output cap]"}, {})

        hook.write_format_data = capped_result


def install(budget: int | None = None, shell: Any = None) -> OutputCap | None:
    """Cap what each cell sends in this IPython ``shell`` (default: the running one) at ``budget``
    characters (default: ``OUTPUT_CAP_ENV``). Installs nothing without a shell or a budget."""
    if budget is None:
        raw = os.environ.pop(OUTPUT_CAP_ENV, "")
        budget = int(raw) if raw.isdigit() else None
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    if shell is None or budget is None:
        return None
    cap = OutputCap(shell, budget)
    for stream in (sys.stdout, sys.stderr):
        if type(stream).__name__ == "OutStream":  # ipykernel's; a plain terminal has nothing to flood
            _wrap_stream(stream, cap)
    _wrap_display(shell, cap)
    shell.events.register("pre_run_cell", cap.pre_run_cell)
    shell.events.register("post_run_cell", cap.post_run_cell)
    return cap
