"""The DeepAnalyze-compatible surface: ``/v1/models`` and ``/v1/chat/completions``.

Owns the translation between OpenAI's chat-completion shapes and the service's
runs: a client written for DeepAnalyze's API server (or the ``openai`` SDK)
works against ours by changing only the base URL.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI

__all__ = ["compat_routes"]


def compat_routes(app: FastAPI) -> None:
    """Add the OpenAI-compatible routes to ``app``."""
    config = app.state.config

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        name = config.model or "kernel-agent"
        return {"object": "list", "data": [{"id": name, "object": "model", "created": int(time.time()),
                                            "owned_by": "kernel-agent"}]}
