"""Issue 25's benchmark: how long the CLI takes to answer. ``NAME`` and ``PARTS`` for ``run.py``.

* ``cli``: wall time of a fresh ``kernel-agent --version``, ``--help`` and ``run --help`` (the console
  script next to this interpreter, else ``python -m kernel_agent.cli``), each against ``python -c pass``
  in the same run: the interpreter's own start-up, the floor no command can beat. Median of 10 (3 with
  ``--quick``); the commands and the baseline take turns, the order rotated each round, so background
  load hits all alike. The target is the issue's: at most 0.3 s.
* ``import nbformat`` (information): what the first command that reads or writes a notebook pays on
  top, in a fresh interpreter. nbformat imports jsonschema, which builds rfc3987_syntax's grammar at
  import when that package is installed (JupyterLab's dependencies bring it; ours do not).

The child processes import the same ``kernel_agent`` as this process (its folder goes first on
``PYTHONPATH``), so a worktree is measured as checked out.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from report import Row, median

import kernel_agent

NAME = "startup"

TARGET_SECONDS = 0.3
COMMANDS = {"kernel-agent --version": ["--version"], "kernel-agent --help": ["--help"],
            "kernel-agent run --help": ["run", "--help"]}
BASELINE = "python -c pass"


def _environment() -> dict[str, str]:
    source = str(Path(kernel_agent.__file__).resolve().parents[1])
    path = os.pathsep.join(part for part in (source, os.environ.get("PYTHONPATH", "")) if part)
    return {**os.environ, "PYTHONPATH": path}


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("kernel-agent")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "kernel_agent.cli"]


def _timed(argv: list[str], environment: dict[str, str], expect: str) -> float:
    """Seconds from spawn to exit of ``argv``; raises unless it exits 0 with ``expect`` in its output."""
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=environment, timeout=120)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or expect not in done.stdout:
        raise AssertionError(f"{argv} exited {done.returncode} without {expect!r}: {done.stderr[-500:]}")
    return elapsed


def _medians(runs: dict[str, tuple[list[str], str]], rounds: int) -> dict[str, float]:
    """The median seconds of each of ``runs`` (name -> argv, expected output), taking turns."""
    environment = _environment()
    for argv, expect in runs.values():  # warm-up, discarded: the page cache, the .pyc files
        _timed(argv, environment, expect)
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for index in range(rounds):
        turn = names[index % len(names):] + names[:index % len(names)]
        for name in turn:
            argv, expect = runs[name]
            times[name].append(_timed(argv, environment, expect))
    return {name: median(values) for name, values in times.items()}


def cli(quick: bool) -> list[Row]:
    python = [sys.executable]
    runs = {name: ([*_cli(), *args], "Usage" if "--help" in args else kernel_agent.__version__)
            for name, args in COMMANDS.items()}
    runs[BASELINE] = ([*python, "-c", "print('ok')"], "ok")
    runs["import nbformat"] = ([*python, "-c", "import nbformat; print('ok')"], "ok")
    medians = _medians(runs, 3 if quick else 10)
    floor = medians[BASELINE]
    rows = [Row(f"{name} vs {BASELINE}", medians[name], floor, max_seconds=TARGET_SECONDS) for name in COMMANDS]
    rows.append(Row(f"import nbformat vs {BASELINE} (what reading or writing a notebook adds)",
                    medians["import nbformat"], floor))
    return rows


PARTS = {"cli": cli}


if __name__ == "__main__":
    from report import render

    print(render(cli("--quick" in sys.argv)))
