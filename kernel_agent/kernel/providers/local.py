"""A kernel process we start on this machine: ``LocalProvider``.

It owns one kernel process: jupyter_client's
``AsyncKernelManager`` (composed, not subclassed), the runtime dir that holds
its connection file and log, the environment it starts with and its
confinement (``limits.Confinement``). It says why the process ended, in
words, from its exit status. A kernel someone else started is ``attached.py``'s; runtime dirs are
``runtime.py``'s.
Executing code is the engine's job (``engine.py``); the launch argv,
environment and confinement rules are ``inside/launcher.py``/``sandbox/environment.py``/``sandbox/limits.py``'s.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import weakref
from collections.abc import Mapping
from pathlib import Path
from queue import Empty
from typing import IO, Any

from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

from ..._loop import in_thread
from ...errors import ConfigError, KernelError, KernelStartError, SandboxUnavailableError
from ..inside.figure_cap import USER_STARTUP_ENV, figure_cap_env
from ..inside.output_cap import OUTPUT_CAP_ENV
from ..kernelspec import KERNEL_NAME, KernelChoice, choose_kernel, launch_spec
from ..python_env import inside_path
from ..sandbox.bwrap import SandboxView, protected_files, sandboxed_pid
from ..sandbox.environment import kernel_environment
from ..sandbox.limits import CONFINEMENT_FAILED, Confinement, Limits
from ..sandbox.template import TemplateKey
from .base import bound_messages, max_message_bytes
from .guard import MessageGuard
from .registry import ProviderSettings
from .runtime import make_runtime_dir, remove_runtime_dir, sweep_stale_runtime_dirs

__all__ = ["LocalProvider", "kill_local_kernels", "local_provider"]

log = logging.getLogger(__name__)

_POLL_S = 0.2  # how often a starting kernel is checked for an early exit
SOCKETS_INSIDE = "/run/kernel-agent"  # where a sandboxed kernel finds the host sockets it was given


# Providers whose kernel process may be running: what kill_local_kernels() reaches.
_LIVE: weakref.WeakSet[LocalProvider] = weakref.WeakSet()


def kill_local_kernels() -> int:
    """Kill at once every kernel process this process started and has not closed yet; return how many
    were signalled. For a process told to stop (SIGTERM) while it closes its kernels the polite way:
    a graceful shutdown (or a start still under way) then ends as soon as the kernel is gone, and each
    provider's ``close()`` still removes its runtime dir, which a kill after the stop's grace would
    leave behind. Synchronous (signals only, no I/O); raises nothing."""
    return sum(provider.kill_now() for provider in list(_LIVE))


class LocalProvider:
    """A kernel process we start on this machine, confined by ``limits``, in ``workspace``.

    ``workspace`` None means a private folder inside the runtime dir, removed on close. ``sockets``: variable
    name → a host Unix socket the kernel may connect to (``ProviderSettings.sockets``).
    """

    owns_kernel = True
    supports_sockets = True  # bound into the sandbox under SOCKETS_INSIDE (the path itself, unconfined)

    def __init__(
        self,
        workspace: Path | None,
        *,
        kernel_name: str = KERNEL_NAME,
        env: dict[str, str] | None = None,
        allow_env: tuple[str, ...] = (),
        startup_timeout: float = 60.0,
        max_images: int = 50,
        max_output_bytes: int = 10_000_000,
        limits: Limits | None = None,
        python: str | None = None,
        sockets: Mapping[str, Path] | None = None,
        template: bool = True,
    ) -> None:
        self._workspace = workspace
        self.template = template  # fork the kernel from a warmed template where its kind has one
        self._sockets = dict(sockets or {})
        self.kernel_name = kernel_name
        self.startup_timeout = startup_timeout
        self.limits = limits or Limits()
        self._env_extra = {**figure_cap_env(max_images), OUTPUT_CAP_ENV: str(max_output_bytes), **(env or {})}
        self._allow_env = allow_env
        self._max_message_bytes = max_message_bytes(max_output_bytes)
        self.python = python  # another environment's interpreter (probed when the kernel starts)
        self.choice: KernelChoice | None = None  # the kernel checked by prepare()
        self._inside_path: Path | None = None
        self.manager: AsyncKernelManager | None = None
        self.client: AsyncKernelClient | None = None
        self.guard: MessageGuard | None = None  # keeps the client connected past messages over the bound
        self.confinement: Confinement | None = None
        self._runtime_dir: Path | None = None
        self._stderr_file: IO[bytes] | None = None

    def __repr__(self) -> str:
        return f"<LocalProvider {self.kernel_name} cwd={self._workspace}>"

    @property
    def workspace(self) -> Path | None:
        return self._workspace

    async def start(self) -> dict[str, Any]:
        """Start the kernel process and wait until it answers. Raises ``KernelStartError``
        (``SandboxUnavailableError`` when the confinement asked for cannot be set up)."""
        try:
            return await self._start()
        except BaseException:
            await self.close()
            raise

    def prepare(self) -> tuple[AsyncKernelManager, dict[str, str]]:
        """Make the runtime dir, cgroup and sandboxed launch spec; return the manager (kernel not
        started) and the environment to start it with. For callers that start the kernel themselves
        (replay hands both to nbclient); ``close()`` still cleans up. Raises ``SandboxUnavailableError``."""
        sweep_stale_runtime_dirs()
        self._runtime_dir = make_runtime_dir()
        if self._workspace is None:
            self._workspace = self._runtime_dir / "workspace"
        self._workspace.mkdir(parents=True, exist_ok=True)
        self.choice = choose_kernel(self.kernel_name, self.python)
        self.confinement = Confinement.prepare(self.limits)
        extra = {**self._env_extra, **self.confinement.env, **self._socket_env()}
        if self.choice.python is not None:  # its own packages; ours only for the in-kernel code
            self._inside_path = inside_path(self._runtime_dir)
        self.manager = self._manager(self._runtime_dir, self._workspace)
        env = kernel_environment(extra=extra, allow=self._allow_env)
        return self.manager, env

    def _prepare_start(self) -> dict[str, str]:
        """``prepare``, the kernel's log and the CPU count's base: disk and cgroup work, run off the loop."""
        self.manager, env = self.prepare()
        assert self._runtime_dir is not None
        self._stderr_file = open(self._runtime_dir / "kernel.log", "wb")  # noqa: SIM115 - closed in close()
        assert self.confinement is not None  # prepare() made it
        self.confinement.new_kernel()
        return env

    async def _start(self) -> dict[str, Any]:
        env = await in_thread(self._prepare_start)
        assert self.manager is not None and self._workspace is not None
        _LIVE.add(self)
        try:
            await self.manager.start_kernel(
                cwd=str(self._workspace), env=env, stdout=subprocess.DEVNULL, stderr=self._stderr_file
            )
            self.client = self.manager.client()
            bound_messages(self.client, self._max_message_bytes)
            # No heartbeat: the process says whether the kernel lives (is_alive), and stopping a heartbeat
            # thread whose kernel has died blocks the loop for a second (its socket's linger).
            self.client.start_channels(hb=False)
            self.guard = MessageGuard(self.client, self._max_message_bytes)
            self.guard.start()
            return await self._wait_ready()
        except Exception as exc:  # jupyter_client raises RuntimeError, OSError, NoSuchKernel (KeyError)...
            if self._returncode() == CONFINEMENT_FAILED:
                raise SandboxUnavailableError(f"cannot confine the kernel as asked: {self.log_tail()}") from exc
            raise KernelStartError(f"kernel {self.kernel_name!r} did not start: {exc}. {self.log_tail()}") from exc

    def _manager(self, runtime: Path, workspace: Path) -> AsyncKernelManager:
        """A manager for our kernel in ``runtime``: ipc sockets there, started by ``launch_spec``'s command."""
        assert self.confinement is not None
        workspace = workspace.absolute()  # bwrap binds absolute paths only
        sockets = runtime / "sockets"
        sockets.mkdir()
        connection_file = runtime / "connection.json"
        assert self.choice is not None
        spec_dir = launch_spec(
            runtime / "kernels",
            self.choice,
            self.confinement,
            SandboxView(
                workspace,
                sockets,
                connection_file,
                network=bool(self.limits.network),  # resolved in Limits.__post_init__
                read_only=protected_files(workspace),
                extra_read=self._extra_read(),
                bound_sockets=tuple((host, _socket_inside(host)) for host in self._sockets.values()),
            ),
            package_root=self._inside_path,
            template=self._template_key(),
        )
        manager = AsyncKernelManager(
            kernel_name=KERNEL_NAME,
            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(spec_dir)]),
            transport="ipc",  # always: another kernel's sockets are out of the sandbox's view, tcp ports are not
        )
        manager.connection_file = str(connection_file)
        manager.ip = str(sockets / "kernel")
        return manager

    def _template_key(self) -> TemplateKey | None:
        """The template this kernel may be forked from: our own Python kernel in this environment, sandboxed,
        without the network (pasta's namespace is not the template's to join) or a ``PYTHONPATH`` of the user's
        (the template imported without it); None starts it cold."""
        if not self.template or self.limits.sandbox != "strict" or self.limits.network:
            return None
        if self.choice is None or self.choice.command or self.choice.python is not None:
            return None
        env = kernel_environment(allow=self._allow_env)
        if "PYTHONPATH" in env or "PYTHONPATH" in self._env_extra:
            return None
        return TemplateKey.make(env)

    @property
    def start_path(self) -> str:
        """How the kernel started: ``template`` (forked from a warmed template) or ``cold``."""
        return str(getattr(self._process()[0], "start_path", "cold"))

    def describe_confinement(self) -> str:
        """The confinement in words, and how the kernel started (notebook metadata, the confinement line)."""
        provisioner = self._process()[0]
        why = str(getattr(provisioner, "why_cold", ""))
        if self.start_path == "template":
            start = "start: forked from a warmed template"
        else:
            start = "start: cold" + (f" (the template could not serve: {why})" if why else "")
        return f"{self.limits.describe()}; {start}"

    def _socket_env(self) -> dict[str, str]:
        """Each socket's variable: the path the kernel connects to (bound under ``/run`` in the sandbox, the host's
        own path unconfined). Raises ``ConfigError`` for two sockets of one file name (one inside path)."""
        if self.limits.sandbox != "strict":
            return {name: str(host) for name, host in self._sockets.items()}
        inside = {name: _socket_inside(host) for name, host in self._sockets.items()}
        if len(set(inside.values())) < len(inside):
            raise ConfigError(
                f"the kernel's sockets need distinct file names: {sorted(map(str, self._sockets.values()))}"
            )
        return inside

    def _extra_read(self) -> tuple[Path, ...]:
        """Host files the kernel must read besides the interpreter: the user's own PYTHONSTARTUP."""
        startup = self._env_extra.get(USER_STARTUP_ENV)
        paths: tuple[Path, ...] = (Path(startup),) if startup and Path(startup).is_file() else ()
        if self.choice is not None:
            paths += self.choice.read_paths
        if self._inside_path is not None:
            paths += (self._inside_path,)
        return paths

    async def _wait_ready(self) -> dict[str, Any]:
        assert self.client is not None and self.manager is not None
        waiter = asyncio.ensure_future(asyncio.wait_for(_answered(self.client), self.startup_timeout))
        while not waiter.done():
            done, _ = await asyncio.wait({waiter}, timeout=_POLL_S)
            if not done and not await self.manager.is_alive():
                waiter.cancel()
                raise RuntimeError(f"the kernel exited during start-up ({self.describe_exit()})")
        return waiter.result()

    async def is_alive(self) -> bool:
        """Whether the kernel process runs; also where the process tree's CPU limit is enforced
        (``Confinement.enforce_cpu``), since the engine asks this while code runs."""
        if self.manager is None:
            return False
        if self.confinement is not None and self.confinement.limits.cpu_seconds is not None:
            await in_thread(self.confinement.enforce_cpu)
        return bool(await self.manager.is_alive())

    async def interrupt(self) -> None:
        """Interrupt through the manager, which honours the kernelspec's ``interrupt_mode``; a sandboxed
        kernel of another kind (IRkernel answers no ``interrupt_request``) gets SIGINT itself, inside."""
        if self.manager is None:
            return
        if self.choice is not None and self.choice.command and self.limits.sandbox == "strict":
            await in_thread(self._interrupt_inside)
            return
        await self.manager.interrupt_kernel()

    def _interrupt_inside(self) -> None:
        provisioner = getattr(self.manager, "provisioner", None)
        process = getattr(provisioner, "process", None)
        kernel = sandboxed_pid(process.pid) if process is not None else None
        if kernel is not None:
            try:
                os.kill(kernel, signal.SIGINT)
            except OSError:  # it ended meanwhile
                log.debug("the kernel was gone before its interrupt", exc_info=True)

    async def restart(self) -> dict[str, Any]:
        """Restart the process (same connection) and wait for it. Raises ``KernelStartError``."""
        if self.manager is None:
            raise KernelError("the kernel was not started")
        try:
            if self.confinement is not None:
                # The old tree goes first, and is waited for: its children hold pids (and memory) in the
                # cgroups the new kernel joins, so a full process table would refuse the new sandbox.
                await in_thread(self.confinement.kill_tree)
                self.confinement.new_kernel()  # a fresh CPU budget, as RLIMIT_CPU gives the new process
            await self.manager.restart_kernel(now=True)
            return await self._wait_ready()
        except Exception as exc:
            raise KernelStartError(f"the kernel could not be restarted: {exc}. {self.log_tail()}") from exc

    @property
    def dropped_messages(self) -> int:
        """How often a channel's connection dropped (a message over the bound, or the kernel gone)."""
        return self.guard.dropped if self.guard is not None else 0

    def describe_exit(self) -> str:
        returncode = self._returncode()
        if returncode is None and self.confinement is not None and self.confinement.cpu_killed:
            returncode = -signal.SIGKILL  # killed for the tree's CPU time; the status is not reaped yet
        if returncode is None:
            return "no exit status"
        if self.limits.sandbox == "strict" and returncode > 128:  # bwrap's init (a forked kernel's too): 128+N
            returncode = 128 - returncode
        if self.confinement is not None:
            return self.confinement.describe_exit(returncode)
        return f"exit code {returncode}"

    def kill_now(self) -> bool:
        """SIGKILL the kernel's process group, if it runs; True when a signal was sent. ``close()``
        cleans up afterwards as after any death. Synchronous; raises nothing."""
        provisioner, process = self._process()
        if process is None or process.poll() is not None:
            return False
        pgid = getattr(provisioner, "pgid", None)
        try:
            if pgid:  # a kernel started cold leads a process group of its own (bwrap and what it runs): all of it
                os.killpg(pgid, signal.SIGKILL)
            else:  # a forked kernel: the init of its own PID namespace (a pidfd's signal), whose end ends all in it
                process.kill()
        except OSError:
            return False
        return True

    def _returncode(self) -> int | None:
        return getattr(self._process()[1], "returncode", None)

    def _process(self) -> tuple[Any, subprocess.Popen[bytes] | None]:
        """jupyter_client's ``LocalProvisioner`` and the kernel's ``Popen`` (None before a start or after
        the provisioner let it go)."""
        provisioner = getattr(self.manager, "provisioner", None)
        return provisioner, getattr(provisioner, "process", None)

    def log_tail(self, lines: int = 5) -> str:
        """The last lines the kernel wrote to stderr, for an error message ("" when none)."""
        if self._runtime_dir is None:
            return ""
        try:
            text = (self._runtime_dir / "kernel.log").read_text(errors="replace")
        except OSError:
            return ""
        tail = [line for line in text.splitlines() if line.strip()][-lines:]
        return "Kernel said: " + " | ".join(tail) if tail else ""

    async def close(self) -> None:
        """Shut the kernel down and remove its runtime dir and cgroup. Idempotent."""
        if self.guard is not None:
            await self.guard.close()
        if self.client is not None:
            self.client.stop_channels()
        if self.manager is not None:
            try:
                if self.manager.has_kernel:
                    await self.manager.shutdown_kernel(now=not await self.manager.is_alive())
            except Exception:  # a dying kernel must not keep us from cleaning up
                log.warning("kernel shutdown failed; killing it", exc_info=True)
                await self._kill()
        try:  # off the loop: a service closes kernels while it serves (~50 ms of disk work each under load)
            await in_thread(self._clean_up)
        except RuntimeError:  # at interpreter exit no worker thread can start: clean up here
            self._clean_up()

    def _clean_up(self) -> None:
        """The kernel is gone: kill what it left behind, drop its cgroup, close its log, remove its
        runtime dir. Blocking; idempotent."""
        _LIVE.discard(self)
        if self.confinement is not None:
            self.confinement.release()
        if self._stderr_file is not None:
            self._stderr_file.close()
        if self._runtime_dir is not None:
            remove_runtime_dir(self._runtime_dir)

    async def _kill(self) -> None:
        assert self.manager is not None
        try:
            await self.manager.shutdown_kernel(now=True)
        except Exception:
            log.debug("kill after failed shutdown also failed", exc_info=True)


