"""``kernel-agent serve``: the HTTP service (FastAPI on uvicorn) and its web page (``static/``).

``config`` (settings), ``keys`` (service keys, hashed, in the database), ``store`` (records in the
database), ``blobs`` (the bytes on disk), ``threads`` (a thread's live kernel, a run's events),
``runtimes`` (the kernels alive on this replica), ``executor`` (a run's execution), ``service`` (runs
and threads of many owners), ``app`` (the native HTTP API and the page), ``compat`` (the
DeepAnalyze/OpenAI-compatible routes). Importing this package does not import
FastAPI; ``create_app`` does.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def create_app(config: Any) -> Any:
    """The ASGI app serving ``config`` (a ``ServerConfig``); see ``app.create_app``."""
    from .app import create_app as build

    return build(config)
