"""What one execution gave back: ``ExecutionResult`` and its views.

Owns the result value and the text a model sees of it (``to_llm_text``,
where traceback frames inside installed packages shrink to one line each:
``compact_traceback``), and the same rule's view for people (``fold_traceback``: the analysed
code's frames and the exception first, the installed packages' frames folded). Pure: no kernel, no I/O. Building the
outputs from iopub messages is
``outputs.py``'s job.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import ExecutionError

__all__ = [
    "Artifact",
    "DisplayUpdate",
    "ErrorInfo",
    "ExecutionResult",
    "FoldedTraceback",
    "RebuildReport",
    "Status",
    "compact_traceback",
    "fold_traceback",
    "png_size",
    "strip_ansi",
]

Status = Literal["ok", "error", "timeout", "died", "cancelled"]

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
# An IPython traceback frame: "File /path/to/module.py:123, in func(args)" then source lines.
_FRAME = re.compile(r"File (?P<path>[^\n]+?):(?P<line>\d+), in (?P<where>[^\n]*)")
# A frame of a notebook cell: "Cell In[3], line 2" (IPython 8), "Input In [3], in <cell line: 2>()" (7).
_CELL = re.compile(r"(?:Cell In ?\[\d*\], line \d+|Input In ?\[\d*\])")
# Installed code: site-/dist-packages, the standard library, or a compiled module named relative to
# its package ("pandas/_libs/index.pyx"), which IPython prints without a directory.
_INSTALLED = (
    re.compile(r"(?:^|/)(?:site|dist)-packages/(.+)$"),
    re.compile(r"/lib/python\d(?:\.\d+)?/(.+)$"),
    re.compile(r"^([\w.]+/[^/].*\.(?:pyx|pxi|pxd))$"),
)


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences (colours, cursor moves) from ``text``."""
    return _ANSI.sub("", text)


def png_size(b64: str) -> tuple[int, int] | None:
    """Width and height of a base64 PNG, read from its IHDR chunk; None if not a PNG."""
    try:
        head = base64.b64decode(b64[:48] + "=" * (-len(b64[:48]) % 4), validate=False)
    except (binascii.Error, ValueError):
        return None
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def compact_traceback(frames: list[str] | tuple[str, ...]) -> list[str]:
    """IPython traceback entries with each frame inside an installed package cut to one line.

    ``File .../site-packages/pandas/core/frame.py:4102, in DataFrame.__getitem__(self, key)``
    and its source lines become ``  pandas/core/frame.py:4102 in DataFrame.__getitem__(self, key)``
    (a last line counts them);
    frames of the analysed code (``Cell In[3], line 1``, files in the workspace) and the
    exception lines stay whole. Entries without a frame header pass through. Raises nothing.
    """
    out: list[str] = []
    shortened = 0
    for entry in frames:
        short = _library_frame(entry)
        if short is None:
            out.append(entry)
            continue
        shortened += 1
        out.append(short)
    if shortened:
        out.append(f"({shortened} frame(s) inside installed packages shown as one line each)")
    return out


def _library_frame(entry: str) -> str | None:
    """The one-line form of a traceback entry that is a frame inside an installed package
    (``  pandas/core/frame.py:4102 in DataFrame.__getitem__(self, key)``), None for any other entry."""
    match = _FRAME.match(entry.lstrip())
    where = _installed(match["path"]) if match else None
    return None if match is None or where is None else f"  {where}:{match['line']} in {match['where'].strip()}"


@dataclass(frozen=True)
class FoldedTraceback:
    """A traceback as people read it first: ``lead`` holds the analysed code's frames (a cell's
    failing line, files in the workspace) then the exception line; ``library`` the one-line forms of
    the frames inside installed packages, which a reader unfolds with the whole traceback."""

    lead: tuple[str, ...]
    library: tuple[str, ...]

    def to_dict(self) -> dict[str, list[str]]:
        return {"lead": list(self.lead), "library": list(self.library)}


def fold_traceback(frames: list[str] | tuple[str, ...]) -> FoldedTraceback:
    """``frames`` (IPython traceback entries, without ANSI codes) folded by the rule of
    ``compact_traceback``: frames inside installed packages go below, the analysed code's frames and
    the exception line (the last entry) lead. Headers and "During handling…" lines are left to the
    whole traceback. Raises nothing."""
    lead: list[str] = []
    library: list[str] = []
    for entry in frames[:-1]:
        short = _library_frame(entry)
        if short is not None:
            library.append(short)
        elif _FRAME.match(entry.lstrip()) or _CELL.match(entry.lstrip()):
            lead.append(entry.rstrip("\n"))
    if frames:
        lead.append(frames[-1].rstrip("\n"))
    return FoldedTraceback(tuple(lead), tuple(library))


