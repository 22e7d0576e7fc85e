"""Running the service: uvicorn on a host and port, until SIGINT/SIGTERM.

Owns the server process's loop; uvicorn handles the signals and the app's
lifespan closes every run and kernel on the way out.
"""

from __future__ import annotations

import logging

from .config import ServerConfig

__all__ = ["serve"]

log = logging.getLogger(__name__)


def serve(config: ServerConfig, host: str, port: int) -> None:
    """Serve ``config`` on ``host:port`` until stopped. Raises ``OSError`` when the port is taken."""
    import uvicorn

    from .app import create_app

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    log.info("kernel-agent service: data in %s, auth %s", config.data_dir, "on" if config.auth else "off")
    uvicorn.run(create_app(config), host=host, port=port, log_level="info", access_log=True)
