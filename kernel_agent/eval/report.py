"""An eval run's ``report.html``: one self-contained page, its plots inline SVG drawn here.

Owns the page and its plots: accuracy by level and by concept, rounds and time per question (model,
code and the harness's own share), the failure kinds, and a table of every question linking its
notebook. Everything a suite, the model or the kernel wrote (ids, concepts, answers, errors) is hostile
text: it reaches the page only through ``html.escape`` (attributes quoted), a notebook is linked only
by a relative path of plain names under the run folder (``notebook_link``; anything else, such as
``//host/x``, is shown as text), URL-quoted, and the page's Content-Security-Policy forbids every script, so
nothing from an answer can run even if it slipped through.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from ..errors import WorkspaceFileError
from ..kernel.door import write_record
from ..notebook.claims import plain
from ..safe.terminal import printable
from .results import FAILURE_KINDS, Summary, id_order, refused, summarize
from .scoring import Metrics

__all__ = ["REPORT", "notebook_link", "render_report", "write_report"]

REPORT = "report.html"
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
_BAR = 16
_WIDTH = 640
_COLOURS = {
    "correct": "#2e7d32",
    "wrong": "#c62828",
    "no_answer": "#8e24aa",
    "format": "#ef6c00",
    "timeout": "#6d4c41",
    "model_error": "#455a64",
    "kernel_error": "#1565c0",
    "missing_data": "#9e9d24",
    "harness_error": "#000000",
}


def _e(text: object) -> str:
    """Hostile text as HTML text: escaped, its control characters shown as symbols (``printable``), so
    not even ``cat report.html`` sends an escape sequence to a terminal."""
    return html.escape(printable(str(text)), quote=True)


def write_report(out: str | Path, rows: Sequence[dict[str, Any]], title: str) -> Path:
    """Write ``report.html`` into the run folder ``out`` and return its path: through the door's record
    writer (a random temp name renamed over the entry, so a planted link is replaced, never written
    through). Raises ``WorkspaceFileError`` naming the file when the folder refuses it."""
    path = Path(out) / REPORT
    try:
        write_record(path, render_report(rows, title).encode("utf-8"), durable=False, make_dirs=False)
    except (OSError, WorkspaceFileError) as exc:
        raise refused(path, exc) from exc
    return path


def render_report(rows: Sequence[dict[str, Any]], title: str) -> str:
    """The page for ``rows`` (result lines) as one string."""
    rows = sorted(rows, key=_order)
    summary = summarize(rows)
    sections = [
        f"<h1>{_e(title)}</h1>",
        _overview(summary),
        "<h2>Accuracy by level</h2>",
        _accuracy_plot(summary.by_level, "level"),
        "<h2>Accuracy by concept</h2>",
        _accuracy_plot(summary.by_concept, "concept"),
        "<h2>Failure kinds</h2>",
        _failure_plot(summary),
        "<h2>Rounds per question</h2>",
        _per_question_plot(rows, "rounds", lambda r: [(float(r.get("rounds") or 0), "#1565c0")], "rounds"),
        "<h2>Time per question</h2>",
        '<p><span style="color:#6a1b9a">■</span> waiting for the model <span style="color:#1565c0">■</span> '
        'running code <span style="color:#9e9e9e">■</span> the harness (kernel, data, notebook)</p>',
        _per_question_plot(rows, "time", _time_parts, "s (model, code, harness)"),
        "<h2>Questions</h2>",
        _table(rows),
    ]
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>\n" + "\n".join(sections) + "\n</body></html>\n"
    )


def _order(row: dict[str, Any]) -> tuple[tuple[int, int, str], ...]:
    return id_order(row["id"])


def notebook_link(notebook: object) -> str | None:
    """The ``href`` for a row's notebook: a relative path of plain names inside the run folder, URL-quoted;
    None for anything else (an absolute or ``//host`` path, ``..``, a hidden name, a scheme), shown as text."""
    if not isinstance(notebook, str) or not plain(notebook) or "/" in notebook[:1]:
        return None
    parts = PurePosixPath(notebook).parts
    if not parts or any(part in ("", ".", "..") or ":" in part for part in parts):
        return None
    return "/".join(quote(part, safe="") for part in parts)


def _overview(summary: Summary) -> str:
    m = summary.overall
    none = "— (no question was scored)"
    cells = [
        ("questions with a result", summary.total),
        ("scored", m.questions),
        ("not scored (machinery failed)", summary.unscored),
        ("accuracy by question", f"{m.by_question:.2%} ({m.questions_correct}/{m.questions})" if m.questions else none),
        (
            "accuracy by sub-answer",
            f"{m.by_sub_answer:.2%} ({m.sub_answers_correct}/{m.sub_answers})" if m.questions else none,
        ),
        ("proportional by sub-answer", f"{m.proportional:.2%}" if m.questions else none),
    ]
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in cells)
    return f'<table class="overview" id="overview">{body}</table>'


def _svg(height: int, body: str, label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" role="img" aria-label="{_e(label)}" '
        f'width="{_WIDTH}" height="{height}" viewBox="0 0 {_WIDTH} {height}">{body}</svg>'
    )


