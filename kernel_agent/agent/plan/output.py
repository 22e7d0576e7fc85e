"""What a plan run leaves on disk besides its state: the notebook and the Markdown report.

Owns building both, purely from the nodes and their results, and writing them
(the notebook through ``write_notebook``: validated; every file through the door's
one record writer). Rewritten after every node, so the report grows as
figures appear. The notebook has one section per node in execution order: a
markdown header (title, id, dependencies, status) then the node's kept cells
with their real outputs, so it replays. The report has each node's output as
printed and its failed attempts' code, and says so when the model gave no
conclusion (listing what the nodes printed instead).
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..._nbformat import NotebookNode, nbformat
from ...errors import NotebookError, WorkspaceFileError
from ...kernel.door import write_record, write_records
from ...notebook.export import SCRIPTED_STATEMENT, write_notebook
from ...notebook.metadata import METADATA_KEY, PlanCellMetadata, PlanMetadata
from ...notebook.report import hard_breaks
from .graph import PlanNode
from .state import NodeResult, PlanState

__all__ = ["build_plan_notebook", "build_report", "conclusion", "counts", "write_outputs"]

REPORT_OUTPUT_CHARS = 3_000  # one task's printed output in its report section (head and tail)
FINDING_CHARS = 800  # one task's numbers under "no conclusion given"


def counts(nodes: Sequence[PlanNode], results: dict[str, NodeResult]) -> dict[str, int]:
    """``{"total", "done", "failed", "skipped", "pending"}`` for the summary table and ``PlanFinished``."""
    tally = Counter(
        results[n.id].status if n.id in results and results[n.id].status != "interrupted" else "pending" for n in nodes
    )
    return {"total": len(nodes), **{k: tally.get(k, 0) for k in ("done", "failed", "skipped", "pending")}}


def _header(node: PlanNode, result: NodeResult | None) -> str:
    after = ", ".join(f"`{d}`" for d in node.depends_on) or "none"
    status = result.status if result else "pending"
    took = f" · {result.seconds:.1f} s" if result and result.seconds else ""
    lines = [
        f"## {node.title}",
        "",
        f"Node `{node.id}` ({node.kind}) · depends on: {after} · status: **{status}**{took}",
    ]
    if node.purpose:
        lines += ["", f"*Purpose:* {node.purpose}"]
    if result and result.failures:
        lines += ["", "Failed attempts: " + "; ".join(f"`{f}`" for f in result.failures)]
    if result and result.reason:  # a done task has one when a bound ended it
        lines += ["", f"Reason: {result.reason}"]
    return "\n".join(lines)


def build_plan_notebook(state: PlanState, nodes: Sequence[PlanNode], workspace: str) -> NotebookNode:
    """The notebook of the plan: setup cell, then one section per node (pending nodes left out). Its
    metadata and its cells' are written through their schema (``PlanMetadata``, ``PlanCellMetadata``)."""
    title = f"# Plan: {state.task}" + (f"\n\n{SCRIPTED_STATEMENT}" if state.scripted else "")
    cells: list[NotebookNode] = [nbformat.v4.new_markdown_cell(title, metadata=_about(role="header"))]
    answer_text = conclusion(state, nodes)
    if answer_text is not None:  # the answer first (the HTML report too), the line breaks it meant kept
        answer = f"## Answer\n\n{hard_breaks(answer_text)}"
        cells.append(nbformat.v4.new_markdown_cell(answer, metadata=_about(role="answer")))
    setup = nbformat.v4.new_code_cell(state.setup_code, metadata=_about(role="setup"))
    setup.outputs = [nbformat.from_dict(out) for out in state.setup_outputs]
    cells.append(setup)
    for number, node in enumerate(nodes, start=1):
        result = state.results.get(node.id)
        if result is None:
            continue
        header = {"node": node.id, "role": "task", "task": number, "status": result.status, "seconds": result.seconds}
        usage = {"usage": result.tokens} if result.tokens else {}
        cells.append(nbformat.v4.new_markdown_cell(_header(node, result), metadata=_about(**header, **usage)))
        if result.text:
            cells.append(nbformat.v4.new_markdown_cell(result.text, metadata=_about(node=node.id)))
        for record in result.cells:
            cell = nbformat.v4.new_code_cell(record.code, metadata=_about(node=node.id))
            cell.outputs = [nbformat.from_dict(out) for out in record.outputs]
            cell.execution_count = record.execution_count
            cells.append(cell)
        if result.analysis:
            analysis = f"*Analysis:* {result.analysis}"
            cells.append(nbformat.v4.new_markdown_cell(analysis, metadata=_about(node=node.id, role="analysis")))
    nb: nbformat.NotebookNode = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    about = {
        "task": state.task,
        "data_files": state.data_files,
        "workspace": workspace,
        "plan": state.plan,
        "counts": counts(nodes, state.results),
        "scripted": state.scripted,
        "model": state.model,
        "protocol": state.protocol,
        "started_at": state.started_at,
        "finished_at": state.finished_at,
        "usage": _usage([state.planning_tokens, *(result.tokens for result in state.results.values())]),
        "answer": answer_text,
    }
    nb.metadata[METADATA_KEY] = PlanMetadata.model_validate(about, strict=False).model_dump()
    return nb


