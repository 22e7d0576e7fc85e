"""Issue 25's benchmark: how long the CLI takes to answer. ``NAME`` and ``PARTS`` for ``run.py``.

* ``cli``: wall time of a fresh ``kernel-agent --version``, ``--help`` and ``run --help`` (the console
  script next to this interpreter, else ``python -m kernel_agent.cli``), each against ``python -c pass``
  in the same run: the interpreter's own start-up, the floor no command can beat. Median of 10 (3 with
  ``--quick``); the commands and the baseline take turns, the order rotated each round, so background
  load hits all alike. The target is the issue's: at most 0.3 s.
* ``import nbformat`` (information): what the first command that reads or writes a notebook pays on
  top, in a fresh interpreter. nbformat imports jsonschema, which builds rfc3987_syntax's grammar at
  import when that package is installed (JupyterLab's dependencies bring it; ours do not); our
  ``kernel_agent._nbformat`` defers that grammar to its first use, which is the next row.
* ``servers``: from spawning ``kernel-agent serve`` to its first ``200`` on ``/health`` (plain, and with
  ``--pool 2``, whose kernels start in the background; ``/health`` answers while the app is still being
  imported, so a row also times the first ``/v1/info``, which waits for the whole app), and from spawning
  ``kernel-agent mcp`` (stdio)
  to its answer to ``initialize``; each server is then stopped (SIGTERM; stdin closed) and must exit 0.
  Median of 10 (3 with ``--quick``), taking turns with ``python -c pass``. Target: 1 s.
* ``magic``: ``%load_ext kernel_agent`` in a fresh kernel (a stock ``python3`` ipykernel, as in
  JupyterLab), timed as one execute, against ``1+1`` on the same kernel. Median of 10 kernels (3 with
  ``--quick``). Target: 1 s.

* ``first_request``: from spawning ``kernel-agent run`` (the scripted local model server from ``tests/``, an
  answer at once) to that server receiving the first model request, with the prompt made while the kernel
  starts, against the same run with the kernel named (``--kernel kernel-agent``), which asks once the
  kernel is up as every run did before issue 38; without data and with a 500-row CSV; and the same from
  ``AsyncAgent.run`` in this process (the SDK imported: what the run itself adds). Median of 5 (3 with
  ``--quick``), taking turns. Target: 0.5 s on a quiet machine.
  The chat's, in the same turns: from a first message to a fresh JupyterLab chat conversation (the persona's
  ``_Conversation``, in this process: a running server) to the first model request, its kernel started by
  the run, against the CLI's (target: no later, ratio at most 1), and against the same conversation with
  the kernel named (it asks once its kernel is up, as the chat did before). A scripted model answers at
  once, so the first token follows the request by one local round trip in both.

The child processes import the same ``kernel_agent`` as this process (its folder goes first on
``PYTHONPATH``), so a worktree is measured as checked out.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from report import Row, Scale, median, scaled

import kernel_agent

TESTS = Path(__file__).resolve().parent.parent / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from openai_server import OpenAIServer, Reply  # the tests' scripted model server
from ports import listening_now  # the tests' port helpers

NAME = "startup"

TARGET_SECONDS = 0.3
COMMANDS = {
    "kernel-agent --version": ["--version"],
    "kernel-agent --help": ["--help"],
    "kernel-agent run --help": ["run", "--help"],
}
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
        turn = names[index % len(names) :] + names[: index % len(names)]
        for name in turn:
            argv, expect = runs[name]
            times[name].append(_timed(argv, environment, expect))
    return {name: median(values) for name, values in times.items()}


def cli(quick: Scale) -> list[Row]:
    python = [sys.executable]
    runs = {
        name: ([*_cli(), *args], "Usage" if "--help" in args else kernel_agent.__version__)
        for name, args in COMMANDS.items()
    }
    runs[BASELINE] = ([*python, "-c", "print('ok')"], "ok")
    runs["import nbformat"] = ([*python, "-c", "import nbformat; print('ok')"], "ok")
    runs["ours"] = ([*python, "-c", "import kernel_agent._nbformat; print('ok')"], "ok")
    medians = _medians(runs, scaled(quick, 10, 3, 1))
    floor = medians[BASELINE]
    rows = [Row(f"{name} vs {BASELINE}", medians[name], floor, max_seconds=TARGET_SECONDS) for name in COMMANDS]
    rows.append(
        Row(
            f"import nbformat vs {BASELINE} (what reading or writing a notebook adds)",
            medians["import nbformat"],
            floor,
        )
    )
    rows.append(
        Row(
            "  ↳ the same through kernel_agent._nbformat (the grammar deferred) vs import nbformat",
            medians["ours"],
            medians["import nbformat"],
        )
    )
    return rows


def _answered(port: int, path: str) -> bool:
    """True once the server on ``port`` answers ``path`` with 200; False while nothing listens."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", path)
        return connection.getresponse().status == 200
    except (ConnectionRefusedError, ConnectionResetError):
        return False
    finally:
        connection.close()


