"""The gateway's REST calls for one kernel: ``GatewayREST``.

Owns ``/api/kernels`` (create, read, interrupt, restart, delete) over one
``httpx.AsyncClient`` and the translation of what can go wrong into
``KernelStartError``/``KernelError`` naming the gateway's URL (down,
token rejected, user not authorized, kernelspec unknown). The token rides in the header only.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from ....errors import KernelError, KernelStartError
from .settings import GatewaySettings

__all__ = ["GatewayREST"]

log = logging.getLogger(__name__)


class GatewayREST:
    """REST calls against ``settings.url``; ``aclose()`` releases the connection pool."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self._http = httpx.AsyncClient(
            base_url=settings.url, headers=settings.headers(), timeout=settings.request_timeout, trust_env=False
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def create_kernel(self, env: dict[str, str]) -> dict[str, Any]:
        """Start a kernel; its model (``id``, ``name``, ...). Raises ``KernelStartError``."""
        body: dict[str, Any] = {"env": env}
        if self.settings.kernel_name:
            body["name"] = self.settings.kernel_name
        response = await self._call("POST", "/api/kernels", json=body, timeout=self.settings.startup_timeout)
        if response.status_code not in (200, 201):
            raise KernelStartError(f"the gateway at {self.settings.url} did not start a kernel: {_reason(response)}")
        started: dict[str, Any] = response.json()
        return started

    async def kernel(self, kernel_id: str) -> dict[str, Any] | None:
        """The kernel's model, or None when the gateway no longer has it."""
        response = await self._call("GET", f"/api/kernels/{kernel_id}")
        if response.status_code == 404:
            return None
        self._check(response, "read the kernel")
        model: dict[str, Any] = response.json()
        return model

    async def interrupt(self, kernel_id: str) -> None:
        self._check(await self._call("POST", f"/api/kernels/{kernel_id}/interrupt"), "interrupt the kernel")

    async def restart(self, kernel_id: str) -> None:
        """Ask for a restart. It returns before the kernel answers: wait for a ``kernel_info_reply``."""
        response = await self._call("POST", f"/api/kernels/{kernel_id}/restart", timeout=self.settings.startup_timeout)
        self._check(response, "restart the kernel")

    async def delete(self, kernel_id: str) -> None:
        """Shut the kernel down on the gateway (gone already is fine)."""
        response = await self._call("DELETE", f"/api/kernels/{kernel_id}")
        if response.status_code not in (204, 404):
            self._check(response, "shut the kernel down")

    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise KernelStartError(f"cannot reach the gateway at {self.settings.url}: {exc!r}") from exc
        if response.status_code == 401 or (response.status_code == 403 and _says_nothing_more(response)):
            raise KernelStartError(
                f"the gateway at {self.settings.url} refused the request ({response.status_code}): "
                "check the token (KERNEL_AGENT_GATEWAY_TOKEN or --gateway-token)"
            )
        return response

    def _check(self, response: httpx.Response, what: str) -> None:
        if response.status_code >= 400:
            raise KernelError(f"the gateway at {self.settings.url} could not {what}: {_reason(response)}")


def _says_nothing_more(response: httpx.Response) -> bool:
    """A bare refusal (a bad token). Enterprise Gateway's 403s say why (a user it does not authorize, a kernel
    limit): those reach the caller's error as the gateway worded them, not as a token problem."""
    standard = httpx.codes.get_reason_phrase(response.status_code)  # tornado puts a custom reason in the status line
    return _reason(response) in (f"{response.status_code} {standard}", f"{response.status_code} ")


def _reason(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = {}
    message = body.get("message") or body.get("reason") if isinstance(body, dict) else None
    return f"{response.status_code} {message or response.reason_phrase}"
