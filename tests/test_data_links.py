"""User-named data files that lie in a run's workspace, where the analysed code writes: a link it planted
there is never followed (the host would read, as the user, whatever it names and hand it to the next
kernel), a chain of links is checked at every hop, and a file swapped for a link while the host reads it
(renameat2 RENAME_EXCHANGE in a loop) never yields the secret. The user's own links elsewhere still work."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from openai_server import OpenAIServer, Reply, python_call
from test_door import exchanging

from kernel_agent.agent.datafiles.data import prepare_data, summarize
from kernel_agent.cli import cli
from kernel_agent.errors import DataFileError
from kernel_agent.kernel.workspace import resolve_outside_workspaces, workspace_holding

SECRET = "user,password\nroot,hunter2\n"


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """``project/agent-runs/run1/`` (a run's workspace, written by the kernel) and ``host/secret.csv``."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret.csv").write_text(SECRET)
    workspace = tmp_path / "project" / "agent-runs" / "run1"
    workspace.mkdir(parents=True)
    (workspace / "out.csv").write_text("a,b\n1,2\n")
    return workspace, host


def copied(target: Path) -> str:
    return "".join(path.read_text() for path in target.iterdir() if path.is_file())


def test_a_plain_file_a_run_wrote_is_a_data_file(layout: tuple[Path, Path], tmp_path: Path) -> None:
    workspace, _ = layout
    (file,) = prepare_data([workspace / "out.csv"], tmp_path / "next")
    assert file.name == "out.csv" and file.source == str(workspace / "out.csv")
    assert (tmp_path / "next" / "out.csv").read_text() == "a,b\n1,2\n"


@pytest.mark.parametrize("recognised_by", ["agent-runs", "record beside"])
def test_a_link_planted_in_a_workspace_is_refused(
    layout: tuple[Path, Path], tmp_path: Path, recognised_by: str
) -> None:
    workspace, host = layout
    if recognised_by == "record beside":  # any folder with its run record beside it (the persona's, --workspace)
        workspace = tmp_path / "chats" / "sales-agent"
        workspace.mkdir(parents=True)
        (tmp_path / "chats" / "sales-agent.ipynb").write_text("{}")
    (workspace / "results.csv").symlink_to(host / "secret.csv")
    with pytest.raises(DataFileError, match="is a link inside the run workspace"):
        prepare_data([workspace / "results.csv"], tmp_path / "next")
    with pytest.raises(DataFileError, match="link inside the run workspace"):
        summarize(workspace / "results.csv")
    assert not (tmp_path / "next").exists() or SECRET not in copied(tmp_path / "next")


def test_a_folder_link_on_the_way_is_refused(layout: tuple[Path, Path], tmp_path: Path) -> None:
    workspace, host = layout
    (workspace / "reports").symlink_to(host)
    with pytest.raises(DataFileError, match="reports is a link inside the run workspace"):
        prepare_data([workspace / "reports" / "secret.csv"], tmp_path / "next")


def test_a_chain_through_the_users_own_link_is_checked_at_every_hop(layout: tuple[Path, Path], tmp_path: Path) -> None:
    workspace, host = layout
    (workspace / "results.csv").symlink_to(host / "secret.csv")
    (tmp_path / "latest.csv").symlink_to(workspace / "results.csv")  # the user's link, to the kernel's link
    with pytest.raises(DataFileError, match="results.csv is a link inside the run workspace"):
        prepare_data([tmp_path / "latest.csv"], tmp_path / "next")


def test_the_users_own_links_elsewhere_are_followed(layout: tuple[Path, Path], tmp_path: Path) -> None:
    _, host = layout
    (tmp_path / "mine.csv").symlink_to(host / "secret.csv")
    (tmp_path / "data").symlink_to(host)
    assert resolve_outside_workspaces(tmp_path / "data" / "secret.csv") == str(host / "secret.csv")
    files = prepare_data([tmp_path / "mine.csv"], tmp_path / "next")
    assert [file.name for file in files] == ["mine.csv"]
    assert (tmp_path / "next" / "mine.csv").read_text() == SECRET  # the user named it: their own file


def test_workspace_holding_names_the_nearest_run_folder(layout: tuple[Path, Path], tmp_path: Path) -> None:
    workspace, _ = layout
    assert workspace_holding(workspace / "deep" / "x.csv") == workspace
    assert workspace_holding(workspace) is None  # the folder itself is not inside a workspace
    assert workspace_holding(tmp_path / "host" / "secret.csv") is None


@pytest.fixture
def swapping(layout: tuple[Path, Path]) -> Iterator[tuple[Path, list[int]]]:
    """The kernel's race: ``run1/sub`` (a real folder holding data.csv) and ``run1/evil`` (a link to the
    host's folder, which holds a data.csv of secrets) swapped with RENAME_EXCHANGE as fast as it can."""
    workspace, host = layout
    (workspace / "sub").mkdir()
    (workspace / "sub" / "data.csv").write_text("a,b\n1,2\n")
    (host / "data.csv").write_text(SECRET)
    (workspace / "evil").symlink_to(host)
    with exchanging(workspace / "sub", workspace / "evil") as swaps:
        yield workspace, swaps


def test_a_folder_swapped_for_a_link_while_the_host_reads_never_yields_the_secret(
    swapping: tuple[Path, list[int]], tmp_path: Path
) -> None:
    workspace, swaps = swapping
    outcomes = {"copied": 0, "refused": 0}
    n = 0
    while n < 300 or not outcomes["refused"]:  # on a loaded machine the swap may need more tries
        n += 1
        assert n < 5000, f"the race never reached the host's check: {outcomes}"
        target = tmp_path / f"next-{n}"
        try:
            (file,) = prepare_data([workspace / "sub" / "data.csv"], target)
        except DataFileError:
            outcomes["refused"] += 1
            continue
        assert (target / "data.csv").read_text() == "a,b\n1,2\n" and "hunter2" not in file.summary
        outcomes["copied"] += 1
    assert swaps[0] > 100  # the race ran


@pytest.mark.kernel
def test_a_link_a_real_kernel_planted_is_refused_as_the_next_runs_data(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    secret = tmp_path / "host-secret.csv"
    secret.write_text(SECRET)
    plant = f"import os\nos.symlink({str(secret)!r}, 'results.csv')\nprint(sorted(os.listdir('.')))"
    openai_server.add(Reply("Saving results.", tool_calls=(python_call(plant),)), Reply("Saved results.csv."))
    workspace = tmp_path / "agent-runs" / "r1"
    common = ["--model", "m", "--base-url", openai_server.base_url, "--protocol", "tools", "--quiet"]
    first = CliRunner().invoke(cli, ["run", "Save results", *common, "--workspace", str(workspace)])
    assert first.exit_code == 0, first.output
    assert (workspace / "results.csv").is_symlink()  # the kernel planted it
    asked = len(openai_server.requests)

    second = CliRunner().invoke(
        cli,
        [
            "run",
            "Look",
            *common,
            "--data",
            str(workspace / "results.csv"),
            "--workspace",
            str(tmp_path / "agent-runs" / "r2"),
        ],
    )

    assert second.exit_code == 2, second.output
    assert "is a link inside the run workspace" in second.output and "hunter2" not in second.output
    assert len(openai_server.requests) == asked  # refused before any model call
    assert not (tmp_path / "agent-runs" / "r2" / "results.csv").exists()
