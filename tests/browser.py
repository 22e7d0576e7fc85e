"""Pytest plugin: one real browser per module (Debian's chromium through Playwright).

Browser downloads are not possible on these machines, so Playwright drives the
system chromium by ``executable_path`` (``$CHROMIUM``, default /usr/bin/chromium;
``make test`` installs it). A missing browser fails the test with what to
install: never a skip. Each test gets a fresh context and page (``page``) that
records console errors, page errors and every requested URL (``PageLog``), and
may save a screenshot under tests/artifacts/ (ignored by git).

Playwright's sync API keeps its event loop marked as running on the main thread
while the browser is open, which breaks ``asyncio.run`` in every test after it;
so the browser (and Playwright with it) lives for one module only, and whatever
runs next on that process, in any order (pytest-xdist hands out modules
largest first), finds no loop running.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def chromium_path() -> str:
    path = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    if not (Path(path).is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"the browser tests need chromium at {path}: run `make test` as root (it apt-get installs it), "
            "or `apt-get install chromium`, or set CHROMIUM=/path/to/chromium",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """One headless chromium for the module, with a fresh profile removed afterwards."""
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    profile = tempfile.mkdtemp(prefix="browser-profile-")
    try:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile,
                executable_path=executable,
                args=FLAGS,
                headless=True,
                viewport={"width": 1280, "height": 900},
            )
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


@dataclass
class PageLog:
    """What a page did: console errors, uncaught exceptions, and every URL it requested."""

    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def external(self) -> list[str]:
        """Requests that left this machine (anything but 127.0.0.1 and file:, data:, blob: URLs)."""
        return [
            url
            for url in self.requests
            if urlsplit(url).scheme not in ("data", "blob", "about", "file") and urlsplit(url).hostname != "127.0.0.1"
        ]


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    """A fresh page in the shared browser; ``page.log`` is its ``PageLog``. Closed after the test."""
    tab = browser.new_page()  # type: ignore[attr-defined]
    log = PageLog()
    tab.on("console", lambda message: log.console_errors.append(message.text) if message.type == "error" else None)
    tab.on("pageerror", lambda error: log.page_errors.append(str(error)))
    tab.on("request", lambda request: log.requests.append(request.url))
    tab.log = log
    yield tab
    tab.close()


def screenshot(page: object, name: str) -> Path:
    """Save ``page`` as tests/artifacts/NAME.png (a test artifact for people to look at; not committed)."""
    ARTIFACTS.mkdir(exist_ok=True)
    target = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(target), full_page=True)  # type: ignore[attr-defined]
    return target
