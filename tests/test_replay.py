"""Replay: output comparison (pure), data staging, and real replays with nbclient + ipykernel.

The kernel tests record a run once for real (one nbclient execution of its
code, module-scoped), export it, then replay the exports. Each replay starts
one ``python3`` kernel.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import io
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import nbformat
import pytest
from matplotlib.figure import Figure
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook, new_output

from kernel_agent.errors import NotebookError
from kernel_agent.notebook.export import clean_path, export_run
from kernel_agent.notebook.replay import CellCheck, ReplayReport, compare_outputs, normalise_text, replay
from kernel_agent.records import Round, Run, RunInfo
from kernel_agent.result import ErrorInfo, ExecutionResult, strip_ansi

SALES = "a,b\n1,2\n3,4\n5,10\n7,7\n"
SETUP = (
    "import matplotlib\nmatplotlib.rcParams['figure.dpi'] = 50\nimport matplotlib.pyplot as plt\nimport pandas as pd"
)
CODES = {
    1: "df = pd.read_csv('sales.csv')\nprint('rows:', len(df))\ndf.describe()",
    2: "df['ratio'] = df['a'] / df['b']\ndf['missing'].sum()",  # raises after changing df
    5: "print('total', round(df['ratio'].sum(), 2))\nfig, ax = plt.subplots(figsize=(3, 2))\nax.plot(df['ratio'])",
}
TIMEOUT_CODE = "import time\nwhile True:\n    time.sleep(0.1)"
DIED_CODE = "import os\nos._exit(1)"


def png(width_in: float = 2, height_in: float = 1.5) -> str:
    figure = Figure(figsize=(width_in, height_in), dpi=50)
    figure.subplots().plot([1, 2])
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Temporary files of this test go to a folder we can check is empty afterwards."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    assert list(folder.iterdir()) == [], "replay left temporary files behind"


# -- pure: normalisation and comparison -----------------------------------------------------------


def test_normalise_text_hides_what_changes_between_runs() -> None:
    anchor = datetime(2025, 1, 2, 10, 0, tzinfo=UTC)
    text = (
        "[<matplotlib.lines.Line2D at 0x7f3a2c1d5e10>]\n"
        "took 1.25 s; 340 ms per step; "
        "12.3 µs ± 1.1 µs per loop (mean ± std. dev. of 7 runs, 100,000 loops each)\n"
        "elapsed 0:00:01.532211\n"
        "run at 2025-01-02 10:03:11.123456, data from 2019-06-30 08:00:00\n"
        "saved /home/me/ws/out.csv\n"
    )
    assert normalise_text(text, anchors=[anchor], paths=["/home/me/ws"]) == (
        "[<matplotlib.lines.Line2D at 0x?>]\n"
        "took <duration>; <duration> per step; "
        "<duration> ± <duration> per loop (mean ± std. dev. of 7 runs, <n> loops each)\n"
        "elapsed <duration>\n"
        "run at <now>, data from 2019-06-30 08:00:00\n"
        "saved <workspace>/out.csv\n"
    )
    assert normalise_text("10%\r50%\r100%\ndone\x1b[0m") == "100%\ndone"


def test_a_long_line_is_normalised_in_one_pass() -> None:
    # A regular expression for "\r overwrites" backtracked quadratically: a model's 200,000-character line
    # took 34 s per side to compare; 4 MB would take hours (the suite's timeout says so if it comes back).
    line = "x" * 2_000_000 + "\r" + "y" * 2_000_000
    assert normalise_text(line + "\nend\r\n") == "y" * 2_000_000 + "\nend\n"
    assert normalise_text("z" * 4_000_000) == "z" * 4_000_000


def test_compare_outputs_agrees_on_equivalent_outputs() -> None:
    recorded = [
        new_output("stream", name="stdout", text="a\nb\n"),
        new_output("execute_result", data={"text/plain": "<Foo at 0x7f0000001234>"}, execution_count=3),
        new_output("display_data", data={"image/png": png(), "text/plain": "<Figure>"}),
        new_output("error", ename="KeyError", evalue="'x'", traceback=["KeyError: 'x'"]),
    ]
    replayed = copy.deepcopy(recorded)
    replayed[1]["data"]["text/plain"] = "<Foo at 0x7fbbbbbb9999>"
    replayed[1]["execution_count"] = 1
    replayed[3]["evalue"] = "'y'"  # errors compare by name only
    replayed[0:1] = [new_output("stream", name="stdout", text="a\n"), new_output("stream", name="stdout", text="b\n")]
    assert compare_outputs(recorded, replayed) is None


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda outs: outs[0].update(text="total 43\n"), "stdout: recorded 'total 42' but replayed 'total 43'"),
        (
            lambda outs: outs[1]["data"].update({"image/png": png(3, 1.5)}),
            "output 1 (display_data): image size: recorded 100x75 but replayed 150x75",
        ),
        (lambda outs: outs.pop(1), "outputs: recorded [display_data (image), error] but replayed [error]"),
        (lambda outs: outs[2].update(ename="ValueError"), "output 2 (error): recorded KeyError but replayed ValueErr"),
        (lambda outs: outs.append(new_output("stream", name="stderr", text="Warning: odd\n")), "stderr: recorded"),
    ],
)
def test_compare_outputs_names_the_first_difference(change, expected: str) -> None:  # type: ignore[no-untyped-def]
    recorded = [
        new_output("stream", name="stdout", text="total 42\n"),
        new_output("display_data", data={"image/png": png(), "text/plain": "<Figure>"}),
        new_output("error", ename="KeyError", evalue="'x'", traceback=[]),
    ]
    replayed = copy.deepcopy(recorded)
    change(replayed)
    outcome = compare_outputs(recorded, replayed)
    assert outcome is not None and outcome.startswith(expected)


def test_images_may_differ_by_one_pixel() -> None:
    recorded = [new_output("display_data", data={"image/png": png(2, 1.5)})]
    replayed = [new_output("display_data", data={"image/png": png(2.02, 1.5)})]  # 101x75 against 100x75
    assert compare_outputs(recorded, replayed) is None


def test_report_is_ok_only_without_mismatch_or_error_and_renders_as_text() -> None:
    good = ReplayReport(Path("run.ipynb"), (CellCheck(1, 0, "match"), CellCheck(3, 1, "skipped", "tagged")))
    bad = ReplayReport(Path("run.ipynb"), (*good.cells, CellCheck(5, 2, "mismatch", "recorded 'a' but replayed 'b'")))
    assert good.ok and not bad.ok
    assert bad.counts() == {"match": 1, "mismatch": 1, "skipped": 1}
    text = bad.to_text()
    assert text.splitlines()[0].startswith("replay of run.ipynb: FAILED (1 match, 1 mismatch, 1 skipped)")
    assert "cell   1  setup" in text and "round 2" in text and "replayed 'b'" in text


# -- data files ------------------------------------------------------------------------------------


def write_plain_run(folder: Path, workspace: Path, data_files: tuple[str, ...]) -> Path:
    run = Run(info=RunInfo(task="t", data_files=data_files, workspace=str(workspace), setup_code="x = 1"))
    folder.mkdir(parents=True, exist_ok=True)
    return export_run(run, folder / "run.ipynb")


def test_a_missing_data_file_is_named_with_where_it_was_looked_for(tmp_path: Path, private_tmp: Path) -> None:
    path = write_plain_run(tmp_path / "runs", tmp_path / "ws", ("sales.csv",))
    with pytest.raises(NotebookError, match="sales.csv") as caught:
        replay(path)
    assert str(tmp_path / "runs") in str(caught.value)
    assert "pass --workspace" in str(caught.value) and "ws" in str(caught.value)  # named, not used
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "sales.csv").write_text("a\n1\n")
    with pytest.raises(NotebookError, match="sales.csv"):
        replay(path)  # the recorded workspace holds the file, but a notebook's claim is not followed
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(NotebookError, match=f"sales.csv.*{elsewhere}"):
        replay(path, workspace=elsewhere)


def test_a_forged_notebooks_paths_never_reach_the_kernel(tmp_path: Path, private_tmp: Path) -> None:
    # Someone else's notebook names a host secret by absolute path, by '..', and through a link beside it.
    secret = tmp_path / "host" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("HOST-SECRET\n")
    folder = tmp_path / "shared"
    for data_files, workspace in (((str(secret),), "/"), (("../host/secret.txt",), ".."), (("secret.txt",), "..")):
        path = write_plain_run(folder, tmp_path, data_files)
        nb = nbformat.read(path, as_version=4)
        nb.metadata["kernel_agent"]["workspace"] = workspace
        nbformat.write(nb, path)
        with pytest.raises(NotebookError, match="secret.txt"):
            replay(path)
    (folder / "secret.txt").symlink_to(secret)  # beside the notebook, by its plain name: a link is not read
    with pytest.raises(NotebookError, match="secret.txt"):
        replay(path)


def test_the_sync_facade_works_inside_a_running_event_loop(tmp_path: Path, private_tmp: Path) -> None:
    path = write_plain_run(tmp_path, tmp_path, ("absent.csv",))

    async def from_a_coroutine() -> None:
        replay(path)

    with pytest.raises(NotebookError, match="absent.csv"):
        asyncio.run(from_a_coroutine())


def test_an_unknown_kernel_is_a_notebook_error(tmp_path: Path, private_tmp: Path) -> None:
    path = write_plain_run(tmp_path, tmp_path, ())
    with pytest.raises(NotebookError, match="could not start kernel 'no-such-kernel'"):
        replay(path, kernel_name="no-such-kernel")


# -- real replays ----------------------------------------------------------------------------------


def execute(nb: nbformat.NotebookNode, cwd: Path) -> nbformat.NotebookNode:
    resources = {"metadata": {"path": str(cwd)}}
    client = NotebookClient(nb, timeout=60, kernel_name="python3", allow_errors=True, resources=resources)
    asyncio.run(client.async_execute())
    return nb


def result_of(cell: nbformat.NotebookNode) -> ExecutionResult:
    outputs = tuple(dict(out) for out in cell.outputs)
    error = next((out for out in outputs if out["output_type"] == "error"), None)
    if error is None:
        return ExecutionResult("ok", outputs, cell.execution_count, 0.1)
    info = ErrorInfo(error["ename"], error["evalue"], tuple(strip_ansi(line) for line in error["traceback"]))
    return ExecutionResult("error", outputs, cell.execution_count, 0.1, info)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A run recorded for real (pandas, a figure, an error, a timeout, a death), exported away from its data."""
    workspace = tmp_path_factory.mktemp("ws")
    (workspace / "sales.csv").write_text(SALES, encoding="utf-8")
    cells = execute(new_notebook(cells=[new_code_cell(code) for code in (SETUP, *CODES.values())]), workspace).cells
    results = dict(zip(CODES, (result_of(cell) for cell in cells[1:]), strict=True))
    rounds = (
        Round(1, reply="r1", reasoning="Load the data.", code=CODES[1], result=results[1]),
        Round(2, reply="r2", reasoning="Add a ratio.", code=CODES[2], result=results[2]),
        Round(3, reply="r3", code=TIMEOUT_CODE, result=ExecutionResult("timeout", (), 4, 5.0)),
        Round(4, reply="r4", code=DIED_CODE, result=ExecutionResult("died", (), 5, 0.2, state_lost=True)),
        Round(5, reply="r5", reasoning="Plot it.", code=CODES[5], result=results[5]),
        Round(6, reply="r6", reasoning="Done.", answer="2.75"),
    )
    now = datetime.now(UTC).isoformat()
    info = RunInfo(
        "Sum the ratios", data_files=("sales.csv",), workspace=str(workspace), setup_code=SETUP, started_at=now
    )
    run = Run(info, rounds, answer="2.75", stop_reason="answer", setup_result=result_of(cells[0]), finished_at=now)
    assert results[2].status == "error" and len(results[5].images) == 1  # the recording itself is what we meant
    out = tmp_path_factory.mktemp("runs")
    return export_run(run, out / "run.ipynb"), workspace


