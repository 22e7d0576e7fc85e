"""A kernel for tests of code that drives one: ``FakeKernel`` plays scripted ``ExecutionResult``s.

Public, so users can test their own loops (an ``AsyncAgent`` with a ``ScriptedChatModel``, a tool around
``PythonTool``...) without starting a kernel: pass ``session_factory=lambda workspace: FakeKernel([...],
workspace=workspace)`` to ``AsyncAgent``. The helpers ``ok`` and ``error`` build the usual results.

Owns nothing else: no code runs, nothing is sent anywhere. What it plays is the caller's script; a script
step may be a function of the code and the kernel's folder (to write a file there, to wait, to raise).
"""

from __future__ import annotations

import inspect
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from .errors import KernelError, SessionClosedError
from .kernel.files import CopiedFiles, KernelFiles, LocalFiles, NoFiles
from .kernel.interface import SessionState
from .kernel.partial import OutputCallback, OutputChunk
from .kernel.sandbox.limits import Limits
from .records import PYTHON3_KERNELSPEC
from .result import ErrorInfo, ExecutionResult

__all__ = ["FakeKernel", "Step", "error", "ok"]

# One step of the script: a result, or a function of (code, the kernel's folder) giving one (sync or async).
Step = ExecutionResult | Callable[[str, Path], ExecutionResult | Awaitable[ExecutionResult]]

PYTHON_INFO: dict[str, Any] = {
    "implementation": "fake",
    "language_info": {"name": "python", "version": "3", "mimetype": "text/x-python", "file_extension": ".py"},
}


def ok(stdout: str = "", result: str | None = None) -> ExecutionResult:
    """A successful execution that printed ``stdout`` and, when given, had ``result`` as its value."""
    outputs: list[dict[str, Any]] = []
    if stdout:
        outputs.append({"output_type": "stream", "name": "stdout", "text": stdout})
    if result is not None:
        outputs.append({"output_type": "execute_result", "data": {"text/plain": result}, "metadata": {}})
    return ExecutionResult("ok", tuple(outputs))


def error(ename: str, evalue: str, stdout: str = "") -> ExecutionResult:
    """An execution that raised ``ename: evalue`` (after printing ``stdout``)."""
    traceback = [f"{ename}: {evalue}"]
    outputs: list[dict[str, Any]] = []
    if stdout:
        outputs.append({"output_type": "stream", "name": "stdout", "text": stdout})
    outputs.append({"output_type": "error", "ename": ename, "evalue": evalue, "traceback": traceback})
    return ExecutionResult("error", tuple(outputs), error=ErrorInfo(ename, evalue, tuple(traceback)))