def _stopped(process: subprocess.Popen[bytes], argv: list[str], signalled: bool = False) -> None:
    """Wait for ``process`` to exit; raises unless it exits 0, or by the SIGTERM it was sent (uvicorn
    shuts down gracefully, then re-raises the signal)."""
    code = process.wait(timeout=60)
    if code not in ((0, -signal.SIGTERM) if signalled else (0,)):
        stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
        raise AssertionError(f"{argv} exited {code}: {stderr[-800:]}")


def _serve_ready(environment: dict[str, str], root: Path, extra: tuple[str, ...] = (), path: str = "/health") -> float:
    """Seconds from spawning ``kernel-agent serve`` to its first 200 on ``path``."""
    argv = [
        *_cli(),
        "serve",
        "--no-auth",
        "--port",
        "0",  # the OS picks a free port and it stays ours: read back from the process once it listens
        "--data-dir",
        str(root / f"serve-{time.monotonic_ns()}"),
        "--model",
        "bench-model",
        "--base-url",
        "http://127.0.0.1:9/v1",
        *extra,
    ]
    started = time.perf_counter()
    process = subprocess.Popen(argv, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        port = None
        while (port := port or next(iter(listening_now(process)), None)) is None or not _answered(port, path):
            if process.poll() is not None:
                raise AssertionError(f"{argv} exited {process.returncode} before answering")
            time.sleep(0.002)  # polling resolution, not a wait for anything in particular
        elapsed = time.perf_counter() - started
    finally:
        process.send_signal(signal.SIGTERM)
        _stopped(process, argv, signalled=True)
    return elapsed


_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
}


