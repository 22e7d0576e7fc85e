"""What every route of the service shares: the caller's owner (``Owner``), the service, the public view of a record.

Owns FastAPI dependencies (the caller, the records a path names kept fresh) and re-exports ``records.public`` (the
one translation of a stored record
for clients), so that the native routes (``app.py``) and the DeepAnalyze-compatible ones
(``compat.py``) use the same and neither imports the other.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from ..errors import ServiceError
from .config import ServerConfig, owner_of
from .records import public
from .service import Service

__all__ = ["Owner", "fresh", "owner", "public", "service_of"]


async def owner(request: Request, authorization: Annotated[str | None, Header()] = None) -> str:
    """The caller's owner name from ``Authorization: Bearer KEY``, an active key of the database's
    (``keys.Keys.owner``). Raises ``ServiceError`` 401, or 503 when the database cannot say."""
    config: ServerConfig = request.app.state.config
    if not config.auth:
        return owner_of(None)
    scheme, _, key = (authorization or "").partition(" ")
    found = await service_of(request).keys.owner(key.strip()) if scheme.lower() == "bearer" and key.strip() else None
    if found is None:
        raise ServiceError("a valid service key is needed: send Authorization: Bearer KEY", status=401)
    return found


Owner = Annotated[str, Depends(owner)]

_PATH_IDS = {"file_id": "files", "thread_id": "threads", "run_id": "runs"}


async def fresh(request: Request) -> None:
    """Every route's first step: the records its path names, read again from the database when other
    replicas share it (a run started elsewhere a moment ago, a status another replica changed)."""
    ids = {name: [request.path_params[key]] for key, name in _PATH_IDS.items() if key in request.path_params}
    if ids:
        await service_of(request).fresh(**ids)


def service_of(request: Request) -> Service:
    service: Service = request.app.state.service
    return service
