"""``make demo`` on a fresh clone, as a new user runs it: the venv it builds holds the demo's install alone
(the core and ``analysis``, no test or docs tooling), the next steps it prints run verbatim in a fresh shell
with no venv on PATH, it leaves ``git status`` clean, and ``make test`` would install the test stack over it.

The clone is this working tree's files as git would clone them (tracked, and untracked but not ignored, so a
new file counts before its commit), committed in a fresh repository. Slow (a venv, the analysis packages from
pip's cache, real kernels in the demo and the replay): kernel tier.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from installs import clean_environment

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parent.parent
# The test and docs tooling `make demo` must not install (what `.[test]` brings on top of the demo's install);
# by name, since the core's nbconvert brings `jupyterlab-pygments`, which is neither.
TOOLING = {"pytest", "playwright", "mkdocs", "ruff", "mypy", "jupyterlab", "jupyter-server", "jupyter-ai-router"}
TOOLING_FAMILIES = ("pytest-", "mkdocs-")


@dataclass(frozen=True)
class Demo:
    clone: Path
    output: str


def fresh_clone(target: Path) -> Path:
    """This tree's files as a clone of them would hold them, committed in a repository of their own."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the working tree is not in the clone
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    git(target, "init", "--quiet")
    git(target, "add", "--all")
    git(target, "-c", "user.name=test", "-c", "user.email=test@example.invalid", "commit", "--quiet", "-m", "clone")
    return target


def git(where: Path, *args: str) -> str:
    run = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def fresh_shell_environment() -> dict[str, str]:
    """What a new login shell has: a PATH without our venv, HOME, a UTF-8 locale; nothing else of ours."""
    inherited = clean_environment()
    return {"PATH": inherited["PATH"], "HOME": inherited.get("HOME", "/"), "LANG": "C.UTF-8"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """``make demo`` run once in a fresh clone, with no venv of ours on PATH and no PYTHONPATH."""
    clone = fresh_clone(tmp_path_factory.mktemp("clone"))
    env = {k: v for k, v in clean_environment().items() if k != "PYTHONPATH"}
    run = subprocess.run(["make", "demo"], cwd=clone, env=env, capture_output=True, text=True, timeout=800)
    assert run.returncode == 0, run.stdout + run.stderr
    yield Demo(clone, run.stdout)


def test_the_printed_next_steps_run_as_printed_in_a_fresh_shell(demo: Demo) -> None:
    (next_line,) = [line for line in demo.output.splitlines() if line.startswith("Next:")]
    printed = re.findall(r"`([^`]+)`", next_line)
    assert len(printed) == 2, next_line
    env = fresh_shell_environment()
    assert shutil.which("kernel-agent", path=env["PATH"]) is None  # so the bare name would not run
    for command in printed:
        assert command.startswith(".venv/bin/kernel-agent "), command
        run = subprocess.run(
            ["bash", "-c", command], cwd=demo.clone, env=env, capture_output=True, text=True, timeout=300
        )
        assert run.returncode == 0, f"{command}\n{run.stdout}{run.stderr}"


def test_the_demo_venv_holds_no_test_or_docs_tooling(demo: Demo) -> None:
    probe = "import importlib.metadata as m; print('\\n'.join(sorted(d.metadata['Name'] for d in m.distributions())))"
    run = subprocess.run(
        [demo.clone / ".venv" / "bin" / "python", "-c", probe], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    installed = {re.sub(r"[-_.]+", "-", name).lower() for name in run.stdout.split()}
    assert {"kernel-agent", "pandas", "scipy", "statsmodels", "scikit-learn", "seaborn"} <= installed
    assert sorted(name for name in installed if name in TOOLING or name.startswith(TOOLING_FAMILIES)) == []


def test_make_demo_leaves_git_status_clean(demo: Demo) -> None:
    assert (demo.clone / "notebooks" / "demo-run.ipynb").is_file()
    assert git(demo.clone, "status", "--porcelain", "--untracked-files=all") == ""


def test_make_test_installs_the_test_stack_over_the_demo_venv(demo: Demo) -> None:
    planned = subprocess.run(
        ["make", "--dry-run", "test"], cwd=demo.clone, capture_output=True, text=True, timeout=60
    ).stdout
    assert "pip install --quiet -e '.[analysis,test]'" in planned
    assert "-m venv" not in planned  # on top of the demo's venv, not a new one