@pytest.mark.kernel
def test_an_export_replays_and_matches(exported: tuple[Path, Path], private_tmp: Path) -> None:
    with pytest.raises(NotebookError, match="pass --workspace"):
        replay(exported[0], timeout=60)  # the recorded workspace is a claim: named, not followed
    report = replay(exported[0], workspace=exported[1], timeout=60)
    assert report.ok, report.to_text()
    assert [(c.round, c.status) for c in report.cells] == [
        (0, "match"), (1, "match"), (2, "match"), (3, "skipped"), (4, "skipped"), (5, "match"),
    ]  # fmt: skip
    assert report.notebook is not None
    executed = report.notebook.cells[report.cells[-1].index]
    assert sum("image/png" in out.get("data", {}) for out in executed.outputs) == 1


@pytest.mark.kernel
def test_a_tampered_clean_view_reports_the_mismatch(
    exported: tuple[Path, Path], tmp_path: Path, private_tmp: Path
) -> None:
    nb = nbformat.read(clean_path(exported[0]), as_version=4)
    tags = [c.metadata.get("tags", []) for c in nb.cells if c.cell_type == "code"]
    assert tags == [[], [], ["raises-exception"], []]  # the failed round 2 is kept: it changed df
    plot = [c for c in nb.cells if c.cell_type == "code"][-1]
    stream = next(out for out in plot.outputs if out.output_type == "stream")
    stream.text = stream.text.replace("total", "total (edited)")
    path = tmp_path / "tampered.ipynb"
    nbformat.write(nb, path)
    report = replay(path, workspace=exported[1], timeout=60)
    assert [c.status for c in report.cells] == ["match", "match", "match", "mismatch"]
    assert report.cells[-1].detail.startswith("stdout: recorded 'total (edited) 2.75' but replayed 'total 2.75'")
    assert not report.ok and "FAILED" in report.to_text()


