"""The HTTP surface of the service (FastAPI): auth, the native API, downloads and the web page.

Owns routing and translation only: request bodies in (pydantic), records out
(the owner field dropped, download URLs added), ``ServiceError`` to its HTTP
status in OpenAI's error shape (``errors.py``). What a run does lives in ``service.py``; the DeepAnalyze-compatible
routes in ``compat.py``. The page in ``static/`` is mounted last, at ``/``.
"""

from __future__ import annotations

import asyncio
import json
import mimetypes
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, File, Form, Header, Query, Request, UploadFile
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, field_validator

from .._loop import in_thread
from .._version import __version__
from ..agent.datafiles.summaries import DATA_SUFFIXES
from ..agent.names import protocol_names
from ..errors import KernelAgentError, NotebookError, ServiceError
from ..kernel.door import Door
from ..kernel.providers.registry import PROVIDER_REGISTRY, provider_for
from ..notebook.export import clean_path, legacy_clean_path
from ..plugins import warm
from ..records import STOP_WORDS
from ..safe.http import document_headers, served_type
from .bundle import spooled, write_bundle
from .compat import compat_routes
from .config import ServerConfig
from .deps import Owner, fresh, public, service_of
from .errors import install_error_handlers
from .headers import ShownAs
from .limits import MULTIPART_SLACK, BodyLimit
from .metrics import CONTENT_TYPE
from .origins import HostGuard, served_hosts
from .private import private_folder
from .service import Service
from .store import NOTEBOOK

MAX_NOTEBOOK_BYTES = 256 * 1024 * 1024  # a notebook read whole to render its page
mimetypes.init()  # reads the system's type tables now, not on the event loop at the first download

__all__ = ["create_app"]

_STATIC = Path(__file__).resolve().parent / "static"
_CHUNK = 1 << 20


class RunRequest(BaseModel):
    """``POST /v1/runs``: the task, uploaded file ids, the server's live sources a new thread queries (by name),
    and a thread to continue (a follow-up)."""

    model_config = ConfigDict(extra="forbid")
    task: str = Field(min_length=1)
    file_ids: list[str] = []
    sources: list[str] | None = None
    thread_id: str | None = None
    model: str | None = None
    protocol: str | None = None  # a registered one (``names.protocol_names``)

    @field_validator("protocol")
    @classmethod
    def _registered(cls, protocol: str | None) -> str | None:
        if protocol is not None and protocol not in protocol_names():
            raise ValueError(f"unknown protocol {protocol!r}; choose one of: {', '.join(protocol_names())}")
        return protocol


def _warm_up(config: ServerConfig) -> None:
    """What the service's first request would otherwise do on the loop: the registries' scan, and the import
    of the kernel provider its threads use. Blocking."""
    warm()
    PROVIDER_REGISTRY.preload(provider_for(config.agent.get("provider"), config.agent.get("gateway_url")))


