"""The service answers only for its own names (DNS rebinding): a foreign ``Host`` gets 421 and a foreign
``Origin`` 403, with keys, with auth off and in the demo, on the API and the web page alike; the loopback
names, the names ``--allowed-host`` adds and the page's own origin keep working; probes answer any Host."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from service_server import ServiceServer

from kernel_agent.server.origins import served_hosts

NO_MODEL = "http://127.0.0.1:9/v1"  # no request here reaches a model


@pytest.fixture(params=["keys", "no-auth", "demo"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ServiceServer, dict[str, str]]]:
    keys = {"origin-key"} if request.param == "keys" else None
    extra = {"demo": True} if request.param == "demo" else {}
    allowed = served_hosts("127.0.0.1", ["analysis.example", "other.example:8443"])
    with ServiceServer(tmp_path / "data", NO_MODEL, keys=keys, allowed_hosts=allowed, **extra) as running:
        yield running, ({"Authorization": "Bearer origin-key"} if keys else {})


def test_a_foreign_host_or_origin_is_refused(server: tuple[ServiceServer, dict[str, str]]) -> None:
    running, auth = server
    with httpx.Client(base_url=running.url, headers=auth, timeout=30) as client:
        for path in ("/v1/threads", "/", "/v1/info"):
            refused = client.get(path, headers={"Host": "attacker.example"})
            assert refused.status_code == 421, (path, refused.text)
            assert "does not answer for the host 'attacker.example'" in refused.json()["error"]["message"]
            assert client.get(path, headers={"Host": f"attacker.example:{running.port}"}).status_code == 421
        posted = client.post("/v1/runs", json={"task": "x"}, headers={"Origin": "http://attacker.example"})
        assert posted.status_code == 403 and "origin" in posted.json()["error"]["message"]
        for origin in ("null", f"http://127.0.0.1.attacker.example:{running.port}", "file://", "http://other.example"):
            assert client.get("/v1/threads", headers={"Origin": origin}).status_code == 403, origin
        assert client.get("/v1/threads", headers={"Host": ""}).status_code == 421
        assert len(client.get("/v1/threads").json()["threads"]) == 0  # nothing was made by a refused request


def test_our_own_names_and_the_pages_origin_work(server: tuple[ServiceServer, dict[str, str]]) -> None:
    running, auth = server
    port = running.port
    with httpx.Client(base_url=running.url, headers=auth, timeout=30) as client:
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}", "Analysis.Example"):
            assert client.get("/v1/threads", headers={"Host": host}).status_code == 200, host
        assert client.get("/v1/threads", headers={"Host": "other.example:8443"}).status_code == 200
        assert client.get("/v1/threads", headers={"Host": "other.example:8444"}).status_code == 421
        page = {"Origin": f"http://127.0.0.1:{port}"}  # what the web page's fetches send
        assert client.get("/v1/threads", headers=page).status_code == 200
        assert client.get("/v1/threads", headers={"Origin": "https://analysis.example"}).status_code == 200
        for probe in ("/health", "/ready"):
            assert client.get(probe, headers={"Host": "10.1.2.3:8200"}).status_code == 200


def test_served_hosts_adds_the_listen_address_and_the_allowed_names() -> None:
    assert served_hosts("127.0.0.1") == ("127.0.0.1", "localhost", "[::1]")
    assert served_hosts("0.0.0.0") == ("127.0.0.1", "localhost", "[::1]")
    assert served_hosts("10.0.0.5", ["Box.Example"]) == ("127.0.0.1", "localhost", "[::1]", "10.0.0.5", "box.example")
    assert served_hosts("fd00::5")[-1] == "[fd00::5]"
