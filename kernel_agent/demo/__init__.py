"""The bundled demo: a sales table of our own making and a scripted analysis of it.

Owns the package data next to this file: ``sales.csv`` (made by
``make_dataset.py``, committed), ``script.json`` (the task and the model
replies, each stored as a list of lines so the file stays readable and
diffable) and ``plan_script.json`` (the same for plan mode: the plan as JSON,
then each node's replies in execution order, a code task's ending with the
``<Answer>`` that says it is done, one of them a mistake that the next reply
fixes). It runs nothing itself: the CLI's ``demo`` command hands
``dataset_path()``, ``demo_task()`` and ``demo_model()`` to the agent.

The replies use the ``tags`` format (``<Analyze>``, ``<Understand>``,
``<Code>``, ``<Answer>``); their code relies on the setup cell (``pd``,
``np``, ``plt``, ``data``) and on variables from earlier rounds, and every
number in the final answer was computed by that code on this dataset.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from ..model.scripted import ScriptedChatModel

__all__ = [
    "DATASET",
    "PLAN_SCRIPT",
    "SCRIPT",
    "SCRIPTED_NOTE",
    "TYPING_DELAY_S",
    "dataset_path",
    "demo_model",
    "demo_plan_model",
    "demo_plan_task",
    "demo_replies",
    "demo_task",
]

DATASET = Path(__file__).with_name("sales.csv")
SCRIPT = Path(__file__).with_name("script.json")
PLAN_SCRIPT = Path(__file__).with_name("plan_script.json")
TYPING_DELAY_S = 0.004  # between 16-character chunks of a scripted reply, so a screen shows it being written
SCRIPTED_NOTE = (
    "The model's replies are scripted: they are played back from replies written for the bundled sales "
    "data, whatever the task says, and no language model is asked. The code really runs in a live kernel, "
    "so every number and figure is real."
)


def dataset_path() -> Path:
    """The demo's data file, ``sales.csv`` (about 200 KB). Raises nothing."""
    return DATASET


def demo_task() -> str:
    """The task the demo gives the agent. Raises ``OSError``/``ValueError`` only for a broken install."""
    return str(_script()["task"])


def demo_replies() -> tuple[str, ...]:
    """The scripted model replies, in order. Raises ``OSError``/``ValueError`` only for a broken install."""
    return tuple("\n".join(lines) for lines in _script()["replies"])


def demo_model(**options: Any) -> ScriptedChatModel:
    """A ``ScriptedChatModel`` playing ``demo_replies()``; ``options`` go to its constructor."""
    return ScriptedChatModel(demo_replies(), **options)


def demo_plan_task() -> str:
    """The task of ``kernel-agent plan --demo``. Raises ``OSError``/``ValueError`` only for a broken install."""
    return str(_script(PLAN_SCRIPT)["task"])


def demo_plan_model(**options: Any) -> ScriptedChatModel:
    """A ``ScriptedChatModel`` playing the plan demo's replies (``tags`` protocol); ``options`` go to it."""
    return ScriptedChatModel(("\n".join(lines) for lines in _script(PLAN_SCRIPT)["replies"]), **options)


@cache
def _script(path: Path = SCRIPT) -> dict[str, Any]:
    script: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return script