def create_app(config: ServerConfig) -> FastAPI:
    """The ASGI app for ``config``; its lifespan starts and closes the ``Service``."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The plug-in registries: importlib.metadata scans site-packages once, here, not on the loop, and the
        # kernel provider the threads will use is imported (its modules' files read) before the first request.
        # Not in_thread: a warm-up is disposable, so a server stopped while it starts does not wait for it.
        await asyncio.to_thread(_warm_up, config)
        async with Service(config) as service:
            app.state.service = service
            yield

    app = FastAPI(title="kernel-agent", version=__version__, lifespan=lifespan, dependencies=[Depends(fresh)])
    app.state.config = config
    app.add_middleware(BodyLimit, limit=config.max_upload_bytes + MULTIPART_SLACK)
    app.add_middleware(HostGuard, hosts=served_hosts("", config.allowed_hosts))
    app.add_middleware(ShownAs)  # outermost, so every response (a 421 too): the page's CSP or a document's, and nosniff

    install_error_handlers(app)
    _native_routes(app, config)
    compat_routes(app)
    app.mount("/", StaticFiles(directory=_STATIC, html=True), name="page")
    return app


def file_page(files: list[dict[str, Any]], after: str | None, limit: int, order: str) -> dict[str, Any]:
    """One page of an OpenAI files list: the SDK pages with ``after`` (the last id it saw) until
    ``has_more`` is false, so the cursor must be honoured or its iteration never ends."""
    ordered = files[::-1] if order == "desc" else files
    if after is not None:
        ids = [f["id"] for f in ordered]
        ordered = ordered[ids.index(after) + 1 :] if after in ids else []
    page = ordered[:limit]
    return {
        "object": "list",
        "data": page,
        "has_more": len(ordered) > limit,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
    }


def _native_routes(app: FastAPI, config: ServerConfig) -> None:
    @app.get("/v1/info")
    async def info() -> dict[str, Any]:
        """What this server is: its version, the upload limit (`max_upload_bytes`), the data file suffixes the
        summaries know, the words for each stop reason, the live `sources` a thread may name (name and kind, never
        where they are), and on a demo server the demo's task, data and note. No key needed."""
        model = config.model
        return {
            "auth": config.auth,
            "models": [model] if model else None,
            "default_model": model,
            "protocols": list(protocol_names()),
            "model_choice": False,
            "version": __version__,
            "max_upload_bytes": config.max_upload_bytes,
            "stop_words": STOP_WORDS,
            "demo": _demo(config),
            "data_suffixes": DATA_SUFFIXES,
            "sources": [{"name": name, "kind": spec.kind} for name, spec in config.source_specs().items()],
        }

    @app.get("/v1/demo/data/{name}")
    async def demo_data(who: Owner, name: str) -> FileResponse:
        """A demo server's bundled data file, for the page's form."""
        from ..demo import dataset_path

        if not config.demo or name != dataset_path().name:
            raise ServiceError(f"no demo data file {name}", status=404)
        return FileResponse(dataset_path(), filename=name, media_type="text/csv")

    @app.get("/health")
    async def health() -> dict[str, str]:
        """`starting` while the app loads, then `ok`, as long as the process lives. No key needed."""
        return {"status": "ok"}

    @app.get("/ready", response_model=None)
    async def ready(request: Request) -> dict[str, str] | JSONResponse:
        """200 only while the database answers and is at this version's migration; 503 with the reason otherwise (and
        while draining). No key needed."""
        reason = await service_of(request).ready()
        if reason is not None:
            return JSONResponse({"status": "not ready", "reason": reason}, status_code=503)
        return {"status": "ready"}

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        """Prometheus' text format: runs by status, live kernels, running and starting runs, pending writes, lease
        takeovers, model latency. No key needed."""
        return Response(service_of(request).metrics.exposition(), media_type=CONTENT_TYPE)

    _file_routes(app, config)
    _run_routes(app)
    _thread_routes(app)
    _thread_notebook_routes(app)


def _demo(config: ServerConfig) -> dict[str, Any] | None:
    """What the page needs to offer the demo (None on a server that is not one)."""
    if not config.demo:
        return None
    from ..demo import SCRIPTED_NOTE, dataset_path, demo_task
    from .service import DEMO_NO_FOLLOW_UP

    name = dataset_path().name
    return {
        "task": demo_task(),
        "note": SCRIPTED_NOTE,
        "follow_up": DEMO_NO_FOLLOW_UP,
        "files": [{"name": name, "url": f"/v1/demo/data/{name}"}],
    }


def _file_routes(app: FastAPI, config: ServerConfig) -> None:
    @app.post("/v1/files")
    async def upload(
        request: Request,
        who: Owner,
        file: Annotated[UploadFile, File()],
        purpose: Annotated[str, Form()] = "assistants",
    ) -> dict[str, Any]:
        """Upload a data file (multipart `file`); 0 bytes is 422, over the limit 413. Returns its id for `file_ids`."""
        service = service_of(request)
        temp, size = await _spool(file, service, config.max_upload_bytes)
        try:
            return public(await service.add_file(who, file.filename or "", temp, size, purpose))
        finally:
            temp.unlink(missing_ok=True)

    @app.get("/v1/files")
    async def list_files(
        request: Request,
        who: Owner,
        after: str | None = None,
        limit: Annotated[int, Query(ge=1, le=10000)] = 10000,
        order: Literal["asc", "desc"] = "desc",
    ) -> dict[str, Any]:
        """This key's files, paged with `after`, `limit` and `order`."""
        return file_page([public(f) for f in service_of(request).files(who)], after, limit, order)

    @app.get("/v1/files/{file_id}")
    async def get_file(request: Request, who: Owner, file_id: str) -> dict[str, Any]:
        """One file's record."""
        return public(service_of(request).file(who, file_id))

    @app.get("/v1/files/{file_id}/content")
    async def file_content(request: Request, who: Owner, file_id: str) -> FileResponse:
        """One file's bytes."""
        service = service_of(request)
        record = service.file(who, file_id)
        return FileResponse(
            service.store.file_content(record),
            filename=record.filename,
            media_type=served_type(record.filename),
            headers=document_headers(record.filename),
        )

    @app.delete("/v1/files/{file_id}")
    async def delete_file(request: Request, who: Owner, file_id: str) -> dict[str, Any]:
        """Delete an uploaded file."""
        service_of(request).delete_file(who, file_id)
        return {"id": file_id, "object": "file", "deleted": True}


