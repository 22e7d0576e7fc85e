"""The web page offers the server's live sources, in chromium against the real service: a box per source
(name and kind), ticked for a new thread whose kernel then queries it. A real PostgreSQL (a role whose
password only ``PGPASSFILE`` holds), real uvicorn, the scripted model, a real sandboxed kernel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from openai_server import OpenAIServer, Reply, python_call
from pgshop import QUERIED, QUERY, Shop, open_connections
from service_server import ServiceServer

pytestmark = [pytest.mark.browser, pytest.mark.kernel, pytest.mark.postgresql]

KEY = "page-sources-key"
TIMEOUT = 60_000  # ms: a round with a cold kernel on a loaded 2-core machine


def test_the_page_offers_the_servers_sources_and_a_ticked_one_is_the_threads(
    page: Any, shop: Shop, tmp_path: Path
) -> None:
    with (
        OpenAIServer() as model,
        ServiceServer(tmp_path / "service", model.base_url, keys={KEY}, sources=(f"shop={shop.url}",)) as server,
    ):
        model.add(Reply("Querying.", tool_calls=(python_call(QUERY),)), Reply("40 orders worth 1230."))
        page.goto(server.url + "/")
        page.locator("#key-input").fill(KEY)
        page.locator("#key-input").press("Enter")
        page.locator("#new-run").wait_for(state="visible")
        box = page.locator("#source-list input[type=checkbox]")
        assert page.locator("#source-choice").is_visible() and box.count() == 1
        assert page.locator("#source-list label").inner_text() == "shop (postgresql)"  # never where it is
        box.check()
        page.locator("#task").fill("Orders per customer?")
        page.locator("#task").press("Control+Enter")
        run = page.locator(".run").first
        run.locator(".answer").wait_for(state="visible", timeout=TIMEOUT)
        assert run.locator("pre.stdout", has_text=QUERIED).count() == 1
        assert not box.is_checked()  # the next analysis starts without it unless ticked again
        threads = httpx.get(server.url + "/v1/threads", headers={"Authorization": f"Bearer {KEY}"}).json()
        assert [thread["sources"] for thread in threads["threads"]] == [["shop"]]
        assert shop.password not in page.content()
        assert page.log.console_errors == [] and page.log.page_errors == [] and page.log.external() == []
    assert open_connections(shop) == 0
