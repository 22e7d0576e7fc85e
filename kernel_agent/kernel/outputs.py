"""Folding one request's iopub messages into nbformat outputs: ``OutputCollector``.

A pure state machine: feed it messages, read the outputs. It knows the
Jupyter message shapes and nbclient's rules (stream coalescing,
``clear_output(wait=True)``, ``update_display_data`` by display_id) and
the output caps; it knows nothing about sockets, kernels or time.
nbformat owns the output schema: ``output_node`` builds exactly what
``nbformat.v4.output_from_msg`` builds (a test holds them equal) minus its
per-output validation, which was most of our per-execute overhead; the
notebook is validated whole when it is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._nbformat import NotebookNode
from ..result import DisplayUpdate, ErrorInfo, strip_ansi
from .inside.output_cap import data_size

__all__ = ["OutputCaps", "OutputCollector", "data_size", "output_node", "resolve_carriage_returns"]

_TAIL_KEEP = 4096
_FIELDS = {
    "execute_result": ("metadata", "data", "execution_count"),
    "display_data": ("metadata", "data"),
    "stream": ("name", "text"),
    "error": ("ename", "evalue", "traceback"),
}


def output_node(msg_type: str, content: dict[str, Any]) -> NotebookNode:
    """The nbformat v4 output for an iopub output message (``transient`` and the rest dropped).

    Raises ``KeyError`` for a message type that is not an output.
    """
    return NotebookNode(output_type=msg_type, **{name: content[name] for name in _FIELDS[msg_type]})


@dataclass(frozen=True)
class OutputCaps:
    """How much of one execution's output is kept in memory.

    ``max_output_bytes`` is one budget for everything an execution shows: stream
    text and every display/result's data, all mime types (counted in characters
    of their JSON strings). The kernel itself sends no more than that per cell
    (``inside/output_cap.py``); here, whatever arrives past it is dropped as it
    is read: stream text keeps its last few KB after a marker, a display past
    the budget is not kept, and the result says how much was dropped.
    ``max_images`` bounds figures kept per execution.
    """

    max_output_bytes: int = 10_000_000
    max_images: int = 50


class OutputCollector:
    """Collects the outputs of the request ``msg_id`` from its iopub messages."""

    def __init__(self, msg_id: str, caps: OutputCaps | None = None) -> None:
        self.msg_id = msg_id
        self.caps = caps or OutputCaps()
        self.outputs: list[dict[str, Any]] = []
        self.execution_count: int | None = None
        self.error: ErrorInfo | None = None
        self.started = False  # busy/execute_input seen: the code is running
        self.idle = False
        self.dropped_chars = 0  # characters of output not kept: stream text and display data
        self.dropped_images = 0
        self.dropped_displays = 0
        self.lost_messages = 0  # messages over the size bound, dropped unread (``providers/guard.py``)
        self._not_sent = 0  # of dropped_chars, what the kernel's own cap did not send
        self._kept_chars = 0
        self._dropped_tail = ""
        self._clear_pending = False
        self._display_index: dict[str, list[int]] = {}
        self.display_updates: list[DisplayUpdate] = []  # for display ids shown by earlier executions

    def feed(self, msg: dict[str, Any]) -> bool:
        """Take one iopub message; return True if it belonged to this request."""
        if msg.get("parent_header", {}).get("msg_id") != self.msg_id:
            return False
        kind = msg["msg_type"]
        content = msg.get("content", {})
        if "execution_count" in content and content["execution_count"] is not None:
            self.execution_count = content["execution_count"]
        if kind == "status":
            state = content.get("execution_state")
            if state == "busy":
                self.started = True
            elif state == "idle":
                self.idle = True
        elif kind == "execute_input":
            self.started = True
        elif kind == "clear_output":
            self._on_clear(bool(content.get("wait")))
        elif kind == "update_display_data":
            self._update_display(content)
        elif kind in ("stream", "display_data", "execute_result", "error"):
            self._on_output(kind, content)
        return True

    def finish(self) -> list[dict[str, Any]]:
        """The final outputs: carriage returns resolved, drops stated."""
        for out in self.outputs:
            if out["output_type"] == "stream":
                out["text"] = resolve_carriage_returns(out["text"])
        if self.dropped_chars > self._not_sent:  # we dropped some ourselves (the kernel's note says its own part)
            displays = f" ({self.dropped_displays} displays among them)" if self.dropped_displays else ""
            tail = f"; the last {len(self._dropped_tail)} of the text follow" if self._dropped_tail else ""
            marker = (
                f"\n[kernel-agent: output cap of {self.caps.max_output_bytes} characters reached; "
                f"{self.dropped_chars - self._not_sent} characters not kept{displays}{tail}]\n"
            )
            self.outputs.append(_stream("stdout", marker + self._dropped_tail))
        if self.dropped_images:
            note = (
                f"[kernel-agent: image cap of {self.caps.max_images} reached; {self.dropped_images} images not kept "
                "(figures past the cap are closed without being rendered)]\n"
            )
            self.outputs.append(_stream("stdout", note))
        if self.lost_messages:
            self.outputs.append(
                _stream(
                    "stdout",
                    (
                        "[kernel-agent: a message from the kernel over the size bound was dropped unread (output "
                        "written to the kernel's sockets past its output cap); what it carried is not shown]\n"
                    ),
                )
            )
        return self.outputs

    def _on_clear(self, wait: bool) -> None:
        if wait:
            self._clear_pending = True
        else:
            self._clear_now()

    def _clear_now(self) -> None:
        self.outputs.clear()
        self._display_index.clear()
        self._kept_chars = 0
        self._clear_pending = False

    def _on_output(self, kind: str, content: dict[str, Any]) -> None:
        if self._clear_pending:
            self._clear_now()
        if kind == "error":
            self.error = ErrorInfo(
                ename=content.get("ename", ""),
                evalue=content.get("evalue", ""),
                traceback=tuple(strip_ansi(line) for line in content.get("traceback", [])),
            )
        if kind == "stream":
            self._on_stream(content.get("name", "stdout"), content.get("text", ""))
            return
        not_rendered = _marker(content, "figures_not_rendered")
        if not_rendered:
            self.dropped_images += not_rendered  # the kernel's figure cap closed them unrendered
            return
        data = content.get("data", {})
        if "image/png" in data and sum("image/png" in o.get("data", {}) for o in self.outputs) >= self.caps.max_images:
            self.dropped_images += 1
            return
        size = data_size(data)
        not_sent = _marker(content, "output_not_sent")  # the kernel's own cap says what it did not send
        self.dropped_chars += not_sent
        self._not_sent += not_sent
        if kind != "error" and not not_sent and self._kept_chars + size > self.caps.max_output_bytes:
            self.dropped_chars += size
            self.dropped_displays += 1
            return
        self._kept_chars += size
        output = output_node(kind, content)
        display_id = content.get("transient", {}).get("display_id")
        if display_id:
            self._display_index.setdefault(display_id, []).append(len(self.outputs))
        self.outputs.append(output)

    def _on_stream(self, name: str, text: str) -> None:
        room = self.caps.max_output_bytes - self._kept_chars
        if room <= 0:
            self._drop(text)
            return
        if len(text) > room:
            self._drop(text[room:])
            text = text[:room]
        self._kept_chars += len(text)
        last = self.outputs[-1] if self.outputs else None
        if last is not None and last["output_type"] == "stream" and last["name"] == name:
            last["text"] += text
        else:
            self.outputs.append(_stream(name, text))

    def _drop(self, text: str) -> None:
        self.dropped_chars += len(text)
        self._dropped_tail = (self._dropped_tail + text)[-_TAIL_KEEP:]

    @property
    def display_ids(self) -> tuple[tuple[str, int], ...]:
        """``(display_id, output index)`` for every output shown with a display id, in order."""
        pairs = [(display_id, index) for display_id, indices in self._display_index.items() for index in indices]
        return tuple(sorted(pairs, key=lambda pair: pair[1]))

    def _update_display(self, content: dict[str, Any]) -> None:
        display_id = content.get("transient", {}).get("display_id")
        if not display_id:
            return
        if display_id not in self._display_index:
            # Shown by an earlier execution: the notebook export updates that cell, as Jupyter does.
            self.display_updates.append(DisplayUpdate(display_id, content.get("data", {}), content.get("metadata", {})))
            return
        data = content.get("data", {})
        for index in self._display_index[display_id]:
            out = self.outputs[index]
            grown = data_size(data) - data_size(out["data"])
            if self._kept_chars + grown > self.caps.max_output_bytes:
                self.dropped_chars += data_size(data)
                self.dropped_displays += 1
                continue
            self._kept_chars += grown
            out["data"] = data
            out["metadata"] = content.get("metadata", {})


def _marker(content: dict[str, Any], key: str) -> int:
    """A count the kernel's caps (``inside/``) put in a display's metadata; 0 when there is none."""
    marker = (content.get("metadata") or {}).get("kernel_agent")
    count = marker.get(key) if isinstance(marker, dict) else None
    return count if isinstance(count, int) and count > 0 else 0


def _stream(name: str, text: str) -> dict[str, Any]:
    return output_node("stream", {"name": name, "text": text})


def resolve_carriage_returns(text: str) -> str:
    r"""Keep what a terminal would show: text before a bare ``\r`` on a line is overwritten. Linear in
    the text's length (a regular expression for it backtracks quadratically on a long line)."""
    if "\r" not in text:
        return text
    lines = text.split("\n")
    return "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] if "\r" in line else line for line in lines)
