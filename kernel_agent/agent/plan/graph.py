"""The plan as a DAG: flattening the tree within budgets, merging similar nodes, ordering.

Owns turning a validated ``PlanSpec`` into ``PlanNode`` values with explicit
dependencies (a child depends on its parent's dependencies, and a parent on its
children, so a parent summarises them), refusing unknown ids and cycles
(``graphlib``), and the topological order the runner follows. Pure.
"""

from __future__ import annotations

import graphlib
import re
from dataclasses import dataclass, replace

from ...errors import PlanError
from .schema import NodeKind, NodeSpec, PlanSpec

__all__ = ["PlanNode", "build_dag", "topological_order"]


@dataclass(frozen=True)
class PlanNode:
    """One task of the DAG the runner executes."""

    id: str
    title: str
    kind: NodeKind
    purpose: str
    depends_on: tuple[str, ...]
    depth: int

    def __repr__(self) -> str:
        return f"<PlanNode {self.id} {self.kind} after={list(self.depends_on)}>"


def _flatten(
    specs: tuple[NodeSpec, ...], depth: int, max_depth: int, parent_deps: tuple[str, ...], out: list[PlanNode]
) -> None:
    for spec in specs:
        children = spec.children if depth < max_depth else ()
        child_ids = tuple(c.id for c in children)
        out.append(
            PlanNode(
                spec.id, spec.title, spec.kind, spec.purpose, _unique(parent_deps + spec.depends_on + child_ids), depth
            )
        )
        _flatten(children, depth + 1, max_depth, _unique(parent_deps + spec.depends_on), out)


def _unique(ids: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(ids))


def _key(title: str) -> str:
    """Titles that differ only in case, punctuation or spacing name the same task."""
    return " ".join(re.sub(r"[^\w\s]", " ", title.lower()).split())


def _merge(nodes: list[PlanNode]) -> list[PlanNode]:
    """Keep the first node of each title; later twins' dependencies join it, and ids point to it."""
    keep: dict[str, PlanNode] = {}
    alias: dict[str, str] = {}
    for node in nodes:
        first = keep.get(_key(node.title))
        if first is None:
            keep[_key(node.title)] = node
            alias[node.id] = node.id
        else:
            alias[node.id] = first.id
            keep[_key(node.title)] = replace(first, depends_on=_unique(first.depends_on + node.depends_on))
    merged = []
    for node in keep.values():
        deps = _unique(tuple(alias.get(d, d) for d in node.depends_on if alias.get(d, d) != node.id))
        merged.append(replace(node, depends_on=deps))
    return merged


def build_dag(plan: PlanSpec, *, max_depth: int = 3, node_budget: int = 20) -> tuple[PlanNode, ...]:
    """The plan's nodes in topological order, at most ``max_depth`` levels and ``node_budget`` nodes
    (later nodes beyond the budget are dropped, with the dependencies on them).

    Raises ``PlanError`` for duplicate ids, a dependency on an unknown id, or a cycle.
    """
    flat: list[PlanNode] = []
    _flatten(plan.nodes, 1, max_depth, (), flat)
    ids = [n.id for n in flat]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise PlanError(f"the plan repeats node ids: {', '.join(duplicates)}", problems=tuple(duplicates))
    unknown = [f"{n.id} -> {d}" for n in flat for d in n.depends_on if d not in ids]
    if unknown:
        raise PlanError(f"the plan depends on unknown nodes: {', '.join(unknown)}", problems=tuple(unknown))
    nodes = _merge(flat)
    ordered = topological_order(nodes)[:node_budget]
    kept = {n.id for n in ordered}
    return tuple(replace(n, depends_on=tuple(d for d in n.depends_on if d in kept)) for n in ordered)


def topological_order(nodes: list[PlanNode] | tuple[PlanNode, ...]) -> list[PlanNode]:
    """``nodes`` so each comes after its dependencies, ties in the model's order.

    Raises ``PlanError`` naming the cycle when there is one.
    """
    by_id = {n.id: n for n in nodes}
    position = {n.id: i for i, n in enumerate(nodes)}
    sorter = graphlib.TopologicalSorter({n.id: [d for d in n.depends_on if d in by_id] for n in nodes})
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        cycle = tuple(exc.args[1])
        raise PlanError(f"the plan has a cycle: {' -> '.join(cycle)}", problems=cycle) from exc
    order: list[PlanNode] = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready(), key=position.__getitem__)
        for node_id in ready:
            order.append(by_id[node_id])
            sorter.done(node_id)
    return order
