"""The ``demo`` command's choices: which model plays, what it is asked, what is said afterwards.

Owns one decision: a configured model (flags or environment) runs the demo;
without one, or with ``--scripted``, the bundled ``ScriptedChatModel`` plays
the replies written for the bundled dataset, with the ``tags`` protocol they
are written in. The same holds for ``plan --demo`` and its plan replies.
The data, task and replies themselves are ``kernel_agent.demo``'s.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from ..agent.config import AgentConfig
from ..agent.run.agent import AsyncAgent
from ..demo import TYPING_DELAY_S
from ..errors import ConfigError
from .drive import Job
from .invocation import command_line

__all__ = ["TYPING_DELAY_S", "demo_agent", "demo_job", "demo_plan", "demo_serve", "epilogue"]

_MODEL_SETTINGS = (
    "model",
    "base_url",
    "api_key",
    "protocol",
    "request_timeout",
    "data_format",
    "vllm_extras",
    "max_new_tokens",
)


def demo_agent(arguments: dict[str, Any], *, scripted: bool = False, typing: bool = False) -> AsyncAgent:
    """The demo's agent: the configured model, else the scripted replies.

    ``arguments`` are ``AsyncAgent`` keyword arguments (None: unset).
    ``typing`` paces the scripted replies like a model writing. Raises
    ``ConfigError`` for invalid settings, or for ``--protocol`` other than
    ``tags`` with the scripted replies.
    """
    if not scripted and AgentConfig.resolve(model=arguments.get("model")).model.name:
        return AsyncAgent(**arguments)
    from ..demo import demo_model

    if arguments.get("protocol") not in (None, "tags"):
        raise ConfigError("the scripted demo replies use the tags protocol; drop --protocol or configure a model")
    settings = {key: value for key, value in arguments.items() if key in ("max_rounds", "exec_timeout", "vision")}
    model = demo_model(delay=TYPING_DELAY_S if typing else 0.0)
    return AsyncAgent(protocol="tags", chat_model=model, **settings)


def demo_plan(arguments: dict[str, Any]) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    """``Agent`` arguments, task and data files for ``plan --demo``: the configured model, else the scripted plan.

    The scripted replies keep the kernel settings (sandbox, limits, timeout) of ``arguments``.
    Raises ``ConfigError`` for ``--protocol`` other than ``tags`` with the scripted replies.
    """
    from ..demo import dataset_path, demo_plan_model, demo_plan_task

    task, data = demo_plan_task(), (str(dataset_path()),)
    if AgentConfig.resolve(model=arguments.get("model")).model.name:
        return arguments, task, data
    if arguments.get("protocol") not in (None, "tags"):
        raise ConfigError("the scripted plan demo replies use the tags protocol; drop --protocol or configure a model")
    kept = {key: value for key, value in arguments.items() if key not in _MODEL_SETTINGS}
    return {**kept, "protocol": "tags", "chat_model": demo_plan_model()}, task, data


def demo_serve(arguments: dict[str, Any]) -> dict[str, Any]:
    """The service's agent options for ``serve --demo``: the kernel settings of ``arguments`` and the
    ``tags`` protocol the scripted replies are written in (each thread gets its own scripted model:
    ``Service``). Raises ``ConfigError`` for ``--model`` or a ``--protocol`` other than ``tags``."""
    if arguments.get("model"):
        raise ConfigError("serve --demo plays the scripted demo replies; drop --model (or --demo to serve a model)")
    if arguments.get("protocol") not in (None, "tags"):
        raise ConfigError("the scripted demo replies use the tags protocol; drop --protocol")
    kept = {key: value for key, value in arguments.items() if key not in _MODEL_SETTINGS and value is not None}
    return {**kept, "protocol": "tags"}


def demo_job(workspace: str, notebook: str) -> Job:
    """The bundled task on the bundled dataset, written to ``workspace`` and ``notebook``."""
    from ..demo import dataset_path, demo_task

    return Job(demo_task(), (dataset_path(),), workspace, notebook)


def epilogue(notebook: str, *, scripted: bool) -> Text:
    """What to do next, printed after the run: each command as the user's shell runs it (``command_line``)."""
    text = Text("\nNext: ", style="bold")
    text.append(f"open {notebook} in JupyterLab, review it with `{command_line('show', notebook)}`, ")
    text.append(f"or re-execute it with `{command_line('replay', notebook, '--check')}`.")
    if scripted:
        text.append(
            "\nTo run the demo with a real model, set KERNEL_AGENT_MODEL and OPENAI_BASE_URL "
            "(and OPENAI_API_KEY if needed), or pass --model/--base-url.",
            style="dim",
        )
    return text
