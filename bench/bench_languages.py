"""Issue 23's benchmark: kernels of the user's choice. ``NAME`` and ``PARTS`` for ``run.py``.

* ``r``: cold start of an R kernel (IRkernel, ``--kernel ir``) to its first ``1+1``, vs our default
  Python kernel, alternating; both in the same sandbox (information: R's start is R's).
* ``env``: cold start of a Python kernel in a second environment (``--python``: a venv made here
  with ipykernel) vs the default, alternating (information).
* ``probe``: the package probe that gives the prompt its "Installed packages" line, per language:
  one round trip on a started kernel, run once per environment in a process; target ≤ 0.3 s.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import Row, Scale, median, scaled

from kernel_agent.agent.languages import PYTHON, R
from kernel_agent.kernel.session import AsyncKernelSession

NAME = "languages"


async def _first_answer(folder: Path, **options: object) -> float:
    started = time.perf_counter()
    async with AsyncKernelSession(folder, **options) as kernel:  # type: ignore[arg-type]
        result = await kernel.execute("1+1")
        elapsed = time.perf_counter() - started
    if "2" not in result.to_llm_text():
        raise RuntimeError(f"the kernel ({options}) answered 1+1 wrongly: {result}")
    return elapsed


async def _alternate(count: int, scratch: Path, options: dict[str, object]) -> tuple[list[float], list[float]]:
    ours: list[float] = []
    base: list[float] = []
    for index in range(count):
        for name in ("ours", "base") if index % 2 == 0 else ("base", "ours"):
            sample = await _first_answer(scratch / f"{name}-{index}", **(options if name == "ours" else {}))
            (ours if name == "ours" else base).append(sample)
    return ours, base


def r(quick: Scale) -> list[Row]:
    """R kernel cold start vs the default Python kernel, alternating."""
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-r-"))
    try:
        ours, base = asyncio.run(_alternate(scaled(quick, 6, 2, 1), scratch, {"kernel_name": "ir"}))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return [Row("R kernel (IRkernel) cold start to first 1+1 vs default Python kernel", median(ours), median(base))]


def env(quick: Scale) -> list[Row]:
    """A second environment's Python kernel cold start vs the default, alternating. A smoke run names this
    environment's own interpreter (the --python path runs; no new venv is built and filled)."""
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-env-"))
    try:
        if quick == Scale.SMOKE:
            ours, base = asyncio.run(_alternate(1, scratch, {"python": sys.executable}))
            return [Row("this environment's own Python as --python vs default (smoke)", median(ours), median(base))]
        venv = scratch / "venv"
        subprocess.run([str(Path(sys.base_prefix) / "bin" / "python3"), "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "ipykernel",
            ],
            check=True,
        )
        ours, base = asyncio.run(_alternate(scaled(quick, 6, 2, 1), scratch, {"python": str(venv / "bin" / "python")}))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return [Row("second-environment Python kernel (--python) cold start vs default", median(ours), median(base))]


def probe(quick: Scale) -> list[Row]:
    """The package probe on a started kernel, Python (user_expressions) and R (run quietly)."""
    return asyncio.run(_probe(scaled(quick, 10, 3, 1)))


async def _probe(count: int) -> list[Row]:
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-probe-"))
    rows = []
    try:
        for language, options in ((PYTHON, {}), (R, {"kernel_name": "ir"})):
            samples = []
            async with AsyncKernelSession(scratch / language.key, **options) as kernel:  # type: ignore[arg-type]
                for _ in range(count):
                    started = time.perf_counter()
                    if language.probe_prints:
                        found = language.parse_probe(await kernel.run_quietly(language.probe))
                    else:
                        found = language.parse_probe((await kernel.evaluate({"p": language.probe}))["p"])
                    samples.append(time.perf_counter() - started)
                if language is PYTHON and not any(entry.startswith("pandas ") for entry in found):
                    raise RuntimeError(f"the Python probe did not find pandas: {found}")
            rows.append(
                Row(
                    f"package probe for the prompt ({language.name}, once per environment)",
                    median(samples),
                    max_seconds=0.3,
                )
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return rows


PARTS = {"r": r, "env": env, "probe": probe}