@pytest.mark.kernel
def test_jupyter_nbconvert_executes_an_export(exported: tuple[Path, Path], tmp_path: Path) -> None:
    shutil.copy(exported[0], tmp_path / "run.ipynb")
    (tmp_path / "sales.csv").write_text(SALES, encoding="utf-8")
    jupyter = Path(sys.executable).parent / "jupyter"
    done = subprocess.run(
        [str(jupyter), "nbconvert", "--to", "notebook", "--execute", "run.ipynb", "--output", "executed.ipynb",
         "--ExecutePreprocessor.timeout=60"],
        cwd=tmp_path, capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cells = [c for c in nbformat.read(tmp_path / "executed.ipynb", as_version=4).cells if c.cell_type == "code"]
    assert [o.ename for o in cells[2].outputs if o.output_type == "error"] == ["KeyError"]
    assert sum("image/png" in o.get("data", {}) for o in cells[5].outputs) == 1


@pytest.mark.kernel
def test_clear_output_and_display_updates_replay_and_match(tmp_path: Path, private_tmp: Path) -> None:
    cells = [
        "from IPython.display import clear_output, display\n"
        "for i in range(3):\n    clear_output(wait=True)\n    print(f'step {i}')",
        "handle = display('first', display_id=True)\nhandle.update('second')",
        "handle.update('third')\nprint('updated')",
    ]
    nb = execute(new_notebook(cells=[new_code_cell(code) for code in cells]), tmp_path)
    assert [o.get("text") for o in nb.cells[0].outputs] == ["step 2\n"]
    assert nb.cells[1].outputs[0]["data"]["text/plain"] == "'third'"
    path = tmp_path / "display.ipynb"
    nbformat.write(nb, path)
    report = replay(path, timeout=60)
    assert [c.status for c in report.cells] == ["match", "match", "match"], report.to_text()


@pytest.mark.kernel
def test_an_unexpected_error_stops_the_replay_with_an_entry(tmp_path: Path, private_tmp: Path) -> None:
    cells = [new_code_cell("print(1)"), new_code_cell("1 / 0"), new_code_cell("print(3)")]
    path = tmp_path / "breaks.ipynb"
    nbformat.write(new_notebook(cells=cells), path)  # no kernelspec: python3 is the default
    report = replay(path, check=False, timeout=60)
    assert [(c.index, c.status) for c in report.cells] == [(0, "executed"), (1, "error"), (2, "skipped")]
    assert report.cells[1].detail.startswith("raised ZeroDivisionError")
    assert "stopped at cell 1" in report.cells[2].detail and not report.ok


@pytest.mark.kernel
def test_replay_kernel_never_sees_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-replay-secret")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("import os\nprint(os.environ.get('OPENAI_API_KEY'))")]
    path = tmp_path / "secret.ipynb"
    nbformat.write(nb, path)
    report = replay(path, check=False)
    assert report.notebook is not None
    printed = report.notebook.cells[0].outputs[0]["text"]
    assert printed == "None\n"