def _accuracy_plot(groups: dict[str, Metrics], what: str) -> str:
    if not groups:
        return "<p>No scored questions.</p>"
    left, right = 220, 120
    span = _WIDTH - left - right
    parts = []
    for i, (name, m) in enumerate(groups.items()):
        y = 8 + i * (_BAR + 6)
        width = span * m.by_question
        parts.append(
            f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{_e(_clip(name, 32))}</text>'
            f'<rect x="{left}" y="{y}" width="{span}" height="{_BAR}" fill="#eee"/>'
            f'<rect class="bar" x="{left}" y="{y}" width="{width:.1f}" height="{_BAR}" fill="#2e7d32"/>'
            f'<text x="{left + span + 6}" y="{y + 12}">{m.by_question:.0%} ({m.questions_correct}/{m.questions})</text>'
        )
    return _svg(16 + len(groups) * (_BAR + 6), "".join(parts), f"accuracy by {what}")


def _failure_plot(summary: Summary) -> str:
    kinds = [(kind, summary.outcomes.get(kind, 0)) for kind in FAILURE_KINDS]
    top = max((count for _, count in kinds), default=0) or 1
    left, span = 160, _WIDTH - 220
    parts = []
    for i, (kind, count) in enumerate(kinds):
        y = 8 + i * (_BAR + 6)
        parts.append(
            f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{_e(kind)}</text>'
            f'<rect class="bar" x="{left}" y="{y}" width="{span * count / top:.1f}" height="{_BAR}" '
            f'fill="{_COLOURS[kind]}"/><text x="{left + span * count / top + 6:.1f}" y="{y + 12}">{count}</text>'
        )
    return _svg(16 + len(kinds) * (_BAR + 6), "".join(parts), "failure kinds")


def _time_parts(row: dict[str, Any]) -> list[tuple[float, str]]:
    model, code = float(row.get("model_seconds") or 0), float(row.get("code_seconds") or 0)
    harness = max(float(row.get("seconds") or 0) - model - code, 0.0)
    return [(model, "#6a1b9a"), (code, "#1565c0"), (harness, "#9e9e9e")]


def _per_question_plot(rows: Sequence[dict[str, Any]], what: str, parts_of: Any, unit: str) -> str:
    if not rows:
        return "<p>No questions.</p>"
    left, span = 120, _WIDTH - 200
    top = max(sum(v for v, _ in parts_of(row)) for row in rows) or 1.0
    shapes = []
    for i, row in enumerate(rows):
        y = 8 + i * (_BAR + 4)
        x = float(left)
        shapes.append(f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{_e(_clip(str(row["id"]), 14))}</text>')
        for value, colour in parts_of(row):
            width = span * value / top
            shapes.append(
                f'<rect class="bar" x="{x:.1f}" y="{y}" width="{width:.1f}" height="{_BAR}" fill="{colour}"/>'
            )
            x += width
        total = sum(v for v, _ in parts_of(row))
        shapes.append(f'<text x="{x + 6:.1f}" y="{y + 12}">{total:.3g}</text>')
    return _svg(16 + len(rows) * (_BAR + 4), "".join(shapes), f"{what} per question ({unit})")


def _table(rows: Sequence[dict[str, Any]]) -> str:
    names = ("id", "level", "concepts", "outcome", "sub-answers", "answer", "rounds", "s", "errors", "notebook")
    head = "<tr>" + "".join(f"<th>{name}</th>" for name in names) + "</tr>"
    body = []
    for row in rows:
        subs = "".join(
            f"<li>{'✔' if ok else '✘'} {_e(name)}: expected {_e(row['expected'].get(name, ''))}"
            f", parsed {_e(row['parsed'].get(name, '—'))}"
            + (f' <span class="why">({_e(row["why"][name])})</span>' if name in row.get("why", {}) else "")
            + "</li>"
            for name, ok in row.get("correct", {}).items()
        )
        errors = "".join(f"<li>{_e(e)}</li>" for e in _errors(row))
        link = notebook_link(row.get("notebook"))
        notebook = (
            f'<a class="notebook" href="{_e(link)}">notebook</a>'
            if link is not None
            else f'<span class="notebook">{_e(row.get("notebook") or "")}</span>'
        )
        body.append(
            f'<tr class="{_e(row["outcome"])}"><td>{_e(row["id"])}</td><td>{_e(row.get("level", ""))}</td>'
            f"<td>{_e(', '.join(row.get('concepts', [])))}</td><td>{_e(row['outcome'])}</td><td><ul>{subs}</ul></td>"
            f"<td><pre>{_e(row.get('raw_answer') or '')}</pre></td><td>{_e(row.get('rounds', 0))}</td>"
            f"<td>{float(row.get('seconds') or 0):.1f}</td><td><ul>{errors}</ul></td>"
            f"<td>{notebook}</td></tr>"
        )
    return f'<table class="questions" id="questions">{head}{"".join(body)}</table>'


def _errors(row: dict[str, Any]) -> list[str]:
    """What went wrong on the way and what ended it, each once: a run's own error is both."""
    return list(dict.fromkeys(_clip(e, 200) for e in [*row.get("errors", []), *filter(None, [row.get("error")])]))


def _clip(text: str, size: int) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"


def summary_json(rows: Sequence[dict[str, Any]]) -> str:
    """The summary as JSON text (for scripts)."""
    return json.dumps(summarize(rows).to_dict(), indent=1)


# An answer's box scrolls, and a scrolling box clips the ink below its last line box: the line height and
# the padding keep that line's underscores (``@top_region[West]``) in view.
_STYLE = """
body{font:14px system-ui,sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:4px 6px;vertical-align:top;text-align:left}
pre{white-space:pre-wrap;max-width:360px;max-height:160px;overflow:auto;margin:0;line-height:1.4;padding-bottom:.25em}
ul{margin:0;padding-left:1.1em}.why{color:#a00}svg text{font:12px system-ui,sans-serif}
tr.correct td:nth-child(4){color:#2e7d32}tr.wrong td:nth-child(4){color:#c62828}
"""
