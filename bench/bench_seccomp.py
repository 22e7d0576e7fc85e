"""Issue 42's benchmark: what the system-call filter and the nested-namespace ban cost. ``NAME``/``PARTS``.

Filtered is the default sandbox (``Limits()``: bwrap with ``--disable-userns``,
``--assert-userns-disabled`` and ``--add-seccomp-fd``, the filter opened by the shell that joins the
cgroups); unfiltered is the same sandbox launched as before issue 42 (those flags and the open taken
out of the kernel's launch command while it starts; nothing else differs).

* ``start``: a new session to its first ``1+1``, filtered vs unfiltered, alternating which goes
  first; target: the filter adds at most 5 ms (median difference).
* ``roundtrip``: ``1+1`` on a filtered and an unfiltered session open side by side, in alternating
  blocks of 10; target ≤ 1.05× (nothing measurable).
* ``launch``: bwrap with our whole argv running ``/bin/true``, with the filter (prefix and flags) vs
  without, 200 alternating; target: at most 5 ms more (median difference). The same cost as in
  ``start``, without a kernel's second of start-up and its noise around it.
* ``syscalls``: CPU time of 200,000 calls inside the kernel (``os.getppid``, ``os.stat``, a socket made and
  closed), filtered vs unfiltered session; information.
* ``compute``: bench_sandbox's ten analysis rounds on a ~50 MB CSV, filtered vs unfiltered session,
  interleaved, five repetitions (one in ``--quick``); both sides' printed results must agree;
  target ≤ 1.05×; and the kernel's own CPU time over the rounds (information).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from bench_agent import _make_csv
from bench_sandbox import _ROUNDS, _SETUP
from report import Row, median, p95, scaled

from kernel_agent.kernel import kernelspec
from kernel_agent.kernel.sandbox import bwrap as bwrap_module
from kernel_agent.kernel.sandbox import seccomp
from kernel_agent.kernel.sandbox.cgroup import join_prefix
from kernel_agent.kernel.session_sync import KernelSession

NAME = "seccomp"
_NEW_FLAGS = ("--disable-userns", "--assert-userns-disabled")


def _unfiltered_argv(binary: Path, view: bwrap_module.SandboxView, **options: Any) -> list[str]:
    """bwrap's arguments as they were before the filter: no seccomp, nested namespaces."""
    argv = bwrap_module.bwrap_argv(binary, view, **options)
    at = argv.index("--add-seccomp-fd")
    del argv[at : at + 2]
    return [arg for arg in argv if arg not in _NEW_FLAGS]


def _number(text: str | None) -> float:
    """A measurement the kernel printed as its cell's value. Raises ``RuntimeError`` when there is none."""
    if text is None:
        raise RuntimeError("the cell gave no value")
    return float(text)


@contextlib.contextmanager
def _unfiltered() -> Iterator[None]:
    """Sessions started inside get the sandbox as it was before the filter (``_unfiltered_argv``)."""
    with (
        mock.patch.object(kernelspec, "bwrap_argv", _unfiltered_argv),
        mock.patch.object(kernelspec, "_write_filter", lambda _folder: None),
    ):
        yield


def _session(workspace: Path, filtered: bool) -> KernelSession:
    with contextlib.nullcontext() if filtered else _unfiltered():
        # Started cold, both: the filter's cost is bwrap's to load (a forked kernel loads it itself, always).
        session = KernelSession(workspace, template=False).start()
    seccomp = session.execute("[l.split()[1] for l in open('/proc/self/status') if l.startswith('Seccomp:')][0]")
    if seccomp.result_text != ("'2'" if filtered else "'0'"):
        session.close()
        raise RuntimeError(f"the {'filtered' if filtered else 'unfiltered'} session has Seccomp {seccomp.result_text}")
    return session


# ------------------------------------------------------------------ start
def start(quick: bool) -> list[Row]:
    """Seconds from nothing to ``1+1`` done, filtered and not, alternating which goes first."""
    times: dict[bool, list[float]] = {True: [], False: []}
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-seccomp-"))
    try:
        KernelSession(scratch / "warm").start().close()  # the per-process probes, out of the timings
        for index in range(scaled(quick, 12, 3, 1)):
            for filtered in (True, False) if index % 2 == 0 else (False, True):
                started = time.perf_counter()
                with contextlib.nullcontext() if filtered else _unfiltered():
                    session = KernelSession(scratch / f"{filtered}-{index}").start()
                with session:
                    if session.execute("1+1").result_text != "2":
                        raise RuntimeError("a session answered wrongly")
                    times[filtered].append(time.perf_counter() - started)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ours, theirs = median(times[True]), median(times[False])
    return [
        Row("session start to first 1+1: seccomp filter + no nested userns vs the sandbox without", ours, theirs),
        Row("  ↳ what the filter adds to a start (median difference)", ours - theirs, max_seconds=0.005),
    ]


# ------------------------------------------------------------------ round-trip
def roundtrip(quick: bool) -> list[Row]:
    """``1+1`` round-trips, filtered vs unfiltered, in alternating blocks of 10 on two open sessions."""
    samples: dict[bool, list[float]] = {True: [], False: []}
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-seccomp-"))
    try:
        with _session(scratch / "filtered", True) as filtered, _session(scratch / "unfiltered", False) as plain:
            sessions = {True: filtered, False: plain}
            for block in range(scaled(quick, 100, 10, 1)):
                for side in (True, False) if block % 2 == 0 else (False, True):
                    for _ in range(10):
                        started = time.perf_counter()
                        result = sessions[side].execute("1+1")
                        samples[side].append(time.perf_counter() - started)
                        if result.result_text != "2":
                            raise RuntimeError("a session answered wrongly")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return [
        Row(
            "1+1 round trip, median: filtered vs unfiltered sandbox",
            median(samples[True]),
            median(samples[False]),
            max_ratio=1.05,
        ),
        Row("  ↳ p95", p95(samples[True]), p95(samples[False])),
    ]


