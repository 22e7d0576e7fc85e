"""The messages plan mode sends the model, and reading code out of its replies. Pure.

Owns the wording of the experiment-design, repair, node, fix and figure-analysis
prompts. It does not call the model or read replies beyond the code fence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ...kernel.result import strip_ansi
from .graph import PlanNode
from .schema import PLAN_JSON_HELP
from .state import NodeResult

__all__ = ["MAX_PROBES", "PROBE_MARK", "analysis_message", "code_in", "design_messages", "fix_message", "node_messages", "probe_message", "repair_message"]

Message = dict[str, Any]

_SYSTEM = (
    "You are a data analyst planning and running an analysis in one live Python (Jupyter) kernel. "
    "Variables, DataFrames and models defined by earlier tasks stay available to later ones."
)
PROBE_MARK = "# probe"
MAX_PROBES = 3
_PYTHON_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def design_messages(task: str, data_summary: str, *, max_depth: int, node_budget: int) -> list[Message]:
    """The opening conversation asking for 2-4 directions and a plan tree."""
    user = (
        f"Task: {task}\n\nData files (already loaded in the kernel as described):\n{data_summary or '(none)'}\n\n"
        "First choose 2-4 analysis directions (descriptive statistics, comparison, correlation, clustering, "
        "visualisation, hypothesis tests, ...). Then write a plan of tasks: each has an id, a title, a kind "
        "(`code` computes, `visualisation` draws a figure, `text` needs no code, e.g. a conclusion), a purpose, "
        f"and depends_on naming earlier ids it needs. Use at most {max_depth} levels of children and "
        f"{node_budget} tasks in all.\n\n{PLAN_JSON_HELP}"
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


def repair_message(problem: str) -> Message:
    """Asks the model to resend the plan after ``problem``."""
    return {"role": "user", "content": f"That plan cannot be used: {problem}\n\nSend the whole plan again. "
            f"{PLAN_JSON_HELP}"}


def node_messages(task: str, node: PlanNode, done: Sequence[tuple[PlanNode, NodeResult]]) -> list[Message]:
    """The conversation for one node: the overall task, what its prerequisites found, and the ask."""
    context = "\n\n".join(_context(n, r) for n, r in done) or "(this task has no prerequisites)"
    if node.kind == "text":
        ask = "Answer in prose (no code): this task needs no computation."
    else:
        ask = ("Reply with the Python code for this task in one ```python fence. Print the numbers you find; "
               "reuse the kernel's existing variables instead of reloading. To look at something first, "
               f"send a short fence whose first line is `{PROBE_MARK}` (at most {MAX_PROBES}); you get its output back." +
               (" Draw the figure with matplotlib and show it." if node.kind == "visualisation" else ""))
    user = (f"Overall task: {task}\n\nResults of the tasks this one depends on:\n{context}\n\n"
            f"Current task [{node.id}]: {node.title}\nPurpose: {node.purpose or '-'}\n\n{ask}")
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


def _context(node: PlanNode, result: NodeResult) -> str:
    body = result.text or result.output_text() or "(no printed output)"
    return f"[{node.id}] {node.title}:\n{body}"


def fix_message(ename: str, evalue: str, traceback: Sequence[str]) -> Message:
    """Asks for a corrected version after the code raised."""
    tail = strip_ansi("\n".join(traceback))[-2000:]
    return {"role": "user", "content": f"The code failed with {ename}: {evalue}\n\n{tail}\n\n"
            "Send the corrected code in one ```python fence (the kernel keeps what already ran)."}


def analysis_message(node: PlanNode, output_text: str, figures: int) -> Message:
    """Asks for the analysis of a visualisation node's figures."""
    return {"role": "user", "content": f"The code for [{node.id}] drew {figures} figure(s) and printed:\n"
            f"{output_text or '(nothing)'}\n\nIn 2-4 sentences, state what the figure shows with respect to "
            f"its purpose ({node.purpose or node.title}). Prose only, no code."}


def code_in(reply: str) -> str:
    """The code of the first ```python fence in ``reply``, or "" when there is none."""
    match = _PYTHON_FENCE.search(reply)
    return match.group(1).strip() if match else ""


def probe_message(output_text: str, left: int) -> Message:
    """Gives a probe's output back; ``left`` probes remain."""
    return {"role": "user", "content": f"Probe output:\n{output_text or '(nothing printed)'}\n\n"
            f"{left} probe(s) left. Now send the code for the task (or another probe)."}
