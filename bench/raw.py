"""Baselines written straight against jupyter_client, with none of our layer.

Each coroutine is what a careful caller of jupyter_client writes by hand:
send ``execute_request``, read iopub until this request's ``idle``, read its
``execute_reply``. The session benchmark runs them on the same kernel as our
session (through the session's own client, on the session's own loop, so no
zmq socket crosses loops) or on a stock ipykernel, so the difference between
a baseline and our number is our layer.
"""

from __future__ import annotations

import os
import queue
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager

__all__ = ["cold_start", "iopub_messages", "roundtrip", "stop_at_deadline", "timed_roundtrips"]


async def roundtrip(client: AsyncKernelClient, code: str, timeout: float = 60.0) -> dict[str, Any]:
    """Execute ``code`` and return its ``execute_reply`` content."""
    msg_id = client.execute(code)
    await _until_idle(client, msg_id, timeout)
    return await _reply(client, msg_id, timeout)


async def iopub_messages(client: AsyncKernelClient, code: str, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Execute ``code`` and return the iopub messages of that request, ``idle`` last."""
    msg_id = client.execute(code)
    messages = await _until_idle(client, msg_id, timeout)
    await _reply(client, msg_id, timeout)
    return messages


async def timed_roundtrips(client: AsyncKernelClient, code: str, count: int) -> list[float]:
    """``count`` round-trips of ``code``, each timed on the client's own loop."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await roundtrip(client, code)
        times.append(time.perf_counter() - started)
    return times


async def stop_at_deadline(
    manager: AsyncKernelManager, client: AsyncKernelClient, code: str, timeout: float, *, restart: bool
) -> float:
    """Run ``code``; at ``timeout`` interrupt (or restart) at once; return seconds past the deadline.

    The floor for our timeout ladder: no grace period, no second attempt, no
    death checks. With ``restart`` the deadline goes straight to
    ``restart_kernel(now=True)`` and ``wait_for_ready``.
    """
    msg_id = client.execute(code)
    deadline = time.perf_counter() + timeout
    while (left := deadline - time.perf_counter()) > 0:
        try:
            await client.get_iopub_msg(timeout=left)
        except queue.Empty:
            pass
    if restart:
        await manager.restart_kernel(now=True)
        await client.wait_for_ready(timeout=60)
    else:
        await manager.interrupt_kernel()
        await _until_idle(client, msg_id, 10.0)
        await _reply(client, msg_id, 10.0)
    return time.perf_counter() - deadline


async def cold_start(code: str, runtime_dir: Path, ipython_dir: Path) -> float:
    """Seconds from nothing to ``code`` done on a stock ``python3`` ipykernel; shuts it down after.

    ``ipython_dir`` keeps the stock kernel's profile and history database out
    of the user's home.
    """
    started = time.perf_counter()
    manager = AsyncKernelManager(kernel_name="python3")
    manager.connection_file = str(runtime_dir / f"kernel-{uuid.uuid4().hex}.json")
    env = {**os.environ, "IPYTHONDIR": str(ipython_dir)}
    await manager.start_kernel(env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = manager.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        reply = await roundtrip(client, code)
        elapsed = time.perf_counter() - started
        if reply.get("status") != "ok":
            raise RuntimeError(f"stock kernel failed on {code!r}: {reply}")
        return elapsed
    finally:
        client.stop_channels()
        await manager.shutdown_kernel()


async def _until_idle(client: AsyncKernelClient, msg_id: str, timeout: float) -> list[dict[str, Any]]:
    end = time.monotonic() + timeout
    mine = []
    while True:
        msg = await _next(client.get_iopub_msg, end, "idle", msg_id)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        mine.append(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return mine


async def _reply(client: AsyncKernelClient, msg_id: str, timeout: float) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while True:
        msg = await _next(client.get_shell_msg, end, "execute_reply", msg_id)
        if msg["parent_header"].get("msg_id") == msg_id:
            content: dict[str, Any] = msg["content"]
            return content


async def _next(get: Callable[..., Awaitable[dict[str, Any]]], end: float, what: str, msg_id: str) -> dict[str, Any]:
    try:
        return await get(timeout=max(end - time.monotonic(), 0.0))
    except queue.Empty:
        raise RuntimeError(f"no {what} for {msg_id} in time") from None
