"""What the model is told: the system prompts, the task message, the nudges.

Owns the wording: the system prompts of the ``tags`` and ``tools``
protocols, the environment notes and task message built from a
``PromptContext``, DeepAnalyze's own first message (``deepanalyze_task``:
``# Instruction`` then ``# Data`` with one ``File N:`` JSON block per file, as
DeepAnalyze's ``collect_file_info``/``prepare_vllm_messages`` build it), the
``<Execute>`` block around output, and the texts that answer an unusable reply. Does not own the message *shapes* a
protocol sends (roles, tool messages, image parts) nor parsing replies: see the protocols (``deepanalyze.py``,
``tags.py``, ``tools.py``), ``images.py`` for the image parts and ``model/messages.py`` for the types.

Pure: strings in, strings and message dicts out.
"""

from __future__ import annotations

import json
import re

from ...model.messages import ChatMessage, UserMessage
from ..environment import Environment, FileInfo, PromptContext
from ..languages import PYTHON, Language
from ..names import DATA_FORMATS, DataFormat

__all__ = [
    "DATA_FORMATS",
    "DataFormat",
    "FileInfo",
    "NOT_RUN",
    "PromptContext",
    "TAGS_SYSTEM",
    "TOOLS_EMPTY_NUDGE",
    "TOOLS_SYSTEM",
    "deepanalyze_task",
    "environment_lines",
    "execute_block",
    "not_run",
    "opening_messages",
    "tags_nudge",
    "tags_system",
    "tools_empty_nudge",
    "tools_nudge",
    "tools_system",
]


_TAGS_SYSTEM = """\
You are a data analyst. You solve the task in rounds, running {name} in a live Jupyter kernel.

Write each reply in this shape:
<Analyze>
What you know so far and what you will do next.
</Analyze>
<Code>
```{fence}
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

_TOOLS_SYSTEM = """\
You are a data analyst. You solve the task in rounds by calling the {tool} tool, which runs \
{name} in a live Jupyter kernel and returns its output. Make one call per turn and read the output \
before the next. Say briefly what you are about to do before each call.

When you can answer the task, reply without calling the tool: the final answer in markdown, with the \
key numbers.

Environment:
"""


def tags_system(language: Language = PYTHON) -> str:
    """The ``tags`` protocol's system prompt for a kernel in ``language`` (environment notes follow)."""
    return _TAGS_SYSTEM.format(name=language.name, fence=language.fence)


def tools_system(language: Language = PYTHON) -> str:
    """The ``tools`` protocol's system prompt for a kernel in ``language`` (environment notes follow)."""
    return _TOOLS_SYSTEM.format(name=language.name, tool=language.tool)


def not_run(tool: str) -> str:
    """The answer to each tool call after the first in one reply."""
    return f"Not run: only one {tool} call runs per turn. Call it again if you still need it."


def tools_empty_nudge(tool: str) -> str:
    return f"Your last reply was empty. Call {tool} to run code, or reply with the final answer."


TAGS_SYSTEM = tags_system()
TOOLS_SYSTEM = tools_system()
NOT_RUN = not_run(PYTHON.tool)
TOOLS_EMPTY_NUDGE = tools_empty_nudge(PYTHON.tool)


def opening_messages(
    ctx: PromptContext, *, system: str, vision: bool, language: Language = PYTHON
) -> list[ChatMessage]:
    """The first messages of the ``tags`` and ``tools`` runs: ``system`` plus environment notes,
    then the task and data (``deepanalyze`` sends ``deepanalyze_task`` instead)."""
    environment = environment_lines(ctx, vision=vision, language=language)
    return [{"role": "system", "content": system + _bullets(environment)}, _task_message(ctx, "Task")]


