"""Run the benchmarks and print one table (``make bench``).

    .venv/bin/python bench/run.py [--quick | --smoke] [--only NAME]... [--jobs N] [--markdown]

Not a test: nothing here asserts a timing; the table says what met its
target. ``BENCHMARKS`` is the registry: each entry names a module in this
folder that exposes ``NAME`` (a short word) and ``PARTS`` (an ordered dict of
part name to a function ``(quick: report.Scale) -> list[report.Row]``). To add a
benchmark, write such a module and append its name here.

The run uses a private temp dir and, at the end, checks that no kernel it
started and no file it made is left; a leak is reported and exits 3. A part
that raises is reported, the others still run, and the exit code is 1.
``--smoke`` (``make test``) runs every part once at tiny sizes: it fails only
when a part raises or leaks, never on a number (its numbers mean nothing).

``--jobs N`` runs the benchmark modules in N processes at once (each module
whole in one process, the costliest first) and prints their rows in registry
order: ``make test`` runs the smoke with two. The numbers of such a run share
the machine, so quote those of a run with one job.

A module whose parts share something costly (a JupyterLab, a browser) starts it
at its first use and exposes ``close()``: the runner calls it after the
module's last selected part, and again (a no-op then) when the run ends.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import datetime
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # also when run as ``python -m bench.run``
    sys.path.insert(0, str(HERE))

from report import Row, Scale, render

from kernel_agent.kernel.sandbox.template import close_templates

BENCHMARKS = [
    "bench_session",
    "bench_agent",
    "bench_models",
    "bench_sandbox",
    "bench_seccomp",
    "bench_mcp",
    "bench_plan",
    "bench_engine",
    "bench_kernels",
    "bench_stream",
    "bench_door",
    "bench_walk",
    "bench_safe",
    "bench_startup",
    "bench_languages",
    "bench_jupyter",
    "bench_eval",
    "bench_describe",
    "bench_host_python",
    "bench_seam",
    "bench_sources",
    "bench_template",
]

FAILED_EXIT = 1
LEAK_EXIT = 3

# With --jobs, modules start costliest first (their smoke seconds, quiet, 2026-11-27), so no long one
# starts last and runs alone; the rest follow in registry order.
COSTLIEST_FIRST = [
    "bench_startup",
    "bench_jupyter",
    "bench_session",
    "bench_kernels",
    "bench_template",
    "bench_seccomp",
    "bench_mcp",
]

Part = Callable[[Scale], list[Row]]


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, not {args.jobs}")
    scale = Scale.SMOKE if args.smoke else Scale.QUICK if args.quick else Scale.FULL
    modules = [importlib.import_module(name) for name in BENCHMARKS]
    selected = _select(modules, args.only or [])
    if args.rows_out is None:
        print(_machine(args.markdown), flush=True)
    if args.jobs > 1 and len({module for *_, module in selected}) > 1:
        return _in_processes(args, scale, selected)
    scratch = tempfile.mkdtemp(prefix="ka-bench-tmp-")
    tempfile.tempdir = scratch  # every session's runtime dir lands here, where we can check it
    rows: list[Row] = []
    failed: list[str] = []
    try:
        for index, (label, part, module) in enumerate(selected):
            started = time.monotonic()
            print(f"… {label}", file=sys.stderr, flush=True)
            try:
                rows += part(scale)
            except Exception:  # one broken part must not hide the others' rows
                traceback.print_exc()
                failed.append(label)
            if index + 1 == len(selected) or selected[index + 1][2] is not module:
                _close(module, label, failed)
            print(f"  {label} took {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
    finally:
        for module in {module for *_, module in selected}:
            _close(module, module.NAME, [])  # after a KeyboardInterrupt too: nothing shared is left running
        close_templates()  # the kernel templates this process started (each keeps a folder in ours until it stops)
        tempfile.tempdir = None
        leaks = _leaks(Path(scratch))
        shutil.rmtree(scratch, ignore_errors=True)
    if args.rows_out is not None:  # one of --jobs' processes: the parent prints the table
        Path(args.rows_out).write_text(json.dumps([dataclasses.asdict(row) for row in rows]), encoding="utf-8")
    else:
        _table(rows, scale, args.markdown)
    if failed:
        print(f"FAILED parts (no rows): {failed}", file=sys.stderr)
    if leaks:
        print(f"LEAK: {leaks}", file=sys.stderr)
        return LEAK_EXIT
    return FAILED_EXIT if failed else 0


def _table(rows: list[Row], scale: Scale, markdown: bool) -> None:
    print()
    print(render(rows, markdown=markdown))
    missed = [row.metric for row in rows if row.passed is False and scale is not Scale.SMOKE]
    print(f"\n{len(rows)} rows; {len(missed)} targets missed" + (f": {missed}" if missed else "") + f"; load {_load()}")


def _in_processes(args: argparse.Namespace, scale: Scale, selected: list[tuple[str, Part, ModuleType]]) -> int:
    """Run ``selected`` as one child process per module, ``--jobs`` at a time; print their rows in registry
    order. The exit code is the worst child's (a leak over a failed part)."""
    by_module: dict[str, list[str]] = {}
    for label, _, module in selected:
        by_module.setdefault(module.__name__, []).append(label)
    order = sorted(by_module, key=lambda name: COSTLIEST_FIRST.index(name) if name in COSTLIEST_FIRST else 99)
    sizes = {Scale.SMOKE: ["--smoke"], Scale.QUICK: ["--quick"]}.get(scale, [])
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-rows-"))

    def one(name: str) -> tuple[int, list[Row]]:
        out = scratch / f"{name}.json"
        only = [flag for label in by_module[name] for flag in ("--only", label)]
        command = [sys.executable, str(Path(__file__).resolve()), *sizes, *only, "--rows-out", str(out)]
        code = subprocess.run(command, stdout=subprocess.DEVNULL, check=False).returncode
        rows = [Row(**row) for row in json.loads(out.read_text(encoding="utf-8"))] if out.exists() else []
        return code, rows

    try:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            results = dict(zip(order, pool.map(one, order), strict=True))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _table([row for name in by_module for row in results[name][1]], scale, args.markdown)
    codes = {code for code, _ in results.values()}
    return LEAK_EXIT if LEAK_EXIT in codes else FAILED_EXIT if codes - {0} else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="kernel-agent benchmarks (not tests): prints a table.")
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--quick", action="store_true", help="few iterations: numbers to glance at, not to quote")
    sizes.add_argument(
        "--smoke", action="store_true", help="every part once at tiny sizes (CI): fails only when a part raises"
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help="run one benchmark (e.g. session) or one part (roundtrip, session.timeout); repeatable",
    )
    parser.add_argument(
        "--jobs", type=int, default=1, metavar="N", help="run the modules in N processes at once (make test: 2)"
    )
    parser.add_argument("--markdown", action="store_true", help="print a markdown table (for bench/README.md)")
    parser.add_argument("--rows-out", metavar="FILE", help=argparse.SUPPRESS)  # a --jobs process's rows, as JSON
    return parser


