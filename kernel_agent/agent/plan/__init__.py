"""Plan mode: experiment design -> task DAG -> execution in topological order in one live kernel.

``schema`` validates the model's plan JSON (pydantic), ``graph`` turns it into a DAG, ``prompts``
words the conversations, ``runner`` asks for the plan and runs one node (probes, code, fixes),
``state`` persists per-node results (``<notebook>.plan.json``), ``output`` writes the notebook and
the Markdown report, ``api.stream_plan`` runs the whole plan (``AsyncAgent.stream_plan`` is the door).
"""

from .graph import PlanNode, build_dag, topological_order
from .schema import NodeSpec, PlanSpec, parse_plan

__all__ = ["NodeSpec", "PlanNode", "PlanSpec", "build_dag", "parse_plan", "topological_order"]