def _run_routes(app: FastAPI) -> None:
    @app.post("/v1/runs", status_code=201)
    async def start_run(request: Request, who: Owner, body: RunRequest) -> dict[str, Any]:
        """Start a run on `task` with the uploaded `file_ids` and, for a new thread, the server's live `sources` it
        queries (names `/v1/info` lists; another is 422); with `thread_id`, a follow-up in that thread's kernel
        (409 while another run of the thread is going). Past `--max-running`: 429."""
        run = await service_of(request).start_run(
            who, body.task, body.file_ids, body.thread_id, body.protocol, sources=body.sources
        )
        return public(run)

    @app.get("/v1/runs/{run_id}")
    async def get_run(request: Request, who: Owner, run_id: str) -> dict[str, Any]:
        """A run's record: `task`, `model`, `status` (`running`, `completed`, `failed`, `cancelled`, `interrupted`),
        `created_at`, `finished_at`, `elapsed_s`, its answer."""
        return public(service_of(request).run(who, run_id))

    @app.post("/v1/runs/{run_id}/cancel")
    async def cancel_run(request: Request, who: Owner, run_id: str) -> dict[str, Any]:
        """Interrupt the running code and end the run; the kernel keeps its state."""
        return public(await service_of(request).cancel(who, run_id))

    @app.get("/v1/runs/{run_id}/events")
    async def run_events(
        request: Request, who: Owner, run_id: str, last_event_id: Annotated[str | None, Header()] = None
    ) -> StreamingResponse:
        """The run's events as server-sent events (the same typed events as `--json`), from the start or after `Last-
        Event-ID`, on any replica; ends with `finished`."""
        after = int(last_event_id) if last_event_id and last_event_id.isdigit() else 0
        service = service_of(request)
        service.run(who, run_id)  # a 404 before the response starts
        return StreamingResponse(
            _sse(service.events(who, run_id, after)),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )


def _thread_routes(app: FastAPI) -> None:
    @app.get("/v1/threads")
    async def list_threads(request: Request, who: Owner) -> dict[str, Any]:
        """This key's threads (conversations), with their runs."""
        threads = sorted(service_of(request).threads(who), key=lambda t: t.updated_at, reverse=True)
        return {"object": "list", "threads": [public(t) for t in threads]}

    @app.get("/v1/threads/{thread_id}")
    async def get_thread(request: Request, who: Owner, thread_id: str) -> dict[str, Any]:
        """One thread and its runs."""
        service = service_of(request)
        thread = service.thread(who, thread_id)
        runtime = service.runtimes.get(thread_id)
        kernel = "live" if runtime is not None and runtime.live else "stopped"
        return {**public(thread), "kernel": kernel, "runs": [public(r) for r in service.thread_runs(thread)]}

    @app.delete("/v1/threads/{thread_id}")
    async def delete_thread(request: Request, who: Owner, thread_id: str) -> dict[str, Any]:
        """Delete a thread: its kernel, workspace and notebooks."""
        await service_of(request).delete_thread(who, thread_id)
        return {"id": thread_id, "object": "thread", "deleted": True}