class FakeKernel:
    """A ``kernel.interface.Kernel`` whose ``execute`` plays ``script``, one step per call, in order.

    ``workspace`` is the kernel's folder (a private temp dir, removed on close, when None); with
    ``kernel_folder`` the kernel works apart in that folder and changed files are copied back into
    ``workspace``, as a pooled kernel's are. ``evaluations`` answer ``evaluate`` by expression key (None
    for the others). ``kernel_info`` defaults to a Python kernel's. ``executed`` lists the code received,
    ``interrupts`` and ``restarts`` count those calls. ``execute`` raises ``KernelError`` once the
    script is exhausted and ``SessionClosedError`` outside ``start``/``close``.
    """

    def __init__(
        self,
        script: Iterable[Step] = (),
        *,
        workspace: str | os.PathLike[str] | None = None,
        kernel_folder: str | os.PathLike[str] | None = None,
        evaluations: Mapping[str, str] | None = None,
        kernel_info: Mapping[str, Any] | None = None,
        limits: Limits | None = None,
    ) -> None:
        self._script = list(script)
        self._given = Path(workspace) if workspace is not None else None
        self._kernel_folder = Path(kernel_folder) if kernel_folder is not None else None
        self._evaluations = dict(evaluations or {})
        self._limits = limits or Limits()
        self._temp: tempfile.TemporaryDirectory[str] | None = None
        self.kernel_info: dict[str, Any] = dict(kernel_info if kernel_info is not None else PYTHON_INFO)
        self.state = SessionState.NEW
        self.executed: list[str] = []
        self.interrupts = 0
        self.restarts = 0

    def __repr__(self) -> str:
        return f"<FakeKernel [{self.state.value}] {len(self._script)} step(s) left>"

    @property
    def remaining(self) -> int:
        """How many scripted steps have not been played yet."""
        return len(self._script)

    @property
    def workspace(self) -> Path | None:
        return self._given if self._given is not None or self._temp is None else Path(self._temp.name)

    @property
    def kernelspec(self) -> dict[str, str]:
        return dict(PYTHON3_KERNELSPEC)

    @property
    def limits(self) -> Limits:
        return self._limits

    @property
    def confinement(self) -> str:
        return "a fake kernel (kernel_agent.testing): no code runs"

    @property
    def files(self) -> KernelFiles:
        workspace = self.workspace
        if self.state is not SessionState.READY or workspace is None:
            return NoFiles(SessionClosedError(f"this fake kernel is {self.state.value}: it has no files"))
        if self._kernel_folder is not None:
            return CopiedFiles(self._kernel_folder, workspace)
        return LocalFiles(workspace)

    async def start(self) -> FakeKernel:
        """Make the folders; a second call does nothing. Raises ``SessionClosedError`` once closed."""
        if self.state is SessionState.CLOSED:
            raise SessionClosedError("this fake kernel is closed")
        if self.state is SessionState.NEW:
            if self._given is None:
                self._temp = tempfile.TemporaryDirectory(prefix="kernel-agent-fake-")
            for folder in (self.workspace, self._kernel_folder):
                if folder is not None:
                    folder.mkdir(parents=True, exist_ok=True)
            self.state = SessionState.READY
        return self

    async def execute(
        self,
        code: str,
        timeout: float | None = None,
        *,
        rebuild: bool | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecutionResult:
        """The next scripted result, with ``code``, its call number and execution count filled in.
        Raises ``SessionClosedError``, ``KernelError`` (script exhausted), or what a step raises."""
        self._check_ready()
        if not self._script:
            raise KernelError(f"the FakeKernel's script is exhausted: nothing scripted for {code[:80]!r}")
        step = self._script.pop(0)
        self.executed.append(code)
        call = len(self.executed)
        started = time.monotonic()
        if isinstance(step, ExecutionResult):
            result = step
        else:
            folder = self._kernel_folder or self.workspace
            assert folder is not None  # READY: a folder was made
            produced = step(code, folder)
            result = await produced if inspect.isawaitable(produced) else produced
        if on_output is not None and (result.stdout or result.stderr):
            on_output(OutputChunk(result.stdout + result.stderr, time.monotonic() - started))
        return replace(
            result,
            code=code,
            call=call,
            execution_count=result.execution_count if result.execution_count is not None else call,
        )

    async def evaluate(self, expressions: dict[str, str], timeout: float = 30.0) -> dict[str, str | None]:
        """The scripted ``evaluations`` by key; None for the others. Raises ``SessionClosedError``."""
        self._check_ready()
        return {key: self._evaluations.get(key) for key in expressions}

    async def run_quietly(self, code: str, timeout: float = 30.0) -> str:
        """Nothing printed. Raises ``SessionClosedError``."""
        self._check_ready()
        return ""

    async def interrupt(self) -> None:
        self.interrupts += 1

    async def restart(self) -> None:
        self._check_ready()
        self.restarts += 1

    async def is_alive(self) -> bool:
        return self.state is SessionState.READY

    async def close(self) -> None:
        """Remove the private temp dir, if any. Idempotent."""
        self.state = SessionState.CLOSED
        if self._temp is not None:
            self._temp.cleanup()
            self._temp = None

    async def __aenter__(self) -> FakeKernel:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _check_ready(self) -> None:
        if self.state is not SessionState.READY:
            raise SessionClosedError(f"this fake kernel is {self.state.value}")
