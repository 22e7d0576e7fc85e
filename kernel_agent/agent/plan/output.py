"""What a plan run leaves on disk besides its state: the notebook and the Markdown report.

Owns building both, purely from the nodes and their results, and writing them
(the notebook through ``write_notebook``: validated, atomic; the report and its
figure PNGs atomically too). Rewritten after every node, so the report grows as
figures appear. The notebook has one section per node in execution order: a
markdown header (title, id, dependencies, status) then the node's kept cells
with their real outputs, so it replays.
"""

from __future__ import annotations

import base64
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path


from ..._nbformat import NotebookNode, nbformat
from ...notebook.export import METADATA_KEY, write_notebook
from .graph import PlanNode
from .state import NodeResult, PlanState

__all__ = ["build_plan_notebook", "build_report", "counts", "write_outputs"]


def counts(nodes: Sequence[PlanNode], results: dict[str, NodeResult]) -> dict[str, int]:
    """``{"total", "done", "failed", "skipped", "pending"}`` for the summary table and ``PlanFinished``."""
    tally = Counter(results[n.id].status if n.id in results else "pending" for n in nodes)
    return {"total": len(nodes), **{k: tally.get(k, 0) for k in ("done", "failed", "skipped", "pending")}}


def _header(node: PlanNode, result: NodeResult | None) -> str:
    after = ", ".join(f"`{d}`" for d in node.depends_on) or "none"
    status = result.status if result else "pending"
    lines = [f"## {node.title}", "", f"Node `{node.id}` ({node.kind}) · depends on: {after} · status: **{status}**"]
    if node.purpose:
        lines += ["", f"*Purpose:* {node.purpose}"]
    if result and result.failures:
        lines += ["", "Failed attempts: " + "; ".join(f"`{f}`" for f in result.failures)]
    if result and result.reason and result.status != "done":
        lines += ["", f"Reason: {result.reason}"]
    return "\n".join(lines)


def build_plan_notebook(state: PlanState, nodes: Sequence[PlanNode], workspace: str) -> NotebookNode:
    """The notebook of the plan: setup cell, then one section per node (pending nodes left out)."""
    cells: list[NotebookNode] = [nbformat.v4.new_markdown_cell(f"# Plan: {state.task}")]
    setup = nbformat.v4.new_code_cell(state.setup_code, metadata={METADATA_KEY: {"role": "setup"}})
    setup.outputs = [nbformat.from_dict(out) for out in state.setup_outputs]
    cells.append(setup)
    for node in nodes:
        result = state.results.get(node.id)
        if result is None:
            continue
        cells.append(nbformat.v4.new_markdown_cell(_header(node, result), metadata={METADATA_KEY: {"node": node.id}}))
        if result.text:
            cells.append(nbformat.v4.new_markdown_cell(result.text))
        for record in result.cells:
            cell = nbformat.v4.new_code_cell(record.code, metadata={METADATA_KEY: {"node": node.id}})
            cell.outputs = [nbformat.from_dict(out) for out in record.outputs]
            cell.execution_count = record.execution_count
            cells.append(cell)
        if result.analysis:
            cells.append(nbformat.v4.new_markdown_cell(f"*Analysis:* {result.analysis}"))
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata[METADATA_KEY] = {"task": state.task, "data_files": list(state.data_files), "workspace": workspace,
                                 "plan": state.plan, "counts": counts(nodes, state.results)}
    return nb


def build_report(state: PlanState, nodes: Sequence[PlanNode], figure_dir: str) -> tuple[str, dict[str, bytes]]:
    """The Markdown report and the figure files it links (relative name → PNG bytes)."""
    findings = [state.results[n.id].text for n in nodes if n.id in state.results and state.results[n.id].text]
    lines = [f"# {state.task}", "", "## Answer and findings", ""]
    lines += findings or ["(no conclusion yet)"]
    figures: dict[str, bytes] = {}
    for node in nodes:
        result = state.results.get(node.id)
        lines += ["", _header(node, result).replace("## ", "### ", 1)]
        for index, png in enumerate(result.figures if result else (), start=1):
            name = f"{figure_dir}/{node.id}-{index}.png"
            figures[name] = base64.b64decode(png)
            lines += ["", f"![{node.title} ({index})]({name})"]
        if result and result.analysis:
            lines += ["", f"*Analysis:* {result.analysis}"]
    table = counts(nodes, state.results)
    lines += ["", "## Summary", "", "| total | completed | failed | skipped | pending |", "|---|---|---|---|---|",
              f"| {table['total']} | {table['done']} | {table['failed']} | {table['skipped']} | {table['pending']} |"]
    return "\n".join(lines) + "\n", figures


def write_outputs(state: PlanState, nodes: Sequence[PlanNode], notebook: Path, workspace: str) -> Path:
    """Write the notebook and the report (``<stem>.report.md`` + ``<stem>_figures/``); return the report path.

    Raises ``NotebookError`` when the notebook cannot be written, ``OSError`` for the report.
    """
    write_notebook(build_plan_notebook(state, nodes, workspace), notebook)
    figure_dir = f"{notebook.stem}_figures"
    text, figures = build_report(state, nodes, figure_dir)
    for name, data in figures.items():
        _atomic(notebook.parent / name, data)
    report = notebook.with_name(f"{notebook.stem}.report.md")
    _atomic(report, text.encode())
    return report


def _atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


