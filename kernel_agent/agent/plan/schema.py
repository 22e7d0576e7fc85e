"""The plan's wire shape: the JSON the model must send, validated with pydantic.

Owns parsing a model reply into a ``PlanSpec`` and describing what was wrong
when it cannot (for the repair prompt). Pure: no model, no kernel. It does not
check the graph (unknown dependencies, cycles): ``graph.py`` does.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["NodeKind", "NodeSpec", "PlanSpec", "parse_plan", "PLAN_JSON_HELP"]

NodeKind = Literal["code", "text", "visualisation"]

_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL)


class NodeSpec(BaseModel):
    """One task of the plan as the model states it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=40, pattern=r"^[A-Za-z0-9_.-]+$")
    title: str = Field(min_length=1, max_length=200)
    kind: NodeKind = "code"
    purpose: str = ""
    depends_on: tuple[str, ...] = ()
    children: tuple[NodeSpec, ...] = ()


class PlanSpec(BaseModel):
    """The experiment design (2-4 directions) and the plan tree."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    directions: tuple[str, ...] = Field(default=(), max_length=4)
    nodes: tuple[NodeSpec, ...] = Field(min_length=1)


PLAN_JSON_HELP = (
    'Reply with one JSON object in a ```json fence: {"directions": ["2-4 analysis directions"], '
    '"nodes": [{"id": "load", "title": "...", "kind": "code|text|visualisation", "purpose": "...", '
    '"depends_on": ["ids of earlier nodes"], "children": [sub-nodes of the same shape]}]}'
)


def parse_plan(text: str) -> tuple[PlanSpec | None, str]:
    """The plan in ``text`` (bare JSON or the first ```json fence), or ``None`` and what is wrong.

    Never raises: problems are data, so the caller can send them back as a repair prompt.
    """
    fenced = _FENCE.search(text)
    raw = fenced.group(1) if fenced else text.strip()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        return None, f"the reply is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    try:
        return PlanSpec.model_validate(data), ""
    except ValidationError as exc:
        lines = [f"{'.'.join(str(p) for p in e['loc']) or 'plan'}: {e['msg']}" for e in exc.errors()[:10]]
        return None, "the JSON does not match the plan schema: " + "; ".join(lines)