def _mcp_ready(environment: dict[str, str], root: Path) -> float:
    """Seconds from spawning ``kernel-agent mcp`` (stdio) to its answer to ``initialize``."""
    argv = [*_cli(), "mcp", "--workspace", str(root / f"mcp-{time.monotonic_ns()}")]
    started = time.perf_counter()
    process = subprocess.Popen(
        argv, env=environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(json.dumps(_INITIALIZE).encode() + b"\n")
        process.stdin.flush()
        answer = json.loads(process.stdout.readline() or b"null")
        elapsed = time.perf_counter() - started
    finally:
        process.stdin.close()  # the client goes away: the server ends its session and exits
        _stopped(process, argv)
    if not isinstance(answer, dict) or answer.get("id") != 1 or "serverInfo" not in answer.get("result", {}):
        raise AssertionError(f"not an initialize answer: {answer!r}")
    return elapsed


def servers(quick: Scale) -> list[Row]:
    environment = _environment()
    python = [sys.executable, "-c", "print('ok')"]
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as scratch:
        root = Path(scratch)
        timers: dict[str, Callable[[], float]] = {
            "serve": lambda: _serve_ready(environment, root),
            "serve --pool 2": lambda: _serve_ready(environment, root, ("--pool", "2")),
            "serve, /v1/info": lambda: _serve_ready(environment, root, path="/v1/info"),
            "mcp": lambda: _mcp_ready(environment, root),
            BASELINE: lambda: _timed(python, environment, "ok"),
        }
        medians = _taking_turns(timers, scaled(quick, 10, 3, 1), warm=quick != Scale.SMOKE)
    floor = medians[BASELINE]
    return [
        Row(f"kernel-agent serve: spawn to /health answered vs {BASELINE}", medians["serve"], floor, max_seconds=1.0),
        Row(
            f"  ↳ with --pool 2 (kernels start in the background) vs {BASELINE}",
            medians["serve --pool 2"],
            floor,
            max_seconds=1.0,
        ),
        Row(
            f"  ↳ spawn to the first /v1/info answered (the whole app up) vs {BASELINE}",
            medians["serve, /v1/info"],
            floor,
        ),
        Row(
            f"kernel-agent mcp (stdio): spawn to initialize answered vs {BASELINE}",
            medians["mcp"],
            floor,
            max_seconds=1.0,
        ),
    ]


def _taking_turns(timers: dict[str, Callable[[], float]], rounds: int, warm: bool = True) -> dict[str, float]:
    """The median of each timer over ``rounds``, after one discarded warm-up each (unless not ``warm``), the order
    rotated."""
    for timer in timers.values() if warm else ():
        timer()
    times: dict[str, list[float]] = {name: [] for name in timers}
    names = list(timers)
    for index in range(rounds):
        for name in names[index % len(names) :] + names[: index % len(names)]:
            times[name].append(timers[name]())
    return {name: median(values) for name, values in times.items()}


async def _load_ext_once(environment: dict[str, str]) -> tuple[float, float]:
    """One fresh stock ipykernel: seconds for ``%load_ext kernel_agent``, and for ``1+1`` after it."""
    from jupyter_client.manager import start_new_async_kernel

    manager, client = await start_new_async_kernel(kernel_name="python3", env=environment)
    try:
        timings = []
        for code in ("%load_ext kernel_agent", "1+1"):
            started = time.perf_counter()
            reply = await client.execute_interactive(code, timeout=60)
            timings.append(time.perf_counter() - started)
            if reply["content"]["status"] != "ok":
                raise AssertionError(f"{code!r} failed in the kernel: {reply['content']}")
        return timings[0], timings[1]
    finally:
        client.stop_channels()
        await manager.shutdown_kernel(now=True)


def magic(quick: Scale) -> list[Row]:
    environment = _environment()
    loads, plain = [], []
    asyncio.run(_load_ext_once(environment))  # warm-up, discarded
    for _ in range(scaled(quick, 10, 3, 1)):
        load, one = asyncio.run(_load_ext_once(environment))
        loads.append(load)
        plain.append(one)
    return [
        Row(
            "%load_ext kernel_agent in a fresh stock kernel vs 1+1 there", median(loads), median(plain), max_seconds=1.0
        )
    ]


FIRST_REQUEST_TARGET_S = 0.5  # issue 38 item 11, on a quiet machine
KERNEL_NAMED = ("--kernel", "kernel-agent")  # the same kernel, named: its language is then not known ahead


def _first_request_once(environment: dict[str, str], root: Path, extra: tuple[str, ...], data: Path | None) -> float:
    """Seconds from spawning ``kernel-agent run`` to the scripted model server receiving its first request."""
    asked: list[float] = []

    def first(_body: dict[str, object]) -> Reply:
        asked.append(time.perf_counter())
        return Reply("<Answer>done</Answer>")

    folder = Path(tempfile.mkdtemp(prefix="first-request-", dir=root))
    with OpenAIServer([first]) as server:
        argv = [*_cli(), "run", "How many rows?", "--model", "m", "--base-url", server.base_url]
        argv += ["--protocol", "tags", "--workspace", str(folder / "ws"), "--out", str(folder / "run.ipynb"), "-q"]
        argv += [*extra, *(["--data", str(data)] if data is not None else [])]
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, env=environment, timeout=300)
    if done.returncode != 0 or not asked:
        raise AssertionError(f"{argv} exited {done.returncode}: {done.stderr[-500:]}")
    return asked[0] - started


async def _first_request_in_process(root: Path, kernel: str | None) -> float:
    """Seconds from ``AsyncAgent.run`` to the scripted model server receiving its first request (this process
    has imported the SDK already; the agent and its client are new)."""
    from kernel_agent import AsyncAgent

    asked: list[float] = []

    def first(_body: dict[str, object]) -> Reply:
        asked.append(time.perf_counter())
        return Reply("<Answer>done</Answer>")

    folder = Path(tempfile.mkdtemp(prefix="first-request-", dir=root))
    with OpenAIServer([first]) as server:
        async with AsyncAgent("m", server.base_url, "sk-bench", "tags", kernel=kernel or None) as agent:
            started = time.perf_counter()
            await agent.run("How many rows?", [], folder / "ws", folder / "run.ipynb")
    return asked[0] - started