def deepanalyze_task(ctx: PromptContext, data_format: DataFormat = "files") -> str:
    """DeepAnalyze's first user message: ``# Instruction\n{task}\n\n# Data\nFile 1:\n{...}\n\n``.

    Byte for byte what DeepAnalyze's API (``prepare_vllm_messages`` with
    ``collect_file_info``) sends: each file, sorted by name, is ``File N:`` and
    a JSON object ``{"name", "size"}`` indented by 4, the size in KB with one decimal, each
    block followed by a blank line; without files only the instruction.
    ``data_format="rich"`` adds our summary (columns, dtypes, separator,
    encoding, date columns) under each file's JSON block. A task that already
    starts with ``# Instruction`` keeps its heading, and one that already has
    a ``# Data`` section gets the file blocks under it, not a second heading.
    """
    task = ctx.task.strip()
    instruction = task if _starts_with_heading(task, "Instruction") else f"# Instruction\n{task}"
    if not ctx.files:
        return instruction
    files = sorted(ctx.files, key=lambda info: info.name)  # collect_file_info lists them sorted
    blocks = "".join(_file_block(n, info, rich=data_format == "rich") for n, info in enumerate(files, 1))
    if _has_heading(task, "Data"):
        return f"{instruction.rstrip()}\n{blocks}"
    return f"{instruction}\n\n# Data\n{blocks}"


def _file_block(number: int, info: FileInfo, *, rich: bool) -> str:
    described = json.dumps({"name": info.name, "size": f"{info.size / 1024:.1f}KB"}, indent=4, ensure_ascii=False)
    summary = f"{info.summary.strip()}\n" if rich and info.summary.strip() else ""
    return f"File {number}:\n{described}\n{summary}\n"


def _starts_with_heading(text: str, name: str) -> bool:
    return re.match(rf"#[ \t]*{name}[ \t]*(\n|$)", text, re.I) is not None


def _has_heading(text: str, name: str) -> bool:
    return re.search(rf"^#[ \t]*{name}[ \t]*$", text, re.I | re.M) is not None


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


def tools_nudge(problem: str | None, language: Language = PYTHON) -> str:
    """The answer to an ``execute_python`` (``execute_r``, ...) call that cannot run."""
    return (
        f"Not run: {problem or 'no code'}. Call {language.tool} with JSON arguments "
        f'{{"code": "<{language.name} code>"}}.'
    )


def _bullets(lines: list[str]) -> str:
    return "\n".join(f"- {line}" for line in lines)


def environment_lines(ctx: PromptContext, *, vision: bool, language: Language = PYTHON) -> list[str]:
    """What the model knows about its environment, one line each: the kernel, the setup, the packages,
    the names defined so far, whether figures are seen (the tags/tools system prompt, plan tasks)."""
    lines = [
        f"Your code runs in {language.kernel_words}: variables, imports and loaded data stay "
        "defined between rounds, so build on earlier results instead of reloading.",
        "The data files are in the current working directory.",
    ]
    if ctx.preloaded:
        lines.append(f"Already set up: {ctx.preloaded}")
    if ctx.packages:
        lines.append(f"Installed packages: {', '.join(ctx.packages)}.")
    if ctx.missing:
        lines.append(f"Not installed, and nothing can be installed: {', '.join(ctx.missing)}; do not import them.")
    if ctx.names:
        lines.append(Environment(names=ctx.names).names_line())
    lines.append(
        f"{language.figure_words}; "
        + (
            "you will see them as images."
            if vision
            else "you only see a placeholder such as [image 1: png 640x480], so print the numbers you need."
        )
    )
    return lines


def _task_message(ctx: PromptContext, heading: str) -> UserMessage:
    task = ctx.task.strip()
    # A task written in DeepAnalyze's own shape keeps its headings rather than getting a second one.
    headed = any(_starts_with_heading(task, name) for name in (heading, "Instruction", "Task"))
    sections = [task if headed else f"# {heading}\n{task}"]
    if ctx.data_summary.strip():
        data_heading = "" if _has_heading(task, "Data") else "# Data\n"
        sections.append(f"{data_heading}{ctx.data_summary.strip()}")
    return {"role": "user", "content": "\n\n".join(sections)}