def _installed(path: str) -> str | None:
    """The package-relative part of an installed module's path, or None for the analysed code."""
    for pattern in _INSTALLED:
        found = pattern.search(path)
        if found:
            return found[1]
    return None


@dataclass(frozen=True)
class ErrorInfo:
    """An exception raised by the analysed code. ``traceback`` lines carry no ANSI codes."""

    ename: str
    evalue: str
    traceback: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.ename}: {self.evalue}"


@dataclass(frozen=True)
class DisplayUpdate:
    """An ``update_display_data`` for a ``display_id`` this execution did not show itself
    (an earlier cell did): the notebook export applies it to that cell's outputs, as Jupyter does."""

    display_id: str
    data: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ExecutionResult:
    """The outcome of one ``execute()``.

    ``outputs`` are nbformat v4 output dicts, exactly as they go into a
    notebook. ``state_lost`` says whether the kernel's variables are gone
    (restart after a timeout, kernel death); ``note`` says why, in words.
    ``dropped`` counts what the output caps threw away. ``display_ids``
    pairs each ``display_id`` shown here with its output's index;
    ``display_updates`` are updates for display ids shown by earlier cells.
    """

    status: Status
    outputs: tuple[dict[str, Any], ...] = ()
    execution_count: int | None = None
    duration_s: float = 0.0
    error: ErrorInfo | None = None
    state_lost: bool = False
    note: str = ""
    code: str = ""
    dropped_chars: int = 0
    dropped_images: int = 0
    rebuilt_cells: tuple[int, ...] = field(default=(), repr=False)
    lost_names: tuple[str, ...] = field(default=(), repr=False)  # gone after a state loss, even after the rebuild
    rebuild: RebuildReport | None = field(default=None, repr=False, compare=False)
    call: int = field(default=0, repr=False, compare=False)  # which execute() of its session this was (1, 2, ...)
    display_ids: tuple[tuple[str, int], ...] = field(default=(), repr=False)
    display_updates: tuple[DisplayUpdate, ...] = field(default=(), repr=False)

    def __repr__(self) -> str:
        extra = f" {self.error}" if self.error else ""
        lost = " state_lost" if self.state_lost else ""
        return f"<ExecutionResult [{self.status}]{extra}{lost} {len(self.outputs)} outputs {self.duration_s:.2f}s>"

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def stdout(self) -> str:
        return self._stream("stdout")

    @property
    def stderr(self) -> str:
        return self._stream("stderr")

    @property
    def result_text(self) -> str | None:
        """``text/plain`` of the cell's ``execute_result``, if it had one."""
        for out in self.outputs:
            if out.get("output_type") == "execute_result":
                return _text(out.get("data", {}).get("text/plain"))
        return None

    @property
    def images(self) -> list[str]:
        """Base64 PNG strings (no ``data:`` prefix), in output order."""
        return [
            _text(out["data"]["image/png"]).replace("\n", "")
            for out in self.outputs
            if out.get("output_type") in ("display_data", "execute_result") and "image/png" in out.get("data", {})
        ]

    def raise_for_status(self) -> ExecutionResult:
        """Return self when ok; raise ``ExecutionError`` (carrying self) otherwise."""
        if self.status != "ok":
            detail = str(self.error) if self.error else self.note or self.status
            raise ExecutionError(f"execution {self.status}: {detail}", result=self)
        return self

    def _stream(self, name: str) -> str:
        return "".join(
            _text(out.get("text", ""))
            for out in self.outputs
            if out.get("output_type") == "stream" and out.get("name") == name
        )

    def to_llm_text(self, max_chars: int = 6000) -> str:
        """The view a model gets: outputs in order, bounded to about ``max_chars``.

        Long text keeps its head and tail and states how much was cut; an
        error keeps more of its tail, where the cause is. Images become
        placeholders such as ``[image 1: png 640x480]``.
        """
        parts: list[str] = []
        image_no = 0
        for out in self.outputs:
            kind = out.get("output_type")
            if kind == "stream":
                parts.append(_text(out.get("text", "")))
            elif kind in ("display_data", "execute_result"):
                data = out.get("data", {})
                if "image/png" in data:
                    image_no += 1
                    size = png_size(_text(data["image/png"]))
                    dims = f" {size[0]}x{size[1]}" if size else ""
                    parts.append(f"[image {image_no}: png{dims}]\n")
                elif "text/plain" in data:
                    parts.append(_text(data["text/plain"]) + "\n")
            elif kind == "error":
                frames = [strip_ansi(line) for line in out.get("traceback", [])]
                parts.append("\n".join(compact_traceback(frames)) + "\n")
        if self.dropped_chars or self.dropped_images:
            parts.append(f"[output cap: {self.dropped_chars} characters and {self.dropped_images} images not kept]\n")
        body = "".join(parts)
        tail_share = 0.7 if self.status == "error" else 0.4
        body = clip_middle(body, max_chars, tail_share=tail_share)
        header = self._status_line()
        return f"{header}\n{body}".rstrip() + "\n" if header else (body or "[no output]\n")

    def _status_line(self) -> str:
        if self.status == "ok":
            return ""
        if self.status == "error":
            line = f"[error] {self.error}" if self.error else "[error]"
            return f"{line}\n[limit] {self.note}" if self.note else line
        if not self.state_lost:
            state = "variables from earlier cells are still defined"
        elif self.rebuild is not None or self.rebuilt_cells:
            missing = ", ".join(self.lost_names) or "none"
            state = f"the kernel restarted and earlier cells were re-run as noted; names missing: {missing}"
        else:
            state = "all variables were lost"
        label = {"timeout": "timeout", "cancelled": "cancelled"}.get(self.status, "kernel died")
        note = f" {self.note}" if self.note else ""
        return f"[{label}]{note} ({state})"