def _select(modules: list[ModuleType], only: list[str]) -> list[tuple[str, Part, ModuleType]]:
    """The (label, part, module) triples to run, in registry order (a module's parts together). Unknown names
    are an error."""
    every = [
        (f"{module.NAME}.{part}", part, module.NAME, function, module)
        for module in modules
        for part, function in module.PARTS.items()
    ]
    unknown = [name for name in only if not any(name in (label, part, bench) for label, part, bench, *_ in every)]
    if unknown:
        names = sorted({bench for _, _, bench, *_ in every} | {label for label, *_ in every})
        raise SystemExit(f"unknown --only {unknown}; choose from {names}")
    return [
        (label, function, module)
        for label, part, bench, function, module in every
        if not only or any(name in (label, part, bench) for name in only)
    ]


def _close(module: ModuleType, label: str, failed: list[str]) -> None:
    """Stop what ``module``'s parts shared (its optional ``close()``, idempotent); a failure fails ``label``."""
    close = getattr(module, "close", None)
    if close is None:
        return
    try:
        close()
    except Exception:
        traceback.print_exc()
        failed.append(label)


def _machine(markdown: bool) -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in _read("/proc/cpuinfo").splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "?",
    )
    versions = ", ".join(
        f"{name} {_version(name)}"
        for name in ("kernel-agent", "jupyter_client", "ipykernel", "pyzmq", "pandas", "matplotlib")
    )
    lines = [
        f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"machine: {os.cpu_count()} cores, {cpu}, {platform.system()} {platform.release()}",
        f"python {platform.python_version()}; {versions}",
        f"load average at start: {_load()}",
    ]
    return "\n".join(f"- {line}" if markdown else line for line in lines)


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "?"


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _leaks(scratch: Path) -> list[str]:
    """Kernels started by this process still running, and files left in our temp dir."""
    me = f"JPY_PARENT_PID={os.getpid()}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if me in environ and (b"ipykernel" in cmdline or b"kernel_agent.kernel.inside.launcher" in cmdline):
            found.append(f"kernel pid {entry.name}")
    found += [f"file {path}" for path in sorted(scratch.rglob("*"))]
    return found


if __name__ == "__main__":
    sys.exit(main())