def local_provider(settings: ProviderSettings) -> LocalProvider:
    """The ``local`` entry point of ``kernel_agent.providers``: a kernel process started here, in the
    settings' workspace, confined by their limits."""
    return LocalProvider(
        settings.workspace,
        kernel_name=settings.kernel_name or KERNEL_NAME,
        env=dict(settings.env),
        allow_env=settings.allow_env,
        startup_timeout=settings.startup_timeout,
        max_images=settings.max_images,
        max_output_bytes=settings.max_output_bytes,
        limits=settings.limits,
        python=settings.python,
        sockets=settings.sockets,
        template=settings.template,
    )


async def _answered(client: AsyncKernelClient) -> dict[str, Any]:
    """Ask for ``kernel_info`` until the kernel answers it on shell and its status for that request reaches us on
    iopub (a subscription made before the kernel bound misses the first messages: then ask again); return the
    reply's content. jupyter_client's ``wait_for_ready`` waits 0.2 s for iopub each time, longer than a kernel
    forked from a template takes to start."""
    while True:
        msg_id = client.kernel_info()
        reply = None
        while reply is None:
            try:
                message = await client.get_shell_msg(timeout=1)
            except Empty:
                break  # not bound yet, or the request was lost: ask again
            if message.get("parent_header", {}).get("msg_id") == msg_id:
                reply = message
        if reply is None:
            continue
        try:
            while True:
                status = await client.get_iopub_msg(timeout=0.05)
                if status.get("parent_header", {}).get("msg_id") == msg_id:
                    client._handle_kernel_info_reply(reply)  # the protocol version it speaks, as wait_for_ready does
                    content: dict[str, Any] = reply["content"]
                    return content
        except Empty:
            continue


def _socket_inside(host: Path) -> str:
    """Where a host Unix socket is bound in the sandbox: by its file name under ``/run`` (the sandbox's tmpfs)."""
    return f"{SOCKETS_INSIDE}/{host.name}"
