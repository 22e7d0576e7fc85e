"""For the gateway's operator: a websocket connection class that sets TCP_NODELAY on the server's side.

A stock Jupyter Server / Kernel Gateway websocket leaves Nagle's algorithm
on, and small request/reply frames then wait for the client's delayed ACK:
~40 ms per round trip instead of ~1 ms. kernel-agent sets TCP_NODELAY on its
own end; this class sets it on the gateway's end. Run the gateway with::

    jupyter kernelgateway \\
      --KernelGatewayApp.kernel_websocket_connection_class=kernel_agent.kernel.providers.gateway.nodelay.NoDelayWebsocketConnection

(Jupyter Server 2: ``--ServerApp.kernel_websocket_connection_class=...``; Enterprise
Gateway 3.3 runs on Jupyter Server 1.x, which has no such option). It
needs kernel-agent importable in the gateway's environment; the class is
three lines, so an operator may equally copy it. This module imports
jupyter_server, which only the gateway's process has: nothing in
kernel-agent imports it.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection

__all__ = ["NoDelayWebsocketConnection"]


class NoDelayWebsocketConnection(ZMQChannelsWebsocketConnection):
    """Jupyter Server's kernel websocket connection with TCP_NODELAY on its socket."""

    def connect(self) -> Any:
        self.websocket_handler.set_nodelay(True)
        return super().connect()
