"""The core installs alone: our wheel, built here, in a fresh venv with only the core's requirements
(no extra) runs ``kernel-agent demo``, and the front ends of the extras say which one to install.

Slow (a wheel build, a venv, pandas and friends from pip's cache, a real kernel): kernel tier.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from installs import clean_environment

pytestmark = pytest.mark.kernel

REPO = Path(__file__).resolve().parent.parent
SERVER_STACK = ("fastapi", "uvicorn", "sqlalchemy", "alembic", "aiosqlite", "asyncpg", "prometheus_client", "mcp")


def pip(*args: str | Path) -> None:
    """This interpreter's pip (its cache, its index), acting on whatever ``--python`` in ``args`` names."""
    run = subprocess.run(
        [sys.executable, "-m", "pip", "--quiet", *map(str, args)], capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv (no pip of its own) holding our wheel and the core requirements alone: its bin folder."""
    root = tmp_path_factory.mktemp("core")
    pip("wheel", "--no-deps", "--wheel-dir", root / "dist", REPO)
    (wheel,) = (root / "dist").glob("kernel_agent-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", root / "venv"], check=True, timeout=120)
    pip("--python", root / "venv" / "bin" / "python", "install", wheel)
    yield root / "venv" / "bin"


def test_the_core_has_none_of_the_server_stack(core: Path) -> None:
    probe = f"import importlib.util as u; print(','.join(m for m in {SERVER_STACK!r} if u.find_spec(m)))"
    run = subprocess.run([core / "python", "-c", probe], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == ""
    assert subprocess.run([core / "python", "-c", "import pandas, kernel_agent.cli"], timeout=120).returncode == 0


def test_the_demo_runs_on_the_core_alone(core: Path, tmp_path: Path) -> None:
    run = subprocess.run(
        [core / "kernel-agent", "demo", "--out", tmp_path / "demo-run.ipynb", "--workspace", tmp_path / "demo-run"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=clean_environment(),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2,981 of 3,000 rows kept" in run.stdout  # printed by code that really ran in the kernel
    assert (tmp_path / "demo-run.ipynb").is_file()


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (("serve", "--demo", "--data-dir", "{tmp}"), "serve"),
        (("mcp", "--workspace", "{tmp}/ws"), "mcp"),
        (("keys", "list", "--data-dir", "{tmp}"), "serve"),
        (
            ("run", "a task", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--gateway", "http://127.0.0.1:9")
            + ("--workspace", "{tmp}/ws"),
            "gateway",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else value[0],
)
def test_a_front_end_without_its_extra_says_which_to_install(
    core: Path, tmp_path: Path, args: tuple[str, ...], extra: str
) -> None:
    command = [str(core / "kernel-agent"), *(a.format(tmp=tmp_path) for a in args)]
    run = subprocess.run(
        command, capture_output=True, text=True, timeout=60, env=clean_environment(), stdin=subprocess.DEVNULL
    )
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"pip install 'kernel-agent[{extra}]'" in run.stderr
    assert "Traceback" not in run.stderr
