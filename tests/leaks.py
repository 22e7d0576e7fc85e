"""Pytest plugin: the suite must leave no kernel process, connection file or temp dir behind,
and every test runs in a clean environment (no model settings leak in from the developer's shell)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel_agent.kernel.providers.local import runtime_root

_ENV_PREFIXES = ("OPENAI_", "KERNEL_AGENT_")


def kernels_of(owner: int) -> list[int]:
    """Kernel processes whose JPY_PARENT_PID is ``owner`` (jupyter_client sets it on every kernel,
    and on the bwrap around a sandboxed one), or whose KERNEL_AGENT_OWNER is (a kernel in a sandbox)."""
    markers = {f"JPY_PARENT_PID={owner}".encode(), f"KERNEL_AGENT_OWNER={owner}".encode()}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if markers.intersection(environ) and not process_gone(int(entry.name)):
            found.append(int(entry.name))
    return found


def our_kernel_pids() -> list[int]:
    """Kernel processes started by this test process."""
    return kernels_of(os.getpid())


def process_gone(pid: int) -> bool:
    """True once ``pid`` no longer runs (a zombie waiting for its reaper counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _temp_leftovers() -> set[str]:
    """Our runtime dirs (attributed by their owner.pid) and jupyter connection files."""
    roots = {Path(tempfile.gettempdir()), runtime_root()}  # a long TMPDIR sends runtime dirs to a short one
    me = str(os.getpid())
    ours = set()
    for folder in (found for root in roots for found in root.glob("kernel-agent-*")):
        if folder.name.startswith("kernel-agent-replay-"):  # kernel-agent-replay-<pid>-<random>
            ours.update([folder.name] if folder.name.split("-")[3] == me else [])
            continue
        try:
            owner = (folder / "owner.pid").read_text()
        except OSError:
            owner = me  # a dir without an owner file is suspicious: count it
        if owner == me:
            ours.add(folder.name)
    return ours | {p.name for root in roots for p in root.glob("kernel-*.json")}


@pytest.fixture(scope="session", autouse=True)
def no_leftovers() -> Iterator[None]:
    before = _temp_leftovers()
    yield
    leaked = our_kernel_pids()
    assert not leaked, f"kernel processes left running after the suite: {leaked}"
    new_files = _temp_leftovers() - before
    assert not new_files, f"temp files/dirs left behind by the suite: {sorted(new_files)}"


@pytest.fixture(scope="module", autouse=True)
def no_leftovers_per_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """The same check at the end of each module (after its own fixtures are torn down), so a leak
    names the module that made it rather than whichever test happened to run last."""
    kernels_before = set(our_kernel_pids())
    files_before = _temp_leftovers()
    yield
    leaked = set(our_kernel_pids()) - kernels_before
    assert not leaked, f"{request.module.__name__} left kernel processes running: {sorted(leaked)}"
    new_files = _temp_leftovers() - files_before
    assert not new_files, f"{request.module.__name__} left temp files/dirs behind: {sorted(new_files)}"


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(_ENV_PREFIXES):
            monkeypatch.delenv(name)
