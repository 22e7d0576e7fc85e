"""--python PATH: the kernel runs another Python environment (its own packages, not the agent's), in the
same sandbox, with our in-kernel caps; an environment without what we need is a clear error before any
model call. The environment is a real second venv made here, with ipykernel and one marker package."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from planting import plant

from kernel_agent.cli import cli
from kernel_agent.errors import ConfigError
from kernel_agent.kernel.python_env import probe_python, require_setup_packages
from kernel_agent.kernel.sandbox.limits import Limits
from kernel_agent.kernel.session_sync import KernelSession

pytestmark = pytest.mark.kernel

BASE = Path(sys.base_prefix) / "bin" / "python3"


def make_venv(root: Path, *packages: str) -> Path:
    subprocess.run([str(BASE), "-m", "venv", str(root)], check=True, timeout=300)
    python = root / "bin" / "python"
    if packages:
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *packages],
            check=True,
            timeout=900,
        )
    return python


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = make_venv(tmp_path_factory.mktemp("other") / "venv", "ipykernel")
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "env_marker.py").write_text("WHERE = 'the other environment'\n")
    return python


def test_the_kernel_runs_the_other_environment_confined(other: Path, tmp_path: Path) -> None:
    with KernelSession(tmp_path / "ws", python=str(other)) as session:
        assert session.execute("import env_marker\nenv_marker.WHERE").result_text == "'the other environment'"
        assert session.execute("import sys\nsys.prefix").result_text == repr(str(other.parent.parent))
        leaked = session.execute("import pandas")  # the agent's own packages are not there
        assert leaked.error is not None and leaked.error.ename == "ModuleNotFoundError"
        home = session.execute("import os\nos.getuid(), os.path.exists('/root/.bashrc')").result_text
        assert home == "(1000, False)"  # the same sandbox
        flood = session.execute("print('x' * 30_000_000)")  # our output cap runs in it too
        assert "passed the cap" in flood.outputs[-1]["data"]["text/plain"]
    # an agent run's setup cell needs pandas, numpy, matplotlib: said before any model call
    with pytest.raises(ConfigError, match=r"matplotlib, numpy, pandas not installed in .*pip install matplotlib"):
        require_setup_packages(str(other))


def test_a_launcher_planted_in_the_workspace_never_runs_in_the_other_environment(other: Path, tmp_path: Path) -> None:
    """Issue 48: the other interpreter runs our launcher isolated, by its path in the session's own folder;
    the workspace (its current folder) full of planted modules and a ``kernel_agent/`` is never imported,
    before or after the kernel killed itself and was started again."""
    marker = plant(tmp_path / "ws")
    limits = Limits(max_file_mb=7)
    with KernelSession(tmp_path / "ws", python=str(other), limits=limits) as session:
        check = "import resource\nprint(resource.getrlimit(resource.RLIMIT_FSIZE)[1] >> 20)"
        assert session.execute(check).stdout == "7\n"
        assert session.execute("import os\nos._exit(1)").status == "died"
        assert session.execute(check).stdout == "7\n"
        assert session.execute("import env_marker\nenv_marker.WHERE").result_text == "'the other environment'"
    assert not marker.exists()


def test_an_environment_without_what_we_need_is_a_clear_error_before_any_model_call(tmp_path: Path) -> None:
    bare = make_venv(tmp_path / "bare")
    with pytest.raises(ConfigError, match=r"ipykernel is not installed in .*bare: .* -m pip install ipykernel"):
        probe_python(str(bare))
    with pytest.raises(ConfigError, match="no such interpreter"):
        probe_python(str(tmp_path / "nope" / "python"))
    # the agent's setup cell needs pandas: said before the model (a port nothing listens on) is asked
    args = [
        "run",
        "task",
        "--model",
        "m",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--python",
        str(bare),
        "--workspace",
        str(tmp_path / "ws"),
    ]
    done = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert done.exit_code == 2 and "ipykernel is not installed" in done.output


def test_a_kernelspec_pointing_at_the_other_environment(
    other: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "jupyter" / "kernels" / "other-env"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [str(other), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Other env",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))

    with KernelSession(tmp_path / "ws", kernel_name="other-env") as session:
        assert session.execute("import env_marker\nenv_marker.WHERE").result_text == "'the other environment'"
        leaked = session.execute("import pandas")
        assert leaked.error is not None and leaked.error.ename == "ModuleNotFoundError"
        assert session.execute("import os\nos.getuid()").result_text == "1000"  # the same sandbox
        assert session.kernelspec == {"name": "other-env", "display_name": "Other env", "language": "python"}
    # without pandas there, a run is refused before any model call, naming the environment
    args = [
        "run",
        "task",
        "--model",
        "m",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--kernel",
        "other-env",
        "--workspace",
        str(tmp_path / "ws2"),
    ]
    done = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert done.exit_code == 2 and "pandas not installed in" in done.output
