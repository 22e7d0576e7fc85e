"""Issue 48's benchmark: the isolated start of the Python processes we run. ``NAME`` and ``PARTS`` for ``run.py``.

* ``describer``: a fresh describer's first description of a small CSV (its process started, pandas and
  pyarrow imported, a child forked, the file described), started isolated by absolute path
  (``_python.python_argv``: ``-I .../_boot.py MODULE``) vs the start before issue 48 (``python -m MODULE``
  in the caller's folder); alternating, median of each; target ≤ 1.05×.
* ``kernel``: a sandboxed kernel's start to its first ``1+1``, the launcher isolated by absolute path
  (``kernelspec.launcher_argv``) vs ``python -m kernel_agent.kernel.inside.launcher``; alternating, median
  of each; target ≤ 1.05×.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from report import Row, median, scaled

import kernel_agent.agent.datafiles.describer as describer
import kernel_agent.kernel.kernelspec as kernelspec
from kernel_agent.kernel.session_sync import KernelSession

NAME = "host-python"


def _before_48(module: str, *args: str, interpreter: str | None = None, package_root: Path | None = None) -> list[str]:
    """How a module of ours was started before issue 48: ``-m``, from wherever the caller was."""
    return [interpreter or sys.executable, "-m", module, *args]


def _launcher_before_48(spec_argv: list[str], interpreter: str, package_root: Path | None = None) -> list[str]:
    args = spec_argv[spec_argv.index(kernelspec.LAUNCHER) + 1 :]
    return [interpreter, "-m", kernelspec.LAUNCHER, *args]


@contextmanager
def _swapped(module: object, name: str, replacement: object | None) -> Iterator[None]:
    original = getattr(module, name)
    if replacement is not None:
        setattr(module, name, replacement)
    try:
        yield
    finally:
        setattr(module, name, original)


def _alternate(
    count: int, measure: Callable[[object | None], float], before: object
) -> tuple[list[float], list[float]]:
    ours: list[float] = []
    theirs: list[float] = []
    for index in range(count):
        sides: list[tuple[object | None, list[float]]] = [(None, ours), (before, theirs)]
        for replacement, times in sides[:: 1 - 2 * (index % 2)]:
            times.append(measure(replacement))
    return ours, theirs


def describer_start(quick: bool) -> list[Row]:
    """A fresh describer's first description, isolated vs ``-m``."""
    folder = Path(tempfile.mkdtemp(prefix="ka-bench-host-python-"))
    try:
        csv = folder / "sales.csv"
        csv.write_text("region,revenue\n" + "".join(f"r{i % 7},{i}\n" for i in range(2_000)))

        def measure(replacement: object | None) -> float:
            zygote = describer._Zygote()
            with _swapped(describer, "python_argv", replacement):
                started = time.perf_counter()
                try:
                    text = describer._describe_with(zygote, csv)
                finally:
                    elapsed = time.perf_counter() - started
                    zygote.close()
            if "revenue" not in text:
                raise RuntimeError(f"the describer did not describe {csv.name}: {text[:200]}")
            return elapsed

        ours, theirs = _alternate(scaled(quick, 9, 3, 1), measure, _before_48)
        return [
            Row(
                "a fresh describer's first description: isolated by absolute path (-I _boot.py) vs python -m",
                median(ours),
                median(theirs),
                max_ratio=1.05,
            )
        ]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def kernel_start(quick: bool) -> list[Row]:
    """A sandboxed kernel's start to its first ``1+1``, the launcher isolated vs ``-m``."""
    folder = Path(tempfile.mkdtemp(prefix="ka-bench-host-python-"))
    try:

        def measure(replacement: object | None) -> float:
            with _swapped(kernelspec, "launcher_argv", replacement):
                started = time.perf_counter()
                with KernelSession(folder / f"ws-{time.monotonic_ns()}") as session:
                    if session.execute("1+1").result_text != "2":
                        raise RuntimeError("the kernel did not answer 1+1")
                    return time.perf_counter() - started

        ours, theirs = _alternate(scaled(quick, 9, 3, 1), measure, _launcher_before_48)
        return [
            Row(
                "a sandboxed kernel's start to 1+1: launcher isolated by absolute path vs python -m",
                median(ours),
                median(theirs),
                max_ratio=1.05,
            )
        ]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


PARTS = {"describer": describer_start, "kernel": kernel_start}
