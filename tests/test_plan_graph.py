"""Plan mode, pure tier: the plan JSON schema and the DAG built from it."""

import json
from typing import Any

import pytest

from kernel_agent.agent.plan import build_dag, parse_plan, topological_order
from kernel_agent.agent.plan.graph import PlanNode
from kernel_agent.agent.plan.schema import PlanSpec
from kernel_agent.errors import ConfigError, PlanError


def _plan(nodes: list[dict[str, Any]], directions: tuple[str, ...] = ("descriptive",)) -> PlanSpec:
    plan, problem = parse_plan(json.dumps({"directions": list(directions), "nodes": nodes}))
    assert plan is not None, problem
    return plan


def test_parse_accepts_a_fenced_plan_and_reports_bad_json_and_bad_schema() -> None:
    text = 'Here it is:\n```json\n{"nodes": [{"id": "a", "title": "Load"}]}\n```'
    plan, problem = parse_plan(text)
    assert plan is not None and problem == "" and plan.nodes[0].kind == "code"
    plan, problem = parse_plan('{"nodes": [')
    assert plan is None and "not valid JSON" in problem
    plan, problem = parse_plan('{"nodes": [{"id": "a", "title": "x", "kind": "dance"}]}')
    assert plan is None and "nodes.0.kind" in problem
    plan, problem = parse_plan('{"nodes": [], "directions": ["a", "b", "c", "d", "e"]}')
    assert plan is None and "nodes" in problem and "directions" in problem


def test_children_depth_budget_and_order() -> None:
    plan = _plan(
        [
            {"id": "load", "title": "Load data"},
            {
                "id": "explore",
                "title": "Explore",
                "depends_on": ["load"],
                "children": [
                    {
                        "id": "hist",
                        "title": "Histogram",
                        "kind": "visualisation",
                        "children": [{"id": "deep", "title": "Too deep"}],
                    },
                ],
            },
            {"id": "tail", "title": "Tail"},
        ]
    )
    nodes = build_dag(plan, max_depth=2)
    ids = [n.id for n in nodes]
    assert "deep" not in ids
    assert ids.index("load") < ids.index("hist") < ids.index("explore")
    hist = next(n for n in nodes if n.id == "hist")
    assert hist.depends_on == ("load",) and hist.depth == 2
    budget = build_dag(plan, max_depth=3, node_budget=2)
    assert len(budget) == 2 and all(d in {n.id for n in budget} for n in budget for d in n.depends_on)


def test_similar_titles_merge_into_one_node() -> None:
    plan = _plan(
        [
            {"id": "load", "title": "Load the data"},
            {"id": "load2", "title": "load  the DATA."},
            {"id": "plot", "title": "Plot", "depends_on": ["load2"]},
        ]
    )
    nodes = build_dag(plan)
    assert [n.id for n in nodes] == ["load", "plot"]
    assert nodes[1].depends_on == ("load",)


def test_cycles_unknown_and_duplicate_ids_are_plan_errors() -> None:
    with pytest.raises(PlanError, match="cycle") as info:
        build_dag(
            _plan([{"id": "a", "title": "A", "depends_on": ["b"]}, {"id": "b", "title": "B", "depends_on": ["a"]}])
        )
    assert set(info.value.problems) >= {"a", "b"}
    with pytest.raises(PlanError, match="unknown"):
        build_dag(_plan([{"id": "a", "title": "A", "depends_on": ["zz"]}]))
    with pytest.raises(PlanError, match="repeats"):
        build_dag(_plan([{"id": "a", "title": "A"}, {"id": "a", "title": "B"}]))
    with pytest.raises(PlanError, match="cycle"):
        topological_order([PlanNode("x", "X", "code", "", ("x",), 1)])


def test_cli_renders_the_plan_tree_and_exits_by_completion(capsys: pytest.CaptureFixture[str]) -> None:
    from kernel_agent.cli.plan import drive_plan
    from kernel_agent.events import NodeFinished, NodeStarted, Notice, PlanFinished, PlanReady

    nodes = (
        {"id": "a", "title": "Load", "kind": "code", "depends_on": [], "status": "pending"},
        {"id": "b", "title": "Plot", "kind": "visualisation", "depends_on": ["a"], "status": "pending"},
    )
    events = [
        Notice("repaired"),
        PlanReady(("descriptive",), nodes),
        NodeStarted("a", "Load"),
        NodeFinished("a", "done", 1, 0),
        NodeStarted("b", "Plot"),
        NodeStarted("b", "Plot", 2),
        NodeFinished("b", "failed", 2, 0, "still failing"),
        PlanFinished({"total": 2, "done": 1, "failed": 1, "skipped": 0, "pending": 0}, "p.ipynb", "p.report.md"),
    ]
    assert drive_plan(events, as_json=False, quiet=False) == 1
    out = capsys.readouterr().out
    assert "failed" in out and "b: Plot" in out and "still failing" in out and "1/2 completed" in out
    assert drive_plan(events, as_json=True, quiet=False) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["event"] for e in lines][:3] == ["notice", "plan_ready", "node_started"]
    assert lines[-1]["counts"]["done"] == 1


def test_design_repairs_once_then_raises_a_clear_plan_error() -> None:
    import asyncio

    from kernel_agent.agent.plan.runner import PlanOptions, design_plan
    from kernel_agent.model.scripted import ScriptedChatModel

    cycle = json.dumps(
        {"nodes": [{"id": "a", "title": "A", "depends_on": ["b"]}, {"id": "b", "title": "B", "depends_on": ["a"]}]}
    )
    good = json.dumps({"directions": ["descriptive"], "nodes": [{"id": "a", "title": "A"}]})
    notices: list[Any] = []
    spec, nodes = asyncio.run(design_plan(ScriptedChatModel([cycle, good]), "t", "", PlanOptions(), notices))
    assert [n.id for n in nodes] == ["a"] and spec.directions == ("descriptive",)
    assert len(notices) == 1 and "cycle" in notices[0].message
    with pytest.raises(PlanError, match="still unusable after a repair request: the reply is not valid JSON"):
        asyncio.run(design_plan(ScriptedChatModel(["{", "still { not json"]), "t", "", PlanOptions(), []))
    with pytest.raises(ConfigError, match="max_fix_attempts must be at least 0"):
        PlanOptions(max_fix_attempts=-1)