# ------------------------------------------------------------------ compute
def _analysis(workspace: Path, filtered: bool) -> tuple[float, float, list[str]]:
    """Wall seconds of the ten rounds, the kernel's own CPU seconds over them, and what they printed."""
    with _session(workspace, filtered) as session:
        session.execute(_SETUP + "\nimport time as _bench_time\n_bench_cpu = _bench_time.process_time()")
        started, outputs = time.perf_counter(), []
        for code in _ROUNDS:
            result = session.execute(code, timeout=600)
            if result.status != "ok":
                raise RuntimeError(f"round failed: {result.to_llm_text()}")
            outputs.append(result.stdout)
        elapsed = time.perf_counter() - started
        cpu = _number(session.execute("_bench_time.process_time() - _bench_cpu").result_text)
        return elapsed, cpu, outputs


def compute(quick: bool) -> list[Row]:
    """Ten analysis rounds on a ~50 MB CSV: filtered vs unfiltered sandbox, interleaved."""
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-seccomp-"))
    times: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    try:
        csv = scratch / "big.csv"
        _make_csv(csv, scaled(quick, 930_000, 60_000, 2_000))
        size_mb = csv.stat().st_size / 1e6
        for index in range(1 if quick else 5):
            printed: dict[bool, list[str]] = {}
            for filtered in (True, False) if index % 2 == 0 else (False, True):
                workspace = scratch / f"{filtered}-{index}"
                workspace.mkdir()
                shutil.copy(csv, workspace / "big.csv")
                elapsed, used, printed[filtered] = _analysis(workspace, filtered)
                times[filtered].append(elapsed)
                cpu[filtered].append(used)
            if printed[True] != printed[False]:
                raise RuntimeError("the filtered and the unfiltered session printed different results")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return [
        Row(
            f"10-round analysis of a {size_mb:.0f} MB CSV: filtered vs unfiltered sandbox",
            median(times[True]),
            median(times[False]),
            max_ratio=1.05,
        ),
        Row("  ↳ the kernel's own CPU time over the ten rounds", median(cpu[True]), median(cpu[False])),
    ]


# ------------------------------------------------------------------ launch
def launch(quick: bool) -> list[Row]:
    """bwrap to ``/bin/true`` with our full argv: with the filter prefix and flags vs without, alternating.
    What the filter adds to every kernel start, without the kernel's own start (~1 s) around it."""
    binary = bwrap_module.require_bwrap()
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-seccomp-"))
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        (scratch / "ws").mkdir()
        (scratch / "sockets").mkdir()
        (scratch / "connection.json").write_text("{}")
        view = bwrap_module.SandboxView(scratch / "ws", scratch / "sockets", scratch / "connection.json", network=False)
        program = scratch / "seccomp.bpf"
        program.write_bytes(seccomp.require_filter().code)
        joins = join_prefix([])  # the cgroup joins' shell (no cgroup here), with or without the filter's open
        filtered = [
            *join_prefix([], (seccomp.SECCOMP_FD, program)),
            *bwrap_module.bwrap_argv(binary, view),
            "/bin/true",
        ]
        plain = [*joins, *_unfiltered_argv(binary, view), "/bin/true"]
        commands = {True: filtered, False: plain}
        for index in range(scaled(quick, 200, 20, 2)):
            for side in (True, False) if index % 2 == 0 else (False, True):
                started = time.perf_counter()
                subprocess.run(commands[side], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                times[side].append(time.perf_counter() - started)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ours, theirs = median(times[True]), median(times[False])
    return [
        Row(
            "cgroup-join shell + bwrap to /bin/true, our argv: with the filter (its open + 3 flags) vs without",
            ours,
            theirs,
        ),
        Row("  ↳ what the filter adds to a launch (median difference)", ours - theirs, max_seconds=0.005),
    ]


# ------------------------------------------------------------------ syscalls
_CALLS = {
    "os.getppid() (a call the kernel's filter cache allows outright)": "os.getppid()",
    "os.stat('.')": "os.stat('.')",
    "socket.socket().close() (a call whose arguments the filter reads)": "socket.socket().close()",
}


def syscalls(quick: bool) -> list[Row]:
    """CPU time of many calls inside the kernel, filtered vs unfiltered session, alternating."""
    count = scaled(quick, 200_000, 20_000, 2_000)
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-seccomp-"))
    per_call: dict[str, dict[bool, list[float]]] = {name: {True: [], False: []} for name in _CALLS}
    try:
        with _session(scratch / "filtered", True) as filtered, _session(scratch / "unfiltered", False) as plain:
            sessions = {True: filtered, False: plain}
            for session in sessions.values():
                session.execute("import os, socket, time")
            for index in range(scaled(quick, 7, 3, 1)):
                for name, call in _CALLS.items():
                    for side in (True, False) if index % 2 == 0 else (False, True):
                        code = f"_t = time.process_time()\nfor _ in range({count}): {call}\ntime.process_time() - _t"
                        result = sessions[side].execute(code, timeout=600)
                        per_call[name][side].append(_number(result.result_text))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return [
        Row(f"kernel CPU for {count:,} × {name}: filtered vs unfiltered", median(by[True]), median(by[False]))
        for name, by in per_call.items()
    ]


PARTS = {"start": start, "launch": launch, "roundtrip": roundtrip, "syscalls": syscalls, "compute": compute}
