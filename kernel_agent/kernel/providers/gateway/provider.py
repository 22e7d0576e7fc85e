"""A kernel on a Jupyter Kernel Gateway / Enterprise Gateway: ``GatewayProvider``.

Owns one remote kernel's lifecycle: start it over REST (or attach to one by
id, which is then never restarted or deleted), open its channels
(``channels.GatewayChannels``), give it a private working directory on the
gateway's side (the gateway's own cwd is shared by all its kernels),
interrupt and restart over REST (a restart returns before the kernel is
ready, so it waits for a ``kernel_info_reply``), tell a death from the
``restarting``/``dead`` status the gateway sends, and delete the kernel on
close. The token never reaches the kernel: the environment sent with the
start request is what ``gateway_environment`` lets through (``env`` and our
``KERNEL_*`` names, e.g. Enterprise Gateway's ``KERNEL_USERNAME``), and the
gateway itself passes a kernel only ``KERNEL_*`` names and its own allow-list.
"""

from __future__ import annotations

import asyncio
import logging
import queue
from pathlib import Path
from typing import Any

from ....errors import KernelError, KernelStartError
from ...sandbox.environment import gateway_environment
from ...sandbox.limits import Limits
from ..base import max_message_bytes
from .channels import GatewayChannels
from .rest import GatewayREST
from .settings import GatewaySettings

__all__ = ["GatewayProvider"]

log = logging.getLogger(__name__)

# Not "kernel-agent-*": that name belongs to local runtime dirs, which carry an owner file.
_MAKE_CWD = "__import__('os').chdir(__import__('tempfile').mkdtemp(prefix='kernel-agent.remote-'))"
_CWD = "__import__('os').getcwd()"


