"""The service bounds its connections (issue 48): a client trickling its request's headers, or one that
stops sending its body, is disconnected by the deadline; a connection past the cap is answered 503 and
closed while those before it stay served, and an ordinary request works once they are gone; a page on
another port of this machine is another origin, refused on a run's start and on an upload.

A real uvicorn (``service_server.py``, bounded as ``serve`` is) and raw sockets: the victim is the
service's descriptors, so the assertions are on the connections it keeps open."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from service_server import ServiceServer

from kernel_agent.server.config import ConnectionLimits

NO_MODEL = "http://127.0.0.1:9/v1"  # no request here reaches a model


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServiceServer]:
    limits = ConnectionLimits(header_timeout=1.0, body_timeout=1.0, keep_alive=60.0, max_connections=4)
    with ServiceServer(tmp_path / "data", NO_MODEL, demo=True, connections=limits) as running:
        yield running


def closed_by_server(sock: socket.socket, trickle: bytes = b"", rounds: int = 100) -> bool:
    """Send ``trickle`` one byte every 0.1 s (the recv's wait) until the server closes the connection;
    True when it did within ``rounds`` waits."""
    sock.settimeout(0.1)
    for index in range(rounds):
        try:
            if sock.recv(4096) == b"":
                return True
        except TimeoutError:
            if trickle:
                try:
                    sock.sendall(trickle[index % len(trickle) : index % len(trickle) + 1])
                except (BrokenPipeError, ConnectionResetError):
                    return True
        except ConnectionResetError:
            return True
    return False


def response(sock: socket.socket) -> bytes:
    """One whole response read from ``sock`` (its headers and ``Content-Length`` bytes of body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += sock.recv(4096)
    return head + b"\r\n\r\n" + body


@pytest.mark.timeout(30)
def test_a_client_trickling_its_headers_is_disconnected_by_the_deadline(server: ServiceServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"GET /v1/info HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        assert closed_by_server(sock, trickle=b"X-Slow: a\r\n")  # a byte every 0.1 s does not extend it
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200


@pytest.mark.timeout(30)
def test_a_client_that_stops_sending_its_body_is_disconnected(server: ServiceServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(
            b"POST /v1/files HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=b\r\n"
            b"Content-Length: 100000\r\n\r\n--b\r\n"
        )
        assert closed_by_server(sock)


@pytest.mark.timeout(60)
def test_connections_past_the_cap_are_refused_and_the_service_serves_again_after(server: ServiceServer) -> None:
    with ExitStack() as stack:
        held = []
        for _ in range(4):  # each served once and kept alive: the server has surely accepted it
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", server.port)))
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            sock.settimeout(10)
            assert response(sock).startswith(b"HTTP/1.1 200")
            held.append(sock)
        with socket.create_connection(("127.0.0.1", server.port)) as extra:
            extra.settimeout(10)
            answer = b""
            while chunk := extra.recv(4096):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 503") and b"too many open connections" in answer
        held[0].sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # those within the cap still served
        assert response(held[0]).startswith(b"HTTP/1.1 200")
    for _ in range(500):  # the server sees the four close on its own loop: asked again until it has
        if httpx.get(f"{server.url}/v1/info", timeout=10).status_code == 200:
            break
    else:
        pytest.fail("the service never served again after its connections closed")


def test_a_page_on_another_local_port_is_another_origin(server: ServiceServer) -> None:
    other = f"http://localhost:{server.port + 1 if server.port < 65535 else server.port - 1}"
    upload = {"file": ("sales.csv", b"a,b\n1,2\n", "text/csv")}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for origin in (
            other,
            f"http://127.0.0.1:{server.port + 1}",
            "http://localhost",
            f"https://127.0.0.1:{server.port}",
        ):
            started = client.post("/v1/runs", json={"task": "x"}, headers={"Origin": origin})
            assert started.status_code == 403, (origin, started.text)
            uploaded = client.post("/v1/files", files=upload, headers={"Origin": origin})
            assert uploaded.status_code == 403, (origin, uploaded.text)
        assert client.get("/v1/files").json()["data"] == []  # nothing was made by a refused request
        own = client.post("/v1/files", files=upload, headers={"Origin": f"http://127.0.0.1:{server.port}"})
        assert own.status_code == 200, own.text
        by_name = {"Origin": f"http://localhost:{server.port}", "Host": f"localhost:{server.port}"}
        assert client.post("/v1/files", files=upload, headers=by_name).status_code == 200
