"""What a plan task is told and what the report keeps, through the real openai SDK to the scripted server:
the third task needs the first task's variable, and its prompt names it (with its type and shape), the
installed packages, the data files as they are written and that figures are not seen; earlier output
reaches it with its last lines, never a probe's noise first; a failed attempt's code and the printed
numbers reach the report, which says plainly that the model gave no conclusion. A task's request carries
the data description the planning request has (columns with their exact names and dtypes, first rows)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai_server import OpenAIServer, Reply

from kernel_agent import Agent
from kernel_agent.agent.plan.runner import PlanOptions
from kernel_agent.agent.plan.state import PlanState, state_path
from kernel_agent.events import NodeFinished, PlanFinished

pytestmark = pytest.mark.kernel

PLAN = {
    "directions": ["descriptive", "visualisation"],
    "nodes": [
        {"id": "load", "title": "Load the survey"},
        {"id": "noise", "title": "Something else"},
        {"id": "rank", "title": "Rank the groups", "depends_on": ["load"]},
        {"id": "plot", "title": "Plot the ranking", "kind": "visualisation", "depends_on": ["rank"]},
    ],
}
LOAD = (
    "survey = pd.read_csv(data.survey, sep='\\t')\n"
    "for i in range(200):\n    print('detail line', i, 'x' * 20)\n"
    "print('SUMMARY: best group is b with mean 7.5')"
)


DONE = Reply("<Answer>Done: the numbers are printed above.</Answer>")  # a code task's closing words


def code(text: str) -> Reply:
    return Reply(f"<Analyze>Running it.</Analyze>\n<Code>\n```python\n{text}\n```\n</Code>")


def survey(folder: Path) -> Path:
    folder.mkdir()
    path = folder / "survey.csv"  # tab-separated despite its name, as statsmodels' anes96.csv
    path.write_text("group\tscore\tweight\n" + "".join(f"{'ab'[i % 2]}\t{i}\t{i * 0.5}\n" for i in range(12)))
    return path


def test_a_later_task_sees_the_environment_and_the_report_keeps_the_numbers(
    openai_server: OpenAIServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    prompts: dict[str, str] = {}

    def design(body: dict[str, Any]) -> Reply:
        prompt = body["messages"][-1]["content"]
        assert "Installed packages (nothing else can be installed): pandas " in prompt  # a plan of what imports
        assert "tab-separated" in prompt and "already loaded" not in prompt
        return Reply("```json\n" + json.dumps(PLAN) + "\n```")

    def ask(node: str, reply: Reply) -> Any:
        def answer(body: dict[str, Any]) -> Reply:
            prompts.setdefault(node, body["messages"][-1]["content"])
            return reply

        return answer

    openai_server.add(
        design,
        ask("load", code("# probe\nprint('PROBE NOISE ' * 50)")),
        code(LOAD),
        DONE,
        ask("noise", code("import not_a_module_here")),
        code("noise = 1\nprint('noise', noise)"),
        DONE,
        ask("rank", code("ranking = survey.groupby('group')['score'].mean()\nprint(ranking)")),
        DONE,
        ask("plot", code("ranking.plot.bar()\nplt.show()")),
        DONE,
    )
    notebook = tmp_path / "plan.ipynb"
    with Agent(
        model="m", base_url=openai_server.base_url, api_key="sk-test", protocol="tags", model_options={"max_retries": 0}
    ) as agent:
        events = list(
            agent.stream_plan(
                "Which group scores best?",
                [survey(tmp_path / "in")],
                tmp_path / "run",
                notebook,
                options=PlanOptions(max_fix_attempts=1),
            )
        )
    assert openai_server.remaining == 0
    assert {e.node_id: e.status for e in events if isinstance(e, NodeFinished)} == {
        "load": "done",
        "noise": "done",
        "rank": "done",
        "plot": "done",
    }

    rank = prompts["rank"]
    assert "`survey: DataFrame 12x3`" in rank and "`noise: int`" in rank  # names defined so far, typed
    assert "Installed packages: pandas " in rank
    assert "## survey.csv · `data.survey`\nCSV" in rank and "tab-separated" in rank
    assert "you only see a placeholder" in rank  # figures are not seen without --vision
    context = rank[rank.index("Results of the tasks") :]
    assert "SUMMARY: best group is b with mean 7.5" in context  # the tail survives the budget
    assert "PROBE NOISE" not in context and context.index("detail line 0") > 0
    assert "Defined in the kernel so far" not in prompts["load"]  # nothing yet: the setup's names are not listed

    state = PlanState.load(state_path(notebook))
    assert [c.code for c in state.results["noise"].failed] == ["import not_a_module_here"]
    report = Path(events[-1].report).read_text() if isinstance(events[-1], PlanFinished) else ""
    assert "No conclusion given by the model" in report and "(no conclusion yet)" not in report
    assert "b    6.0" in report.split("### ")[0]  # the ranking, as printed, among the findings
    assert "Failed attempt 1: ModuleNotFoundError" in report and "import not_a_module_here" in report
    page = Path(events[-1].html).read_text()  # type: ignore[union-attr]
    assert 'alt="&lt;Figure size' in page and not caplog.records  # nbconvert had nothing to warn about


CRIMES = "Crimes (midnight to 11:59pm)"  # the exact spelling a model guessing from the question gets wrong


def test_a_task_gets_the_planning_requests_data_description(openai_server: OpenAIServer, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    table = folder / "2014_q4.csv"
    table.write_text(
        f"Dates,{CRIMES},District\n" + "".join(f"{day:02d}/10/2014,{day * 3},D{day % 4}\n" for day in range(13, 31))
    )
    plan = {"nodes": [{"id": "count", "title": "Total crimes"}]}
    openai_server.add(
        Reply("```json\n" + json.dumps(plan) + "\n```"),
        code(f"print(pd.read_csv(data.file_2014_q4)[{CRIMES!r}].sum())"),
        DONE,
    )
    with Agent(
        model="m", base_url=openai_server.base_url, api_key="sk-test", protocol="tags", model_options={"max_retries": 0}
    ) as agent:
        events = list(agent.stream_plan("How many crimes?", [table], tmp_path / "run", tmp_path / "plan.ipynb"))
    assert [(e.node_id, e.status) for e in events if isinstance(e, NodeFinished)] == [("count", "done")]

    design, task = (request["messages"][-1]["content"] for request in openai_server.requests[:2])
    described = design.split("not yet read):\n", 1)[1].split("\n\nInstalled packages", 1)[0]
    assert described in task  # the same description, word for word, in the task's fresh conversation
    assert f"`{CRIMES}` int64" in task  # the exact name, with its dtype
    assert "13/10/2014" in task  # the first rows
    assert "Dates stored as text" in task and "columns Dates" not in task  # the date note on a line of its own
