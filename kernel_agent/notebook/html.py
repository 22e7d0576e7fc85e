"""A run's notebook as one self-contained HTML page (``show --html``, the service's report).

Owns the nbconvert setup: JupyterLab's look with our template
(``templates/kernel_agent_html``), which loads nothing from the network
(nbconvert's default pulls require.js and MathJax from a CDN, which fails
offline), keeps long outputs in scroll boxes, folds the setup cell (``<details>``), and a page titled with
the task. The cells come in the report's order (``report.py``: the answer first, a heading per round).
Figures are inline PNGs already, so the page is one file.

Any notebook's content is data (ours or someone else's): outputs go through
``safe.html.safe_bundle`` (no JavaScript, SVG as an image), markdown and raw cells through
``safe.html.markdown_html`` and ``clean_html`` (the template's ``ka_markdown`` and ``ka_clean``), so no
class or id of the content's reaches the page; the rendered body goes through ``safe.html.clean_page``,
which keeps only the template's own classes and writes a CSP into the page. The template's CSS keeps
each output and markdown cell in its own box (``contain: paint`` and a stacking context).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import NotebookError, WorkspaceFileError
from ..kernel.door import write_record
from ..safe.html import clean_html, clean_page, markdown_html, safe_bundle
from ..safe.http import DOCUMENT_CSP
from .kinds import notebook_kind
from .load import read_notebook
from .metadata import RunMetadata, read_block
from .report import report_order

if TYPE_CHECKING:
    from .._nbformat import NotebookNode

__all__ = ["export_html", "render_html", "render_node"]

_TEMPLATES = Path(__file__).resolve().parent / "templates"
_TITLE_CHARS = 80


def render_html(notebook: str | os.PathLike[str]) -> str:
    """The page for ``notebook``. Raises ``NotebookError`` when it cannot be read or rendered."""
    return render_node(read_notebook(notebook), str(notebook))


def render_node(nb: NotebookNode, label: str) -> str:
    """The page for a notebook already read (``label`` names it in errors). Raises ``NotebookError``."""
    from nbconvert import HTMLExporter  # heavy: only when a page is asked for

    notebook = label
    exporter = HTMLExporter(
        extra_template_basedirs=[str(_TEMPLATES)],
        template_name="kernel_agent_html",
        filters={"ka_markdown": markdown_html, "ka_clean": clean_html},
    )
    try:
        shown = _safe_outputs(report_order(nb))
        body, _resources = exporter.from_notebook_node(shown, resources={"metadata": {"name": page_title(nb)}})
    except Exception as exc:  # nbconvert raises assorted template and conversion errors
        raise NotebookError(f"cannot render {notebook} as HTML: {exc}", path=str(notebook)) from exc
    return clean_page(body, DOCUMENT_CSP)


def _safe_outputs(nb: NotebookNode) -> NotebookNode:
    """A copy of ``nb`` whose rich outputs hold only what is safe to show (the page is cleaned as a
    whole afterwards; this keeps what would otherwise be cleaned away, such as SVG, as an image)."""
    from .._nbformat import nbformat

    copy = nbformat.from_dict(nb)
    for cell in copy.get("cells", []):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            if output.get("output_type") in ("display_data", "execute_result"):
                shown = safe_bundle(output.get("data") or {}, output.get("metadata"))
                output["data"], output["metadata"] = nbformat.from_dict(shown.data), nbformat.from_dict(shown.metadata)
    return copy


def export_html(notebook: str | os.PathLike[str], target: str | os.PathLike[str]) -> Path:
    """Write ``notebook``'s page to ``target``; return its path.

    Raises ``NotebookError`` when the notebook cannot be read or rendered, or the file cannot be written.
    """
    body = render_html(notebook)
    target = Path(target)
    try:  # the door's record writer: a link planted at ``target`` is replaced, never written through
        write_record(target, body.encode("utf-8"), durable=False)
    except (OSError, WorkspaceFileError) as exc:
        raise NotebookError(f"cannot write {target}: {exc}", path=str(notebook)) from exc
    return target


def page_title(nb: object) -> str:
    """``kernel-agent: <the task's first line>`` (shortened), ``kernel-agent: MCP session (<client>)``, or
    the plain name for other notebooks."""
    metadata = getattr(nb, "metadata", None)
    meta = read_block(metadata, RunMetadata) or RunMetadata.read({})
    if notebook_kind(metadata) == "mcp":
        client = meta.model.strip()
        return "kernel-agent: MCP session" + (f" ({_short(client)})" if client else "")
    task = meta.task.strip()
    if not task:
        return "kernel-agent run"
    return f"kernel-agent: {_short(task)}"


def _short(text: str) -> str:
    """``text``'s first line, shortened to the title's length."""
    first = text.splitlines()[0]
    if len(first) > _TITLE_CHARS:
        first = first[: _TITLE_CHARS - 1].rstrip() + "…"
    return first