def _thread_notebook_routes(app: FastAPI) -> None:
    @app.get("/v1/threads/{thread_id}/notebook")
    async def notebook(request: Request, who: Owner, thread_id: str) -> StreamingResponse:
        """The thread's notebook (every attempt)."""
        door = _thread_door(request, who, thread_id)
        return await _download(
            door,
            NOTEBOOK,
            f"{thread_id}.ipynb",
            f"thread {thread_id} has no notebook yet",
            media_type="application/x-ipynb+json",
        )

    @app.get("/v1/threads/{thread_id}/notebook/clean")
    async def clean_notebook(request: Request, who: Owner, thread_id: str) -> StreamingResponse:
        """The thread's clean notebook (failed attempts dropped)."""
        door = _thread_door(request, who, thread_id)
        name = clean_path(Path(NOTEBOOK)).name
        if await in_thread(door.entry_kind, name) is None:  # a thread from before 0.4: the old name
            name = legacy_clean_path(Path(NOTEBOOK)).name
        return await _download(
            door,
            name,
            f"{thread_id}.clean.ipynb",
            f"thread {thread_id} has no clean notebook yet",
            media_type="application/x-ipynb+json",
        )

    @app.get("/v1/threads/{thread_id}/notebook/html")
    async def notebook_html(request: Request, who: Owner, thread_id: str) -> HTMLResponse:
        """The thread's notebook as one self-contained HTML page."""
        door = _thread_door(request, who, thread_id)
        try:
            text = await in_thread(door.read, NOTEBOOK, MAX_NOTEBOOK_BYTES)
        except (OSError, KernelAgentError):
            raise ServiceError(f"thread {thread_id} has no notebook to show", status=404) from None
        try:
            body = await in_thread(_render, text, f"thread {thread_id}")
        except NotebookError as exc:
            raise ServiceError(str(exc), status=500) from None
        # The report itself: shown (in its sandbox), never obeyed; a saved copy is named after the thread.
        return HTMLResponse(body, headers=document_headers(f"{thread_id}.html", inline=True))

    @app.get("/v1/threads/{thread_id}/notebook/zip")
    async def notebook_zip(request: Request, who: Owner, thread_id: str) -> StreamingResponse:
        """The thread's notebooks and the data files they read, as one zip (a folder named after the thread):
        unzipped anywhere, `kernel-agent replay THREAD/THREAD.ipynb --check` replays it. 413 over the bundle
        limit (2 GiB)."""
        service = service_of(request)
        thread = service.thread(who, thread_id)
        # closed by the response once streamed (spooled), or here if the bundle fails
        target = tempfile.SpooledTemporaryFile(max_size=16 * _CHUNK, dir=str(service.store.root / "tmp"))  # noqa: SIM115
        try:
            made = await in_thread(write_bundle, service.store, thread, target)
        except BaseException:
            target.close()
            raise
        headers = {"Content-Length": str(made.size), **document_headers(f"{thread_id}.zip")}
        return StreamingResponse(spooled(target), media_type="application/zip", headers=headers)

    @app.get("/v1/threads/{thread_id}/files/{name:path}")
    async def generated_file(request: Request, who: Owner, thread_id: str, name: str) -> StreamingResponse:
        """A file the thread's code wrote in its workspace (a link is a 404)."""
        door = _thread_door(request, who, thread_id, workspace=True)
        return await _download(door, name, PurePosixPath(name).name, f"thread {thread_id} has no file {name}")


def _thread_door(request: Request, who: str, thread_id: str, *, workspace: bool = False) -> Door:
    """The door to a thread's records (its notebooks, beside the workspace) or, with ``workspace``, to
    its workspace. Raises ``ServiceError`` 404 for a thread the caller does not own."""
    service = service_of(request)
    service.thread(who, thread_id)
    return Door(service.store.workspace(thread_id) if workspace else service.store.thread_dir(thread_id))


async def _download(
    door: Door,
    relative: str,
    filename: str,
    missing: str,
    media_type: str | None = None,
) -> StreamingResponse:
    """A file in a workspace, streamed from the fd the door opened: never a path the kernel could swap,
    never through a link. 404 with ``missing`` when it is not there or not a regular file reached plainly."""
    try:
        size, chunks = await in_thread(door.stream, relative)
    except (OSError, KernelAgentError):
        raise ServiceError(missing, status=404) from None
    media = media_type or served_type(filename)
    headers = {"Content-Length": str(size), **document_headers(filename)}
    return StreamingResponse(chunks, media_type=media, headers=headers)


def _render(text: bytes, label: str) -> str:
    from ..notebook.html import render_node  # nbconvert is heavy: only when a report is asked for
    from ..notebook.load import notebook_from_text

    nb = notebook_from_text(text.decode("utf-8", errors="replace"), f"the notebook of {label}")  # bounded
    return render_node(nb, label)


async def _spool(file: UploadFile, service: Service, limit: int) -> tuple[Path, int]:
    """Copy the upload to a temp file beside the store (so it can be moved in); 413 over ``limit``."""
    folder = service.store.root / "tmp"
    private_folder(folder)
    size = 0
    with tempfile.NamedTemporaryFile(dir=folder, delete=False) as handle:
        try:
            while chunk := await file.read(_CHUNK):
                size += len(chunk)
                if size > limit:
                    raise ServiceError(f"the file is larger than the {limit}-byte upload limit", status=413)
                handle.write(chunk)
        except BaseException:
            Path(handle.name).unlink(missing_ok=True)
            raise
    return Path(handle.name), size


async def _sse(events: AsyncIterator[tuple[int | None, dict[str, Any]]]) -> AsyncIterator[str]:
    """SSE frames: ``id: N`` (for ``Last-Event-ID``; none for an event that is not the run's, as a revoked
    key's closing error) and the event's JSON; unnamed, so ``onmessage`` gets all."""
    async for event_id, event in events:
        frame = f"data: {json.dumps(event, ensure_ascii=False, default=str)}\n\n"
        yield frame if event_id is None else f"id: {event_id}\n{frame}"
