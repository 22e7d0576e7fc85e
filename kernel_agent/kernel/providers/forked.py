"""``TemplateProvisioner``: jupyter_client's seam for a kernel forked from a warmed template.

A kernelspec whose ``metadata.kernel_provisioner`` names ``kernel-agent-template`` (``kernelspec.launch_spec``
writes it for a kernel that can be forked) is launched here: the template of its kind forks a child, the
``holder`` command builds that child's sandbox (the cgroup join, then bwrap in the template's user namespace
and the child's PID namespace), and the child steps into it and becomes the kernel (``sandbox/forked_kernel.py``).
When the template cannot serve (it cannot start here, or a kernel it gave was not confined as asked), the
kernel starts cold from the same spec's ``argv``, and ``start_path`` says so. jupyter_client then polls,
signals and restarts the kernel through this provisioner as through its own.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning.local_provisioner import LocalProvisioner
from traitlets import Dict, List, Unicode

from ..._loop import in_thread
from ..._python import NEUTRAL_CWD
from ..kernelspec import LAUNCHER, launcher_arguments
from ..sandbox.bwrap import sandbox_environment
from ..sandbox.forked_kernel import ForkedKernel, TemplateError, fill_in, holder_output
from ..sandbox.seccomp import require_filter
from ..sandbox.template import TemplateKey, template_for

__all__ = ["TemplateProvisioner"]

log = logging.getLogger(__name__)

_START_TIMEOUT_S = 60.0  # for the fork, the sandbox and the step into it, together


class TemplateProvisioner(LocalProvisioner):
    """Launch the kernel forked from its kind's template, else cold; ``start_path`` says which it took."""

    holder = List(Unicode(), config=True, help="the command that builds the forked kernel's sandbox")
    template_env = Dict(config=True, help="the environment the template imports under")
    extra_read = List(Unicode(), config=True, help="more host paths the template reads")

    start_path = "cold"
    why_cold = ""
    _forking: ForkedKernel | None = None  # the child being made into the kernel (ended if the start is cancelled)

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        try:
            child = await in_thread(self._fork, cmd, kwargs)
        except asyncio.CancelledError:  # the fork went on to its end: what it made is this provisioner's to end
            if isinstance(self._forking, ForkedKernel):
                self._forking.kill()
                self._forking.close()
            raise
        except TemplateError as exc:
            log.warning("kernel started cold, not from its template: %s", exc)
            self.start_path, self.why_cold = "cold", str(exc)
            return await super().launch_kernel(cmd, **kwargs)
        self.process = child
        self.pid = child.pid
        self.pgid = None  # signals go to the child through its pidfd; it leads its own PID namespace
        self.cwd = kwargs.get("cwd")
        self.start_path, self.why_cold = "template", ""
        return self.connection_info

    async def cleanup(self, restart: bool = False) -> None:
        """jupyter_client is done with this kernel: let go of the forked kernel's channel too."""
        if isinstance(self.process, ForkedKernel):
            self.process.close()
        await super().cleanup(restart=restart)

    def _fork(self, cmd: list[str], kwargs: dict[str, Any]) -> Any:
        timeout = _START_TIMEOUT_S
        deadline = time.monotonic() + timeout
        if not self.holder or LAUNCHER not in cmd:
            raise TemplateError("this kernel's command is not one a template can run")
        template = template_for(TemplateKey.make(self.template_env, [Path(p) for p in self.extra_read]))
        child = self._forking = template.fork(timeout)
        stderr = kwargs.get("stderr")
        stderr_fd: int | None = stderr.fileno() if stderr is not None and hasattr(stderr, "fileno") else None
        null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC) if stderr_fd is None else None
        assert template.pid is not None  # a template that forked is running
        argv = fill_in(self.holder, template.pid, child.pid)
        try:
            holder = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr_fd if stderr_fd is not None else subprocess.DEVNULL,
                env={"PATH": os.defpath},
                cwd=NEUTRAL_CWD,
                start_new_session=True,
            )
        except OSError as exc:
            child.kill()
            child.close()
            raise TemplateError(f"cannot build the forked kernel's sandbox: {exc}") from exc
        try:
            assert holder.stdout is not None and holder.stdin is not None
            info, said = holder_output(holder.stdout, deadline)
            sandbox = info.get("child-pid")
            if said != "ready" or not isinstance(sandbox, int):
                raise TemplateError(f"bwrap did not build the kernel's sandbox (exit {holder.poll()}, said {said!r})")
            child.join(
                sandbox,
                cwd=os.path.abspath(kwargs.get("cwd") or NEUTRAL_CWD),  # as Popen reads a relative one: from ours
                env=sandbox_environment(kwargs.get("env") or {}),
                argv=launcher_arguments(cmd),
                seccomp=require_filter().code,
                stderr=stderr_fd if stderr_fd is not None else null,  # type: ignore[arg-type]
                timeout=max(deadline - time.monotonic(), 1.0),
            )
        except BaseException:
            child.kill()
            child.close()
            raise
        finally:
            if null is not None:
                os.close(null)
            _let_go(holder)
        return child


def _let_go(holder: subprocess.Popen[bytes]) -> None:
    """End the holder (its sandbox lives on in the kernel that joined it) and reap it."""
    for stream in (holder.stdin, holder.stdout):
        if stream is not None:
            stream.close()
    try:
        holder.wait(timeout=5)
    except subprocess.TimeoutExpired:
        holder.kill()
        holder.wait()