def _about(**fields: object) -> dict[str, dict[str, object]]:
    """A cell's metadata: ours, only the fields given."""
    return {METADATA_KEY: PlanCellMetadata.model_validate(fields, strict=False).model_dump(exclude_unset=True)}


def _usage(parts: Iterable[dict[str, int]]) -> dict[str, int]:
    """The tokens of the planning request and every task summed (zeros when the server reported none)."""
    total: Counter[str] = Counter()
    for tokens in parts:
        total.update(tokens)
    keys = ("prompt_tokens", "completion_tokens", "total_tokens", "reasoning_tokens")
    return {key: total.get(key, 0) for key in keys}


def conclusion(state: PlanState, nodes: Sequence[PlanNode]) -> str | None:
    """The plan's answer: what its finished text tasks concluded, in order (None without one)."""
    texts = [
        state.results[n.id].text.strip()
        for n in nodes
        if n.kind == "text" and n.id in state.results and state.results[n.id].text.strip()
    ]
    return "\n\n".join(texts) if texts else None


def build_report(state: PlanState, nodes: Sequence[PlanNode], figure_dir: str) -> tuple[str, dict[str, bytes]]:
    """The Markdown report and the figure files it links (relative name → PNG bytes).

    Each task's section has its key outputs as printed and the code of its failed attempts; the
    findings are the text tasks' conclusions or, when the model gave none, a plain "no conclusion
    given" above the numbers the tasks printed."""
    findings = [state.results[n.id].text for n in nodes if n.id in state.results and state.results[n.id].text]
    lines = [f"# {state.task}", ""]
    if state.scripted:
        lines += [SCRIPTED_STATEMENT.replace("this notebook", "this report"), ""]
    lines += ["## Answer and findings", ""]
    lines += findings or _no_conclusion(state, nodes)
    figures: dict[str, bytes] = {}
    for node in nodes:
        result = state.results.get(node.id)
        lines += ["", _header(node, result).replace("## ", "### ", 1)]
        lines += _task_outputs(result) if result else []
        for index, png in enumerate(result.figures if result else (), start=1):
            name = f"{figure_dir}/{node.id}-{index}.png"
            figures[name] = base64.b64decode(png)
            lines += ["", f"![{node.title} ({index})]({name})"]
        if result and result.analysis:
            lines += ["", f"*Analysis:* {result.analysis}"]
    table = counts(nodes, state.results)
    lines += [
        "",
        "## Summary",
        "",
        "| total | completed | failed | skipped | pending |",
        "|---|---|---|---|---|",
        f"| {table['total']} | {table['done']} | {table['failed']} | {table['skipped']} | {table['pending']} |",
    ]
    return "\n".join(lines) + "\n", figures


def _task_outputs(result: NodeResult) -> list[str]:
    """A task's key outputs as printed, then each failed attempt's code under its error."""
    lines = []
    printed = result.output_text(REPORT_OUTPUT_CHARS)
    if printed.strip():
        lines += ["", "Output:", "", _fenced(printed)]
    for index, cell in enumerate(result.failed, start=1):
        errors = [
            f"{out.get('ename')}: {out.get('evalue')}" for out in cell.outputs if out.get("output_type") == "error"
        ]
        why = errors[0] if errors else "no result (timed out or the kernel died)"
        lines += [
            "",
            f"<details><summary>Failed attempt {index}: {_escaped(why)}</summary>",
            "",
            _fenced(cell.code, "python"),
            "",
            "</details>",
        ]
    return lines


def _no_conclusion(state: PlanState, nodes: Sequence[PlanNode]) -> list[str]:
    done = [(n, state.results[n.id]) for n in nodes if n.id in state.results]
    numbers = [(n, r.output_text(FINDING_CHARS)) for n, r in done if r.status == "done"]
    numbers = [(n, text) for n, text in numbers if text.strip()]
    if not numbers:
        return ["No conclusion given, and no task printed results yet."]
    lines = ["No conclusion given by the model. What the tasks printed:"]
    for node, text in numbers:
        lines += ["", f"**{node.title}** (`{node.id}`):", "", _fenced(text)]
    return lines


def _fenced(text: str, language: str = "text") -> str:
    fence = "````" if "```" in text else "```"
    return f"{fence}{language}\n{text.rstrip(chr(10))}\n{fence}"


def _escaped(text: str) -> str:
    return " ".join(text.split()).replace("<", "&lt;").replace(">", "&gt;")


def write_outputs(state: PlanState, nodes: Sequence[PlanNode], notebook: Path, workspace: str) -> Path:
    """Write the notebook and the report (``<stem>.report.md`` + ``<stem>_figures/``); return the report path.

    Every file goes through the door's record writer (``kernel/door.py``): a link planted at one of
    these names (a shared plan folder keeps its links) is replaced, never written through, and the
    figures' folder is never followed through a link. Raises ``NotebookError`` when one cannot be written.
    """
    write_notebook(build_plan_notebook(state, nodes, workspace), notebook)
    figure_dir = f"{notebook.stem}_figures"
    text, figures = build_report(state, nodes, figure_dir)
    report = notebook.with_name(f"{notebook.stem}.report.md")
    try:
        write_records(notebook.parent, figures, durable=False)
        write_record(report, text.encode(), durable=True)
    except (OSError, WorkspaceFileError) as exc:
        raise NotebookError(f"cannot write the plan's report {report}: {exc}", path=str(report)) from exc
    return report
