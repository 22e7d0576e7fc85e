"""Issue 41: an exported notebook runs only what its cells show, in the user's own stock ``python3`` kernel.

A run's (sandboxed) code plants modules in its workspace: ``pandas.py``, ``seaborn.py``, a ``numpy/``
package, ``scipy.py`` (a later cell imports scipy) and ``sitecustomize.py``, each of which would write a
marker file on the host when imported. Both exported views are then executed with nbclient in a stock
``python3`` kernel started in the notebook's folder, as JupyterLab's Run All does: the cells run (the setup
cell steps into the run's folder, where the planted files are) and the marker is never written. A control
shows the attack is real: the same notebook without the setup cell's import-path step writes the marker.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from openai_server import OpenAIServer, Reply, python_call

from kernel_agent import Agent
from kernel_agent.notebook.export import clean_path

pytestmark = pytest.mark.kernel

PLANTED = ("pandas.py", "seaborn.py", "numpy/__init__.py", "scipy.py", "sitecustomize.py")


def planting_code(marker: Path) -> str:
    """Model code writing modules that would record their import in ``marker`` (a host path the sandbox
    cannot reach: only a kernel outside it, the user's, could write there)."""
    body = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    return (
        "import os\n"
        "os.makedirs('numpy', exist_ok=True)\n"
        f"for name in {list(PLANTED)!r}:\n"
        f"    open(name, 'w').write({body!r})\n"
        "print(sorted(os.listdir('.')))"
    )


USING = (
    "import scipy\n"
    "import seaborn\n"
    "frame = pd.DataFrame({'x': np.arange(4)})\n"
    "print(frame.x.sum(), scipy.__name__, seaborn.__name__, np.__file__.endswith('site-packages/numpy/__init__.py'))"
)


def execute(path: Path, allow_errors: bool = False) -> nbformat.NotebookNode:
    """Run All in a stock python3 kernel started in the notebook's folder; a cell error raises unless allowed."""
    nb = nbformat.read(path, as_version=4)
    folder = {"metadata": {"path": str(path.parent)}}
    client = NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=allow_errors, resources=folder)
    asyncio.run(client.async_execute())
    value: nbformat.NotebookNode = nb
    return value


def printed(nb: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_modules_planted_in_the_workspace_never_run_when_the_exports_are_run_in_stock_jupyter(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    marker = tmp_path / "planted-code-ran"
    openai_server.add(Reply("Planting.", tool_calls=(python_call(planting_code(marker)),)))
    openai_server.add(Reply("Using.", tool_calls=(python_call(USING),)))
    openai_server.add(Reply("Done."))
    data = tmp_path / "numbers.csv"
    data.write_text("x\n1\n2\n")
    with Agent(model="m", base_url=openai_server.base_url, api_key="sk-test", protocol="tools") as agent:
        run = agent.run("plant", data=[data], workspace=tmp_path / "out" / "analysis")
    assert [r.status for r in run.rounds] == ["ok", "ok", "answer"], run.rounds
    assert run.notebook_path is not None
    notebook = Path(run.notebook_path)
    workspace = tmp_path / "out" / "analysis"
    assert all((workspace / name).is_file() for name in PLANTED)
    for path in (notebook, clean_path(notebook)):
        nb = execute(path)
        assert "6 scipy seaborn True" in printed(nb), printed(nb)
        assert not marker.exists(), marker.read_text()

    # The control: the same notebook without the import-path step runs the planted pandas.py as the user.
    nb = nbformat.read(notebook, as_version=4)
    setup = nb.cells[1]
    assert setup.metadata["kernel_agent"]["role"] == "setup" and "sys.path[:]" in setup.source
    setup.source = "\n".join(line for line in setup.source.splitlines() if not line.startswith("sys.path[:]"))
    unguarded = notebook.with_name("unguarded.ipynb")
    nbformat.write(nb, unguarded)
    execute(unguarded, allow_errors=True)
    assert "pandas" in marker.read_text().split()


def test_the_setup_step_takes_the_folder_off_the_path_before_the_first_import() -> None:
    from kernel_agent.agent.datafiles.data import opened_beside, preload_code

    cell = opened_beside(preload_code(["sales.csv"]), "analysis")
    lines = cell.splitlines()
    first_import = next(i for i, line in enumerate(lines) if line.startswith(("%", "import pandas", "import numpy")))
    assert lines.index(next(line for line in lines if line.startswith("sys.path[:]"))) < first_import
    assert lines.index('if os.path.isdir("analysis"):  # opened in Jupyter beside the run\'s workspace: work there') < (
        lines.index("import pandas as pd")
    )
    assert json.dumps("PYTHONSAFEPATH") in cell