def clip_middle(text: str, max_chars: int, *, tail_share: float = 0.4) -> str:
    """Keep the head and tail of ``text`` within ``max_chars``, naming the cut."""
    if len(text) <= max_chars:
        return text
    keep = max(max_chars - 60, 0)
    tail = int(keep * tail_share)
    head = keep - tail
    omitted = len(text) - head - tail
    return f"{text[:head]}\n... [{omitted} characters omitted] ...\n{text[len(text) - tail :] if tail else ''}"


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return "".join(value)
    return str(value)


@dataclass(frozen=True)
class Artifact:
    """A file the round's code created or modified in the workspace (path relative to it)."""

    path: str
    size: int
    change: Literal["created", "modified"] = "created"

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "size": self.size, "change": self.change}


@dataclass(frozen=True)
class RebuildReport:
    """What a rebuild did, exactly. Labels are round numbers (0: the setup cell)."""

    rerun: tuple[int, ...] = ()
    failed: tuple[tuple[int, str], ...] = ()  # (label, "NameError: name 'i' is not defined")
    skipped: tuple[tuple[int, tuple[str, ...]], ...] = ()  # not re-run: it reads names that are gone
    not_rerun: tuple[tuple[int, str], ...] = ()  # (label, recorded status): timed out, died or errored
    missing: tuple[str, ...] = ()

    def relabel(self, labels: dict[int, int]) -> RebuildReport | None:
        """The report with every label mapped through ``labels``; None when one is not in it."""
        every = [
            *self.rerun,
            *(n for n, _ in self.failed),
            *(n for n, _ in self.skipped),
            *(n for n, _ in self.not_rerun),
        ]
        if any(n not in labels for n in every):
            return None
        return RebuildReport(
            tuple(labels[n] for n in self.rerun),
            tuple((labels[n], e) for n, e in self.failed),
            tuple((labels[n], g) for n, g in self.skipped),
            tuple((labels[n], s) for n, s in self.not_rerun),
            self.missing,
        )

    def describe(self, unit: str = "round") -> str:
        """One paragraph for the model and the user; never claims more than happened."""
        rounds = [n for n in self.rerun if n]
        parts = [
            f"re-ran {_count(len(rounds), unit)}"
            + (f" ({_labels(rounds)})" if rounds else "")
            + (" after the setup cell" if 0 in self.rerun else "")
        ]
        parts += [f"{_name(label, unit)} failed on re-run ({error})" for label, error in self.failed]
        parts += [
            f"{unit} {label} was skipped (it reads {', '.join(names)}, now gone)" for label, names in self.skipped
        ]
        parts += [
            f"{unit} {label} was not re-run (it {_ENDED.get(status, status)})" for label, status in self.not_rerun
        ]
        parts.append(f"names now missing: {', '.join(self.missing)}" if self.missing else "no names are missing")
        return "; ".join(parts)


_ENDED = {"timeout": "timed out", "died": "killed the kernel", "error": "raised an error", "cancelled": "was stopped"}


def _name(label: int, unit: str) -> str:
    return "the setup cell" if label == 0 and unit == "round" else f"{unit} {label}"


def _count(n: int, unit: str) -> str:
    return f"{n} {unit}" + ("" if n == 1 else "s")


def _labels(labels: list[int]) -> str:
    return ", ".join(str(n) for n in labels)
