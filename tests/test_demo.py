"""``make demo`` (``kernel-agent demo``) with no model configured, its notebook, and the committed examples.

The demo runs once per module into a temporary ``notebooks/`` folder; the
tests then check what it printed and wrote, replay it, tamper with it and
review it. The committed example notebook must replay with ``--check``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner, Result
from openai_server import OpenAIServer, Reply

from kernel_agent.cli import cli

pytestmark = pytest.mark.kernel

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "notebooks" / "example-sales-analysis.ipynb"


def invoke(*args: object) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def images(nb: nbformat.NotebookNode) -> int:
    return sum("image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", []))


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Result, Path]]:
    """``kernel-agent demo`` with no model in the environment, writing under a temporary ``notebooks/``."""
    folder = tmp_path_factory.mktemp("demo") / "notebooks"
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith(("OPENAI_", "KERNEL_AGENT_")):
                patch.delenv(name)
        result = invoke("demo", "--out", folder / "demo-run.ipynb", "--workspace", folder / "demo-run")
    yield result, folder / "demo-run.ipynb"


def test_demo_without_a_model_plays_the_scripted_replies_through_a_real_kernel(demo: tuple[Result, Path]) -> None:
    result, notebook = demo

    assert result.exit_code == 0, result.output
    assert "No model configured: playing the scripted demo replies." in result.output
    assert "Sales 2023–2024: findings" in result.output  # the answer, on screen
    assert "2,981 of 3,000 rows kept" in result.output  # printed by code that really ran
    assert f"notebook: {notebook}" in result.output
    nb = nbformat.read(notebook, as_version=4)
    nbformat.validate(nb)
    meta = nb.metadata["kernel_agent"]
    assert meta["scripted"] is True and meta["stop_reason"] == "answer"
    assert "scripted" in nb.cells[0].source
    assert images(nb) >= 3
    assert (notebook.parent / "demo-run" / "monthly_revenue.png").stat().st_size > 10_000
    assert notebook.with_name(".demo-run.clean.ipynb").is_file()


def test_demo_notebook_replays_with_check(demo: tuple[Result, Path]) -> None:
    result = invoke("replay", demo[1], "--check")

    assert result.exit_code == 0, result.output
    assert "ok (6 match)" in result.output


def test_replay_check_reports_a_changed_output_and_exits_1(demo: tuple[Result, Path]) -> None:
    notebook = demo[1]
    nb = nbformat.read(notebook, as_version=4)
    first = next(
        cell
        for cell in nb.cells
        if cell.metadata.get("kernel_agent", {}).get("round") == 1 and cell.cell_type == "code"
    )
    first.outputs[0]["text"] = first.outputs[0]["text"].replace("3,000 rows", "3,001 rows")
    tampered = notebook.with_name("tampered.ipynb")
    nbformat.write(nb, tampered)

    result = invoke("replay", tampered, "--check")

    assert result.exit_code == 1
    assert "FAILED" in result.output and "mismatch" in result.output and "3,001 rows" in result.output


def test_show_reviews_the_demo_in_the_terminal_and_as_html(demo: tuple[Result, Path], tmp_path: Path) -> None:
    result = invoke("show", demo[1])

    assert result.exit_code == 0
    for expected in ("Round 5", "✓ round 4: ok", "[image 1: png", "Answer", "scripted", "pd.read_csv"):
        assert expected in result.output
    page = tmp_path / "demo.html"
    assert invoke("show", demo[1], "--html", page).exit_code == 0
    html = page.read_text()
    assert "<html" in html and html.count("data:image/png;base64") >= 3


def test_demo_uses_a_configured_model(
    openai_server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    openai_server.add(Reply("Revenue grew."))
    monkeypatch.setenv("KERNEL_AGENT_MODEL", "demo-model")
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)

    result = invoke("demo", "--out", tmp_path / "d.ipynb", "--workspace", tmp_path / "d", "--quiet")

    assert result.exit_code == 0
    assert result.stdout.splitlines()[0] == "Revenue grew."
    assert openai_server.requests[0]["model"] == "demo-model"
    assert "sales.csv" in json.dumps(openai_server.requests[0]["messages"])
    assert nbformat.read(tmp_path / "d.ipynb", as_version=4).metadata["kernel_agent"]["scripted"] is False


def test_scripted_demo_refuses_another_protocol(tmp_path: Path) -> None:
    result = invoke("demo", "--scripted", "--protocol", "tools", "--out", tmp_path / "x.ipynb")

    assert result.exit_code == 2
    assert "tags protocol" in result.stderr


def test_committed_example_has_figures_and_replays_with_check(tmp_path: Path) -> None:
    nb = nbformat.read(EXAMPLE, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernel_agent"]["scripted"] is True and images(nb) >= 3
    copy = tmp_path / "notebooks"
    shutil.copytree(EXAMPLE.parent, copy, ignore=shutil.ignore_patterns("demo-run*", "agent-runs"))

    result = invoke("replay", copy / EXAMPLE.name, "--check")  # a copy: replays do not depend on the checkout

    assert result.exit_code == 0, result.output
    assert "FAILED" not in result.output


def test_committed_magic_notebook_shows_the_magic() -> None:
    nb = nbformat.read(REPO / "notebooks" / "magic-demo.ipynb", as_version=4)
    sources = [cell.source for cell in nb.cells if cell.cell_type == "code"]
    assert any("%load_ext kernel_agent" in source for source in sources)
    agent_cell = next(cell for cell in nb.cells if cell.source.startswith("%%agent"))
    assert any("image/png" in out.get("data", {}) for out in agent_cell.outputs)
