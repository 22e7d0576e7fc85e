"""Running the service: uvicorn on a host and port, until SIGINT/SIGTERM.

Owns the server process's loop and its logging. On SIGTERM (or SIGINT) the service drains: uvicorn
stops accepting connections, the service takes no new run and its running ones get ``drain_grace``
seconds to finish (open streams go on), then the app's lifespan stops the rest and every kernel.
"""

from __future__ import annotations

import logging
from types import FrameType
from typing import Literal

from .config import ServerConfig
from .logs import configure

__all__ = ["serve"]

log = logging.getLogger(__name__)


def serve(config: ServerConfig, host: str, port: int, log_format: Literal["text", "json"] = "text") -> None:
    """Serve ``config`` on ``host:port`` until stopped, logging in ``log_format``. Raises ``OSError`` when
    the port is taken."""
    import uvicorn

    from .app import create_app

    configure(log_format)
    log.info("kernel-agent service: data in %s, auth %s", config.data_dir, "on" if config.auth else "off")
    app = create_app(config)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info", access_log=True, log_config=None,
                                           timeout_graceful_shutdown=max(config.drain_grace, 0.1)))
    stop = server.handle_exit

    def drain_then_stop(sig: int, frame: FrameType | None) -> None:
        service = getattr(app.state, "service", None)
        if service is not None:  # the signal handler runs on the loop's thread: no lock needed
            service.begin_drain()
        stop(sig, frame)

    server.handle_exit = drain_then_stop  # type: ignore[method-assign]
    server.run()
