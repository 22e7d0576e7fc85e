"""The built docs site opens from disk: in chromium, from ``file://``, every link of every page's navigation
lands on a page of the site (not on a directory listing, which is what a directory URL gives without a
server), and the CLI reference's quick start is a code block.

The site is built here, strictly, with the same command as ``make docs``, into a temp folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(target)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    return target


def nav_links(page: object) -> list[str]:
    """The absolute URLs of the page's navigation links, as the browser resolved them, without fragments."""
    hrefs: list[str] = page.eval_on_selector_all(  # type: ignore[attr-defined]
        "nav.md-nav a.md-nav__link[href]", "links => links.map(link => link.href)"
    )
    return sorted({href.split("#", 1)[0] for href in hrefs})


@pytest.mark.timeout(300)
def test_every_nav_link_of_every_page_opens_a_page_from_disk(site: Path, page: object) -> None:
    start = (site / "index.html").as_uri()
    queue, seen = [start], {start}
    while queue:
        url = queue.pop()
        page.goto(url)  # type: ignore[attr-defined]
        # a page of the site, not chromium's listing of a folder
        assert page.locator("article.md-content__inner").count() == 1, url  # type: ignore[attr-defined]
        links = nav_links(page)
        assert len(links) > 20, url  # the whole navigation, on every page
        for link in links:
            parts = urlsplit(link)
            assert parts.scheme == "file", f"{url} links outside the site: {link}"
            target = Path(unquote(parts.path))
            assert target.is_file() and site in target.parents, f"{url} links to {link}, not a page of the site"
            if link not in seen:
                seen.add(link)
                queue.append(link)
    assert len(seen) >= 25  # every page in mkdocs.yml's nav was opened


def test_the_cli_quick_start_is_a_code_block(site: Path, page: object) -> None:
    page.goto((site / "reference" / "cli.html").as_uri())  # type: ignore[attr-defined]
    block = page.locator("pre code", has_text="kernel-agent demo")  # type: ignore[attr-defined]
    assert block.count() >= 1
    lines = block.first.inner_text().splitlines()
    assert [line.split()[1] for line in lines if line.strip()][:5] == ["demo", "run", "show", "resume", "replay"]