class GatewayProvider:
    """A kernel on the gateway ``settings`` names. ``kernel_id`` attaches to a running one instead;
    with ``adopt`` too, this provider owns it from then on (the service's replica that takes a thread
    over from a dead one): it stays in its folder, and ``close`` deletes it and its folder. ``disown``
    hands ownership away again (``close`` then only disconnects)."""

    supports_sockets = False  # a kernel on another machine: a socket of this one is not reachable from it

    def __init__(
        self,
        settings: GatewaySettings,
        *,
        kernel_id: str | None = None,
        env: dict[str, str] | None = None,
        private_cwd: bool = True,
        adopt: bool = False,
        max_output_bytes: int = 10_000_000,
    ) -> None:
        self.settings = settings
        self._max_message = max_message_bytes(max_output_bytes)
        self.kernel_id = kernel_id
        self.owns_kernel = kernel_id is None or adopt
        self._adopted = adopt and kernel_id is not None
        self.limits = Limits.off()  # the gateway's operator confines its kernels, not us
        self.client: GatewayChannels | None = None
        self.remote_cwd: str | None = None
        self._env = gateway_environment(env)
        self._private_cwd = private_cwd and self.owns_kernel
        self._rest: GatewayREST | None = None

    def __repr__(self) -> str:
        return f"<GatewayProvider {self.settings.url} kernel={self.kernel_id}>"

    @property
    def workspace(self) -> Path | None:
        return None  # the kernel's files live on the gateway's side

    async def start(self) -> dict[str, Any]:
        """Start (or find) the kernel and wait until it answers. Raises ``KernelStartError`` naming the URL."""
        try:
            return await self._start()
        except BaseException:
            await self.close()
            raise

    async def _start(self) -> dict[str, Any]:
        self._rest = GatewayREST(self.settings)
        if self.kernel_id is None:
            self.kernel_id = (await self._rest.create_kernel(self._env))["id"]
        elif await self._rest.kernel(self.kernel_id or "") is None:
            raise KernelStartError(f"the gateway at {self.settings.url} has no kernel {self.kernel_id!r}")
        assert self.kernel_id is not None
        self.client = GatewayChannels(self.settings, self.kernel_id, max_message=self._max_message)
        await self.client.open()
        info = await self.client.kernel_info(self.settings.startup_timeout)
        await self._enter_cwd()
        return info

    async def _enter_cwd(self) -> None:
        """Put the kernel in its private folder: a new one at start, the same one after a restart."""
        if not self._private_cwd:
            return
        if self.remote_cwd is None:  # an adopted kernel stays in the folder its first session made
            code = "" if self._adopted else _MAKE_CWD
        else:
            code = f"__import__('os').chdir({self.remote_cwd!r})"
        reply = await self.run_silently(code, {"cwd": _CWD})
        value = reply.get("user_expressions", {}).get("cwd", {})
        if value.get("status") != "ok":
            raise KernelStartError(f"the kernel on {self.settings.url} could not make its working folder: {reply}")
        self.remote_cwd = value["data"]["text/plain"].strip("'\"")

    async def run_silently(
        self, code: str, expressions: dict[str, str] | None = None, timeout: float = 30.0
    ) -> dict[str, Any]:
        """Run set-up code without outputs or history; the ``execute_reply`` content. Raises ``KernelError``."""
        client = self._channels()
        msg_id = client.execute(code, silent=True, store_history=False, user_expressions=expressions or {})
        loop_time = asyncio.get_running_loop().time
        end = loop_time() + timeout
        while loop_time() < end:
            try:
                msg = await client.get_shell_msg(timeout=end - loop_time())
            except queue.Empty:
                break
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                content: dict[str, Any] = msg.get("content", {})
                return content
        raise KernelError(f"the kernel on the gateway at {self.settings.url} did not answer within {timeout:g}s")

    def disown(self) -> None:
        """Stop owning the kernel: ``close`` then disconnects and leaves it (and its folder) running."""
        self.owns_kernel = False

    @property
    def dropped_messages(self) -> int:
        return self.client.dropped if self.client is not None else 0

    async def is_alive(self) -> bool:
        return self.client is not None and not self.client.lost and not self.client.gone

    async def interrupt(self) -> None:
        if self._rest is not None and self.kernel_id is not None:
            await self._rest.interrupt(self.kernel_id)

    async def restart(self) -> dict[str, Any]:
        """Restart (unless the gateway already did, after a death) and wait for a ``kernel_info_reply``.
        Raises ``KernelStartError``."""
        client = self._channels()
        if not self.owns_kernel:
            raise KernelError("restart needs a kernel this session started; this one was attached")
        assert self._rest is not None and self.kernel_id is not None
        if client.lost_reason != "restarting":  # a death the gateway has not already restarted from
            try:
                await self._rest.restart(self.kernel_id)
            except KernelError as exc:
                raise KernelStartError(f"the kernel could not be restarted: {exc}") from exc
        info = await client.kernel_info(self.settings.startup_timeout)
        await self._enter_cwd()
        return info

    def describe_confinement(self) -> str:
        """Our sandbox cannot reach a remote kernel: the gateway's own isolation is what applies."""
        return f"remote: Jupyter gateway at {self.settings.url} (its own isolation applies, not our sandbox)"

    def describe_exit(self) -> str:
        if self.client is not None and self.client.gone:
            return f"the connection to the gateway at {self.settings.url} was lost"
        reason = self.client.lost_reason if self.client is not None else ""
        return f"the gateway reported it {reason or 'gone'}"

    async def close(self) -> None:
        """Close the channels; delete the kernel (and its folder) if we started it. Idempotent."""
        client, self.client = self.client, None
        if client is not None:
            if self.owns_kernel and self.remote_cwd and not client.gone and not client.lost:
                await self._remove_cwd(client)
            await client.aclose()
        rest, self._rest = self._rest, None
        if rest is None:
            return
        try:
            if self.owns_kernel and self.kernel_id is not None:
                await rest.delete(self.kernel_id)
        except KernelError:
            log.warning("could not delete kernel %s on %s", self.kernel_id, self.settings.url, exc_info=True)
        finally:
            await rest.aclose()

    async def _remove_cwd(self, client: GatewayChannels) -> None:
        self.client = client  # run_silently needs it for a moment
        try:
            await self.run_silently(
                f"__import__('shutil').rmtree({self.remote_cwd!r}, ignore_errors=True)", timeout=5.0
            )
        except KernelError:
            log.debug("could not remove the kernel's folder %s", self.remote_cwd)
        finally:
            self.client = None

    def _channels(self) -> GatewayChannels:
        if self.client is None:
            raise KernelError("the gateway kernel is not connected (not started, or closed)")
        return self.client
