"""What the model is told: ``PromptContext``, the system prompts, the task message, the nudges.

Owns the wording: the system prompts of the ``tags`` and ``tools``
protocols, the environment notes and task message built from a
``PromptContext``, the ``<Execute>`` block around output, and the texts that
answer an unusable reply. Does not own the message *shapes* a protocol sends
(roles, tool messages, image parts) nor parsing replies: see ``protocols.py``.

Pure: strings in, strings and message dicts out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "NOT_RUN",
    "TAGS_SYSTEM",
    "TOOLS_EMPTY_NUDGE",
    "TOOLS_SYSTEM",
    "PromptContext",
    "execute_block",
    "opening_messages",
    "tags_nudge",
    "tools_nudge",
]


@dataclass(frozen=True)
class PromptContext:
    """What the model is told about its environment.

    ``data_summary`` is markdown about the data files; ``packages`` are
    ``"name version"`` strings; ``preloaded`` says what the setup cell defined.
    """

    task: str
    data_summary: str = ""
    packages: tuple[str, ...] = ()
    preloaded: str = ""


TAGS_SYSTEM = """\
You are a data analyst. You solve the task in rounds, running Python in a live Jupyter kernel.

Write each reply in this shape:
<Analyze>
What you know so far and what you will do next.
</Analyze>
<Code>
```python
# the code to run now
```
</Code>

Then stop. The code runs and its output comes back to you as <Execute>...</Execute>; never write \
<Execute> yourself. Use one <Code> block per reply. After reading the output, start your next reply with \
<Understand>...</Understand> if there is something to note.

When you can answer the task, reply with <Answer>...</Answer> instead of code: the final answer in \
markdown, with the key numbers.

Environment:
"""

TOOLS_SYSTEM = """\
You are a data analyst. You solve the task in rounds by calling the execute_python tool, which runs \
Python in a live Jupyter kernel and returns its output. Make one call per turn and read the output \
before the next. Say briefly what you are about to do before each call.

When you can answer the task, reply without calling the tool: the final answer in markdown, with the \
key numbers.

Environment:
"""

NOT_RUN = "Not run: only one execute_python call runs per turn. Call it again if you still need it."
TOOLS_EMPTY_NUDGE = "Your last reply was empty. Call execute_python to run code, or reply with the final answer."


def opening_messages(ctx: PromptContext, *, system: str | None, vision: bool) -> list[dict[str, Any]]:
    """The first messages of a run: ``system`` plus environment notes, then the task and data.

    Without ``system`` (DeepAnalyze's own prompt shape: "# Instruction ...
    # Data ...") everything goes in one user turn.
    """
    environment = _environment_lines(ctx, vision=vision)
    if system is None:
        return [_task_message(ctx, "Instruction", environment)]
    return [{"role": "system", "content": system + _bullets(environment)}, _task_message(ctx, "Task")]


def execute_block(text: str) -> str:
    """Execution output as the tag protocols return it."""
    return f"<Execute>\n{text.strip(chr(10)) or '[no output]'}\n</Execute>"


def tags_nudge(problem: str | None) -> str:
    """The answer to a tagged reply with neither code nor answer, restating the format."""
    return (
        f"Your last reply could not be used ({problem or 'no code and no answer'}). "
        "Reply with your next step: <Analyze>...</Analyze> and then exactly one <Code>...</Code> block "
        "to run, or <Answer>...</Answer> with the final answer."
    )


def tools_nudge(problem: str | None) -> str:
    """The answer to an ``execute_python`` call that cannot run."""
    return (
        f"Not run: {problem or 'no code'}. Call execute_python with JSON arguments "
        '{"code": "<python code>"}.'
    )


def _bullets(lines: list[str]) -> str:
    return "\n".join(f"- {line}" for line in lines)


def _environment_lines(ctx: PromptContext, *, vision: bool) -> list[str]:
    lines = [
        "Your code runs in a persistent Jupyter (IPython) kernel: variables, imports and loaded data stay "
        "defined between rounds, so build on earlier results instead of reloading.",
        "The data files are in the current working directory.",
    ]
    if ctx.preloaded:
        lines.append(f"Already set up: {ctx.preloaded}")
    if ctx.packages:
        lines.append(f"Installed packages: {', '.join(ctx.packages)}.")
    lines.append(
        "Figures drawn with matplotlib (plt) are captured automatically when the code finishes; "
        + ("you will see them as images." if vision else "you only see a placeholder such as "
           "[image 1: png 640x480], so print the numbers you need.")
    )
    return lines


def _task_message(ctx: PromptContext, heading: str, environment: list[str] | None = None) -> dict[str, Any]:
    sections = [f"# {heading}\n{ctx.task.strip()}"]
    if environment:
        sections.append("# Environment\n" + _bullets(environment))
    if ctx.data_summary.strip():
        sections.append(f"# Data\n{ctx.data_summary.strip()}")
    return {"role": "user", "content": "\n\n".join(sections)}