async def _chat_first_request(root: Path, kernel: str | None) -> float:
    """Seconds from a first message to a fresh chat conversation (the JupyterLab persona's, its kernel not yet
    started) to the scripted model server receiving its first request."""
    from kernel_agent.jupyter.live import LiveNotebook
    from kernel_agent.jupyter.persona import _Conversation

    asked: list[float] = []

    def first(_body: dict[str, object]) -> Reply:
        asked.append(time.perf_counter())
        return Reply("<Answer>done</Answer>")

    folder = Path(tempfile.mkdtemp(prefix="chat-first-request-", dir=root))
    with OpenAIServer([first]) as server:
        options: dict[str, Any] = {"model": "m", "base_url": server.base_url, "api_key": "sk-bench", "protocol": "tags"}
        conversation = _Conversation(
            {**options, **({"kernel": kernel} if kernel else {})}, folder, "chat.ipynb", cast(LiveNotebook, None)
        )
        try:
            started = time.perf_counter()
            async for _event in conversation.stream("How many rows?", []):
                pass
        finally:
            await conversation.close()
    return asked[0] - started


def first_request(quick: Scale) -> list[Row]:
    """Issue 38 item 11: from spawning ``kernel-agent run`` to the scripted model's first request, with the
    prompt made while the kernel starts, against the same run whose kernel is named (``--kernel
    kernel-agent``: its language is not known ahead, so the run asks once the kernel is up, as every run
    did before), taking turns; without data and with a small CSV (the describer's first parse)."""
    environment = {**_environment(), "OPENAI_API_KEY": "sk-bench"}
    root = Path(tempfile.mkdtemp(prefix="ka-first-request-"))
    try:
        csv = root / "sales.csv"
        csv.write_text("region,amount\n" + "".join(f"r{i % 7},{i}\n" for i in range(500)), encoding="utf-8")
        timers: dict[str, Callable[[], float]] = {
            "ahead": lambda: _first_request_once(environment, root, (), None),
            "waits": lambda: _first_request_once(environment, root, KERNEL_NAMED, None),
            "ahead, csv": lambda: _first_request_once(environment, root, (), csv),
            "waits, csv": lambda: _first_request_once(environment, root, KERNEL_NAMED, csv),
            "run, ahead": lambda: asyncio.run(_first_request_in_process(root, None)),
            "run, waits": lambda: asyncio.run(_first_request_in_process(root, KERNEL_NAMED[1])),
            "chat, ahead": lambda: asyncio.run(_chat_first_request(root, None)),
            "chat, waits": lambda: asyncio.run(_chat_first_request(root, KERNEL_NAMED[1])),
        }
        medians = _taking_turns(timers, scaled(quick, 5, 3, 1), warm=scaled(quick, True, True, False))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return [
        Row(
            "first model request after `kernel-agent run` starts (scripted model) vs asking once the kernel is up",
            medians["ahead"],
            medians["waits"],
            max_seconds=FIRST_REQUEST_TARGET_S,
        ),
        Row("  ↳ the same with a 500-row CSV (described first)", medians["ahead, csv"], medians["waits, csv"]),
        Row(
            "  ↳ from `AsyncAgent.run` (SDK imported, no data) vs asking once the kernel is up",
            medians["run, ahead"],
            medians["run, waits"],
            max_seconds=FIRST_REQUEST_TARGET_S,
        ),
        Row(
            "the chat's first model request after a first message (fresh conversation) vs the CLI's after `run`",
            medians["chat, ahead"],
            medians["ahead"],
            max_ratio=1.0,
        ),
        Row(
            "  ↳ the chat's vs its conversation asking once the kernel is up (before issue 38)",
            medians["chat, ahead"],
            medians["chat, waits"],
        ),
    ]


PARTS = {"cli": cli, "servers": servers, "magic": magic, "first_request": first_request}


if __name__ == "__main__":
    from report import render

    quick = Scale.QUICK if "--quick" in sys.argv else Scale.FULL
    print(render([row for part in PARTS.values() for row in part(quick)]))
