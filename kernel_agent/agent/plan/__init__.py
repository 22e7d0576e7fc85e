"""Plan mode: experiment design -> task DAG -> execution in topological order in one live kernel.

``schema`` validates the model's plan JSON, ``graph`` turns it into a DAG.
"""

from .graph import PlanNode, build_dag, topological_order
from .schema import NodeSpec, PlanSpec, parse_plan

__all__ = ["NodeSpec", "PlanNode", "PlanSpec", "build_dag", "parse_plan", "topological_order"]
