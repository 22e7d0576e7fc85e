"""--kernel NAME: any installed Jupyter kernel runs the analysis, in the same sandbox. R (IRkernel) is the
proof that nothing above the kernel layer assumes Python: a whole scripted analysis through the CLI with a
figure, a timeout that interrupts, a crash that is rebuilt, exported and replayed with --check."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import nbformat
import pytest
from click.testing import CliRunner, Result
from openai_server import OpenAIServer, Reply, tool_call

from kernel_agent.agent.languages import PYTHON, R, language_of
from kernel_agent.cli import cli
from kernel_agent.errors import ConfigError
from kernel_agent.kernel.kernelspec import choose_kernel
from kernel_agent.kernel.rebuild import names_of


def invoke(*args: Any) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def r_call(code: str) -> tuple[dict[str, Any], ...]:
    return (tool_call("execute_r", {"code": code}),)


def r_has(package: str) -> bool:
    done = subprocess.run(
        ["Rscript", "-e", f"cat(requireNamespace('{package}', quietly = TRUE))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip() == "TRUE"


@pytest.mark.kernel
def test_a_whole_analysis_in_r_with_a_figure_a_timeout_and_a_crash_replays(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    data = tmp_path / "numbers.csv"
    data.write_text("x,y\n1,2\n2,4\n3,7\n")
    openai_server.add(
        Reply("Load and total.", tool_calls=r_call("df <- read.csv(data$numbers)\ntotal <- sum(df$x)\nprint(total)")),
        Reply("Plot.", tool_calls=r_call("plot(df$x, df$y)")),
        Reply("Wait.", tool_calls=r_call("Sys.sleep(60)")),
        Reply("Still there?", tool_calls=r_call("print(total * 2)")),
        Reply("Crash.", tool_calls=r_call("quit(save = 'no', status = 3)")),
        Reply("Rebuilt?", tool_calls=r_call("print(total + 100)")),
        Reply("The total of x is 6."),
    )
    notebook = tmp_path / "run.ipynb"

    result = invoke(
        "run",
        "Total x",
        "--kernel",
        "ir",
        "--model",
        "m",
        "--base-url",
        openai_server.base_url,
        "--data",
        data,
        "--workspace",
        tmp_path / "ws",
        "--out",
        notebook,
        "--timeout",
        3,
        "--json",
    )

    assert result.exit_code == 0, result.output
    finished = [json.loads(line) for line in result.stdout.splitlines()]
    results = [e["result"] for e in finished if e["event"] == "execution_finished"]
    assert [r["status"] for r in results] == ["ok", "ok", "timeout", "ok", "died", "ok"]
    assert results[0]["stdout"] == "[1] 6\n"
    assert results[1]["images"] == 1
    assert results[3]["stdout"] == "[1] 12\n"  # the interrupt stopped the code and kept the variables
    assert results[5]["stdout"] == "[1] 106\n"  # rebuilt after the crash: the setup cell and round 1 ran again

    first = openai_server.requests[0]
    assert [tool["function"]["name"] for tool in first["tools"]] == ["execute_r"]
    system = first["messages"][0]["content"]
    assert "runs R in a live Jupyter kernel" in system and "IRkernel" in system and "IPython" not in system
    assert '`data$numbers` == "numbers.csv"' in system
    listed = re.search(r"Installed packages: (.*)\.", system)
    for entry in listed.group(1).split(", ") if listed else ():
        assert r_has(entry.split(" ")[0]), entry  # the environment line says what loads there
    assert "Python" not in json.dumps(first["tools"])

    nb = nbformat.read(notebook, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "ir" and nb.metadata["kernelspec"]["language"] == "R"
    assert nb.metadata["language_info"]["name"] == "R"
    setup = nb.cells[1]
    assert setup.metadata["kernel_agent"]["role"] == "setup" and "set.seed(0)" in setup.source
    assert "import" not in setup.source

    replayed = invoke("replay", notebook, "--timeout", 30)
    assert replayed.exit_code == 0, replayed.output

    # resume starts the kernel the notebook records (R), rebuilds its variables and goes on in R
    openai_server.add(Reply("Double.", tool_calls=r_call("print(total * 2)")), Reply("Doubled: 12."))
    resumed = invoke("resume", notebook, "Double it", "--base-url", openai_server.base_url, "--json")
    assert resumed.exit_code == 0, resumed.output
    last = [json.loads(line) for line in resumed.stdout.splitlines() if '"execution_finished"' in line][-1]
    assert last["result"]["stdout"] == "[1] 12\n"
    assert openai_server.requests[-1]["tools"][0]["function"]["name"] == "execute_r"
    resumed_system = openai_server.requests[-2]["messages"][0]["content"]
    assert "`df: data.frame 3x2`" in resumed_system and "`total: integer`" in resumed_system  # R's names probe
    assert "```r\ndf <- read.csv" in openai_server.requests[-2]["messages"][-1]["content"]  # the briefing's fence


@pytest.mark.kernel
def test_an_unknown_kernel_is_refused_before_any_model_call(openai_server: OpenAIServer, tmp_path: Path) -> None:
    result = invoke(
        "run",
        "Anything",
        "--kernel",
        "no-such-kernel",
        "--model",
        "m",
        "--base-url",
        openai_server.base_url,
        "--workspace",
        tmp_path / "ws",
    )

    assert result.exit_code == 2
    assert "no Jupyter kernel named 'no-such-kernel'" in result.stderr and "ir" in result.stderr
    assert openai_server.requests == []


@pytest.mark.kernel
def test_plan_mode_says_it_writes_python(openai_server: OpenAIServer, tmp_path: Path) -> None:
    result = invoke(
        "plan",
        "Anything",
        "--kernel",
        "ir",
        "--model",
        "m",
        "--base-url",
        openai_server.base_url,
        "--workspace",
        tmp_path / "ws",
    )

    assert result.exit_code == 2
    assert "plan mode writes Python, and this kernel runs R" in result.stderr
    assert openai_server.requests == []


@pytest.mark.kernel  # needs IRkernel installed (make test installs it), though it starts no kernel
def test_a_kernel_of_another_kind_is_checked_and_runs_confined_by_our_launcher() -> None:
    choice = choose_kernel("ir")

    assert choice.command[0].endswith("/R") and choice.python is None
    assert choice.recorded == {"name": "ir", "display_name": "R", "language": "R"}
    with pytest.raises(ConfigError, match="runs R"):
        choose_kernel("ir", python="/usr/bin/python3")


def test_the_language_profile_comes_from_the_kernel() -> None:
    assert language_of({"name": "R", "version": "4.2.2"}) is R
    assert language_of({"name": "python"}) is PYTHON and language_of(None) is PYTHON
    julia = language_of({"name": "julia"})
    assert (julia.fence, julia.tool, julia.setup(["a.csv"])) == ("julia", "execute_code", "")
    assert R.fence_line.search("```r\nx <- 1\n```") and not R.fence_line.search("```python\n")
    assert R.hint("ERROR", "Error in library(dplyr): there is no package called ‘dplyr’", ()).startswith(
        "dplyr is not installed here"
    )


def test_rebuild_reads_r_assignments() -> None:
    loads, binds, touched = names_of('total <- sum(df$x) # y <- 1\nlabel = "z <- 2"\nmean(v) -> m', "R")

    assert binds == {"total", "label", "m"} and {"df", "v"} <= loads and "y" not in loads | binds
    assert names_of("df$y <- df$x * 2", "R")[2] == {"df"}


@pytest.mark.kernel  # needs IRkernel installed, though it starts no kernel
def test_the_mcp_server_says_its_tools_are_python() -> None:
    result = invoke("mcp", "--kernel", "ir")

    assert result.exit_code == 2 and "kernel 'ir' runs R, and the MCP server's tools" in result.stderr


@pytest.mark.kernel
def test_the_python_environment_line_says_what_imports_there(openai_server: OpenAIServer, tmp_path: Path) -> None:
    import importlib.util

    from kernel_agent import Agent
    from kernel_agent.agent.environment import PACKAGES

    openai_server.add(Reply("Nothing to compute."))
    with Agent(model="m", base_url=openai_server.base_url, protocol="tools") as agent:
        agent.run("Say hi", workspace=tmp_path / "ws")

    system = openai_server.requests[0]["messages"][0]["content"]
    listed = re.search(r"Installed packages: (.*)\.", system)
    installed = {entry.split(" ")[0] for entry in listed.group(1).split(", ")} if listed else set()
    assert installed == {name for name in PACKAGES if importlib.util.find_spec(name) is not None}
    assert {"pandas", "numpy", "matplotlib", "seaborn", "scipy", "sklearn", "statsmodels"} <= installed
    absent = set(PACKAGES) - installed
    if absent:
        assert "do not import them" in system and all(name in system for name in absent)
