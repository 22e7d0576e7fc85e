"""The ``deepanalyze`` protocol on the wire: recorded DeepAnalyze-8B turns replayed through the real
openai SDK against the scripted server, with a real kernel; the exact requests are asserted.

The expected shapes are those of DeepAnalyze's own server (``API/chat_api.py``, ``API/utils.py``,
``API/config.py``): one user message ``# Instruction`` + ``# Data`` with ``File N:`` JSON blocks,
``{"role": "execute", "content": <raw output>}`` feedback, and vLLM's ``add_generation_prompt``,
``stop_token_ids`` and ``max_new_tokens`` beside ``stop=["</Code>"]``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai_server import HTTPError, OpenAIServer, Reply

from kernel_agent import Agent

pytestmark = pytest.mark.kernel

CSV = "region,units\nEast,12\nWest,7\nEast,5\n"  # 36 bytes: "0.0KB" as DeepAnalyze rounds it
TASK = "Which region sold the most units?"

# Recorded DeepAnalyze-8B turns as vLLM returns them: the stop string or the stop token id ends a
# <Code> block and is left out of the text; the answer ends on <|im_end|> (151645).
TURN_1 = (
    "<Analyze>\nI will load the CSV and look at its shape.\n</Analyze>\n"
    "<Code>\n```python\nimport pandas as pd\ndf = pd.read_csv('sales.csv')\nprint(df.shape)\n```\n"
)
TURN_2 = (
    "<Understand>\nThree rows, two columns.\n</Understand>\n"
    "<Code>\n```python\nprint(df.groupby('region')['units'].sum().to_dict())\nprint(undefined_name)\n```\n"
)
TURN_3 = "<Analyze>\nEast: 17, West: 7.\n</Analyze>\n<Answer>\nEast sold the most units (17).\n</Answer>"
EXTRAS = {"add_generation_prompt": False, "stop_token_ids": [151676, 151645], "max_new_tokens": 32768}


@pytest.fixture
def sales(tmp_path: Path) -> Path:
    path = tmp_path / "sales.csv"
    path.write_text(CSV, encoding="utf-8")
    return path


def deepanalyze_agent(server: OpenAIServer, **options: Any) -> Agent:
    return Agent(
        model="DeepAnalyze-8B",
        base_url=server.base_url,
        protocol="deepanalyze",
        model_options={"max_retries": 1, "backoff": 0.01},
        **options,
    )


def test_recorded_turns_send_exactly_what_deepanalyze_sends(
    openai_server: OpenAIServer, sales: Path, tmp_path: Path
) -> None:
    openai_server.add(
        Reply(TURN_1, finish_reason="stop", stop_reason="</Code>"),
        Reply(TURN_2, finish_reason="stop", stop_reason=151676),
        Reply(TURN_3, finish_reason="stop", stop_reason=151645),
    )
    with deepanalyze_agent(openai_server) as agent:
        run = agent.run(TASK, data=[sales], workspace=tmp_path / "ws")
    assert run.stop_reason == "answer" and run.answer == "East sold the most units (17)."
    first, second, third = openai_server.requests

    opening = {
        "role": "user",
        "content": f"# Instruction\n{TASK}\n\n# Data\nFile 1:\n"
        + '{\n    "name": "sales.csv",\n    "size": "0.0KB"\n}\n\n',
    }
    assert first["messages"] == [opening]  # no system prompt, nothing else
    for request in (first, second, third):
        assert request["stop"] == ["</Code>"] and request["model"] == "DeepAnalyze-8B"
        assert {key: request[key] for key in EXTRAS} == EXTRAS  # the vLLM extras, top level in the body

    assert second["messages"] == [
        opening,
        {"role": "assistant", "content": TURN_1 + "</Code>"},  # the stop string put back
        {"role": "execute", "content": "(3, 2)\n"},  # raw output, no <Execute> wrapper
    ]
    feedback = third["messages"][4]
    assert third["messages"][:4] == [*second["messages"], {"role": "assistant", "content": TURN_2 + "</Code>"}]
    assert feedback["role"] == "execute" and len(third["messages"]) == 5
    assert "<Execute>" not in json.dumps([m["content"] for m in third["messages"]])
    assert feedback["content"].startswith("[error] NameError: name 'undefined_name' is not defined\n")
    assert "{'East': 17, 'West': 7}" in feedback["content"]


def test_rich_data_format_and_extras_off(openai_server: OpenAIServer, sales: Path, tmp_path: Path) -> None:
    openai_server.add(Reply("<Answer>East</Answer>"))
    with deepanalyze_agent(openai_server, data_format="rich", vllm_extras=False) as agent:
        agent.run(TASK, data=[sales], workspace=tmp_path / "ws")
    request = openai_server.requests[0]
    assert not set(EXTRAS) & set(request) and request["stop"] == ["</Code>"]
    content = request["messages"][0]["content"]
    assert content.startswith(f'# Instruction\n{TASK}\n\n# Data\nFile 1:\n{{\n    "name": "sales.csv",\n')
    assert "Columns: `region`" in content and "`units` int64" in content  # our summary under the JSON block


def test_a_server_rejecting_the_extras_names_the_option_to_turn_them_off(
    openai_server: OpenAIServer, sales: Path, tmp_path: Path
) -> None:
    # What api.openai.com answers for a field it does not know.
    openai_server.add(
        HTTPError(400, "Unrecognized request argument supplied: add_generation_prompt", type="invalid_request_error")
    )
    with deepanalyze_agent(openai_server) as agent:
        run = agent.run(TASK, data=[sales], workspace=tmp_path / "ws")
    assert run.stop_reason == "llm_error" and len(openai_server.requests) == 1  # a 400 is not retried
    assert run.error is not None
    assert "add_generation_prompt" in run.error and "--no-vllm-extras" in run.error
    assert "KERNEL_AGENT_VLLM_EXTRAS=0" in run.error


def test_people_read_the_tagged_transcript(openai_server: OpenAIServer, sales: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kernel_agent.cli.app import cli

    openai_server.add(Reply(TURN_1, finish_reason="stop", stop_reason="</Code>"), Reply(TURN_3))
    with deepanalyze_agent(openai_server) as agent:
        run = agent.run(TASK, data=[sales], workspace=tmp_path / "ws")
    shown = CliRunner().invoke(cli, ["show", "--transcript", str(run.notebook_path)])
    assert shown.exit_code == 0, shown.output
    assert shown.output == f"{TURN_1}</Code>\n<Execute>\n(3, 2)\n</Execute>\n{TURN_3}\n"


def test_a_deepanalyze_model_by_name_speaks_deepanalyze(
    openai_server: OpenAIServer, sales: Path, tmp_path: Path
) -> None:
    """`run --model <org>/DeepAnalyze-8B` without --protocol: DeepAnalyze's wire format, and run_started says why."""
    from click.testing import CliRunner

    from kernel_agent.cli.app import cli

    openai_server.add(Reply("<Answer>East</Answer>"))
    args = [
        "run",
        TASK,
        "--data",
        str(sales),
        "--model",
        "RUC-DataLab/DeepAnalyze-8B",
        "--base-url",
        openai_server.base_url,
        "--workspace",
        str(tmp_path / "ws"),
        "--json",
    ]
    done = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    started = next(json.loads(line) for line in done.output.splitlines() if '"run_started"' in line)
    assert started["protocol"] == "deepanalyze" and "DeepAnalyze's" in started["protocol_reason"]
    request = openai_server.requests[0]
    assert request["stop"] == ["</Code>"] and request["messages"][0]["content"].startswith(f"# Instruction\n{TASK}")
