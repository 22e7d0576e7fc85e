"""Every refusal on ``/v1/*`` in OpenAI's error shape, so an SDK's exception prints the reason.

Owns the body ``{"error": {"message", "type", "param", "code"}}`` and its ``type``/``code`` for each
status, for our own refusals (``ServiceError``), FastAPI's request validation (422, the field named in
``param``), unknown routes and methods (404/405) and the body limit (413, ``limits.py``). Paths outside
``/v1`` (the web page) keep Starlette's defaults.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ..errors import ServiceError

__all__ = ["error_body", "install_error_handlers"]

_KINDS = {
    400: ("invalid_request_error", "bad_request"),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "forbidden"),
    404: ("invalid_request_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    409: ("invalid_request_error", "conflict"),
    413: ("invalid_request_error", "request_too_large"),
    422: ("invalid_request_error", "invalid_value"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error object for ``status``."""
    kind, code = _KINDS.get(status, ("server_error" if status >= 500 else "invalid_request_error", None))
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def install_error_handlers(app: FastAPI) -> None:
    """Answer every refusal under ``/v1`` in OpenAI's shape (elsewhere as Starlette would)."""

    @app.exception_handler(ServiceError)
    async def refused(_request: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse(error_body(exc.status, str(exc)), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = exc.errors()
        first = problems[0] if problems else {}
        where = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path", "header")]
        param = ".".join(where) or None
        message = f"{param}: {first.get('msg', 'invalid')}" if param else str(first.get("msg", "invalid request"))
        if len(problems) > 1:
            message += f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''})"
        return JSONResponse(error_body(422, message, param), status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        if not request.url.path.startswith("/v1/"):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and message == "Not Found":
            message = f"no such route: {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        return JSONResponse(error_body(exc.status_code, message), status_code=exc.status_code, headers=exc.headers)
