"""The messages plan mode sends the model, and reading code out of its replies. Pure.

Owns the wording of the experiment-design, repair, node, fix and next-round
prompts (a code task's output goes back to it until it says it is done),
phrased for the run's protocol (``tools``: call ``execute_python``;
``tags``/``deepanalyze``: a ``<Code>`` block). The message *shapes* that carry
execution results back (tool messages, ``<Execute>`` blocks) belong to
``agent.protocols``. It does not call the model or parse replies beyond a code fence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ...model.messages import ChatMessage, UserMessage
from ...result import strip_ansi
from .graph import PlanNode
from .schema import PLAN_JSON_HELP
from .state import NodeResult

__all__ = [
    "MAX_PROBES",
    "PROBE_MARK",
    "code_in",
    "design_messages",
    "fix_text",
    "stopped_text",
    "no_code_text",
    "node_messages",
    "probe_text",
    "repair_message",
    "round_text",
]

Message = ChatMessage

_SYSTEM = (
    "You are a data analyst planning and running an analysis in one live Python (Jupyter) kernel. "
    "Variables, DataFrames and models defined by earlier tasks stay available to later ones."
)
PROBE_MARK = "# probe"
MAX_PROBES = 3
_PYTHON_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def design_messages(
    task: str, data_summary: str, *, max_depth: int, node_budget: int, packages: Sequence[str] = ()
) -> list[Message]:
    """The opening conversation asking for 2-4 directions and a plan tree; ``packages`` are the kernel's
    (``environment.probe``), so the plan asks for nothing that cannot be imported."""
    installed = f"Installed packages (nothing else can be installed): {', '.join(packages)}.\n\n" if packages else ""
    user = (
        f"Task: {task}\n\nData files (in the kernel's working directory, not yet read):\n{data_summary or '(none)'}\n\n"
        f"{installed}"
        "First choose 2-4 analysis directions (descriptive statistics, comparison, correlation, clustering, "
        "visualisation, hypothesis tests, ...). Then write a plan of tasks: each has an id, a title, a kind "
        "(`code` computes, `visualisation` draws a figure, `text` needs no code, e.g. a conclusion), a purpose, "
        f"and depends_on naming earlier ids it needs. Use at most {max_depth} levels of children and "
        f"{node_budget} tasks in all.\n\n{PLAN_JSON_HELP}"
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


def repair_message(problem: str) -> UserMessage:
    """Asks the model to resend the plan after ``problem``."""
    return {
        "role": "user",
        "content": f"That plan cannot be used: {problem}\n\nSend the whole plan again. {PLAN_JSON_HELP}",
    }


def _how(protocol: str) -> str:
    """How a reply carries code under ``protocol``."""
    if protocol == "tools":
        return "call the execute_python tool with the code"
    return "reply with the code in one <Code>```python ...```</Code> block"


def node_messages(
    task: str,
    node: PlanNode,
    done: Sequence[tuple[PlanNode, NodeResult]],
    protocol: str = "tools",
    environment: Sequence[str] = (),
    data: str = "",
    max_rounds: int = 1,
) -> list[Message]:
    """The conversation for one node: the overall task, the environment (``environment.probe`` rendered by
    ``protocols.environment_lines``: packages, names defined so far, figure visibility), the data description
    the planning request had (``data``: ``environment.prompt_context``'s), what its prerequisites found, and
    the ask (a code task may take up to ``max_rounds`` code rounds and ends with a reply without code).

    ``deepanalyze`` gets no system message (DeepAnalyze-8B is trained without one).
    """
    context = "\n\n".join(_context(n, r) for n, r in done) or "(this task has no prerequisites)"
    if node.kind == "text":
        ask = (
            "Answer in prose without calling any tool: this task needs no computation."
            if protocol == "tools"
            else "Answer in one <Answer>...</Answer> block, in prose: this task needs no computation."
        )
    else:
        how = _how(protocol)
        ask = (
            f"To run this task, {how}. Print the numbers you find; reuse the kernel's existing variables instead "
            f"of reloading. To look at something first, {how} whose first line is `{PROBE_MARK}` (at most "
            f"{MAX_PROBES} probes); you get its output back. You see each run's output and may run more code "
            f"(at most {max_rounds} code round(s) in this task); when the task is done, {_finish(protocol)}."
            + (" Draw the figure with matplotlib and show it." if node.kind == "visualisation" else "")
        )
    known = "".join(f"- {line}\n" for line in environment)
    user = (
        f"Overall task: {task}\n\n"
        + (f"Environment:\n{known}\n" if known else "")
        + (f"Data:\n{data.strip()}\n\n" if data.strip() else "")
        + f"Results of the tasks this one depends on:\n{context}\n\n"
        f"Current task [{node.id}]: {node.title}\nPurpose: {node.purpose or '-'}\n\n{ask}"
    )
    if protocol == "deepanalyze":
        return [{"role": "user", "content": f"{_SYSTEM}\n\n{user}"}]
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


def _finish(protocol: str) -> str:
    """How a reply says a code task is done under ``protocol`` (its answer, as in run mode)."""
    where = "reply without calling any tool" if protocol == "tools" else "reply with one <Answer>...</Answer> block"
    return f"{where}: 2-4 sentences stating what the task found, with the key numbers"


def _context(node: PlanNode, result: NodeResult) -> str:
    body = result.text or result.output_text() or "(no printed output)"
    if result.analysis:
        body += f"\nIts analysis: {result.analysis}"
    return f"[{node.id}] {node.title}:\n{body}"


def fix_text(ename: str, evalue: str, traceback: Sequence[str], protocol: str = "tools", hint: str = "") -> str:
    """Asks for a corrected version after the code raised (sent as the execution's result); ``hint`` is a
    line such as ``environment.module_hint``'s."""
    tail = strip_ansi("\n".join(traceback))[-2000:]
    hint = f"{hint}\n\n" if hint else ""
    return (
        f"The code failed with {ename}: {evalue}\n\n{tail}\n\n{hint}"
        f"To send the corrected code, {_how(protocol)} (the kernel keeps what already ran)."
    )


def stopped_text(said: str, protocol: str = "tools") -> str:
    """Asks for a corrected version after the code was stopped (a timeout) or killed the kernel: ``said`` is
    the execution's result as run mode words it (what stopped it, what the kernel kept, its outputs so far)."""
    return f"{said.rstrip()}\n\nTo send the corrected code, {_how(protocol)}."


def no_code_text(protocol: str = "tools") -> str:
    """Answers a reply to a code task that carried no code."""
    return f"This task needs code: {_how(protocol)}."


def round_text(
    node: PlanNode, output_text: str, figures: int, protocol: str = "tools", *, seen: bool = True, left: int = 0
) -> str:
    """Gives a code round's output back within its task (sent as the execution's result) and asks the model
    to check it: more code when something is wrong or missing (``left`` rounds remain), or the closing words
    that end the task. ``seen=False`` (a model without vision: figures are not sent) says the figures cannot
    be seen, so the closing words rest on the printed numbers."""
    lines = [f"Output:\n{output_text.strip(chr(10)) or '(nothing printed)'}"]
    if figures:
        lines.append(
            f"The code drew {figures} figure(s)"
            + (", attached." if seen else "; you cannot see them, so judge by the printed numbers.")
        )
    purpose = node.purpose or node.title
    figure = " and what the figure shows" if figures and seen else ""
    lines.append(
        f"Check this against the task's purpose ({purpose}). If something is wrong or missing, "
        f"{_how(protocol)} ({left} code round(s) left in this task). If the task is done, {_finish(protocol)}"
        f"{figure}."
    )
    return "\n\n".join(lines)


def code_in(reply: str) -> str:
    """The code of the first ```python fence in ``reply``, or "" when there is none."""
    match = _PYTHON_FENCE.search(reply)
    return match.group(1).strip() if match else ""


def probe_text(output_text: str, left: int) -> str:
    """Gives a probe's output back; ``left`` probes remain."""
    return (
        f"Probe output:\n{output_text or '(nothing printed)'}\n\n"
        f"{left} probe(s) left. Now send the code for the task (or another probe)."
    )
