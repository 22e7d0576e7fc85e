"""The JupyterLab chat's scripted demo as a new user meets it, in chromium: one notebook in the folder, the open
notebook following the newest round, one "Answer".

JupyterLab runs with ``--KernelAgentPersona.scripted_demo=True`` and no model anywhere; the user asks in the chat,
opens the notebook the chat names and watches it. What is asserted is what the page shows.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from browser import screenshot
from jupyterlab import JupyterLab, start_jupyterlab, stop_jupyterlab
from test_browser_jupyter_chat import CHAT, LAB_TIMEOUT_MS, NOTEBOOK, PERSONA, ask

pytestmark = [pytest.mark.browser, pytest.mark.kernel, pytest.mark.timeout(400)]

# The newest round's first cell (the highest ``kernel_agent.round`` in the notebook) and whether it lies in the
# notebook's visible area, measured as the page lays it out.
_NEWEST_IN_VIEW = """() => {
  const panel = window.jupyterapp.shell.widgets('main').find(w => w.context && w.context.path === 'city.ipynb');
  const notebook = panel.content, cells = Array.from(notebook.model.cells);
  const about = cells.map(cell => cell.getMetadata('kernel_agent') || {});
  const rounds = about.map(meta => (meta.role === 'answer' ? 0 : meta.round || 0));
  const newest = Math.max(...rounds), index = rounds.indexOf(newest), widget = notebook.widgets[index];
  const scroller = notebook.outerNode || notebook.node;
  if (!widget || !widget.node.isConnected) return {newest, index, shown: false, top: scroller.scrollTop};
  const view = scroller.getBoundingClientRect(), cell = widget.node.getBoundingClientRect();
  return {newest, index, shown: cell.top >= view.top - 1 && cell.top < view.bottom, top: scroller.scrollTop};
}"""
_SETUP_FOLDED = """() => {
  const panel = window.jupyterapp.shell.widgets('main').find(w => w.context && w.context.path === 'city.ipynb');
  const notebook = panel.content, cells = Array.from(notebook.model.cells);
  const index = cells.findIndex(cell => (cell.getMetadata('kernel_agent') || {}).role === 'setup');
  return index >= 0 && notebook.widgets[index].inputHidden === true;
}"""


@pytest.fixture(scope="module")
def demo_lab() -> Iterator[JupyterLab]:
    no_model = {"KERNEL_AGENT_MODEL": "", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}  # nothing is asked there
    server, base = start_jupyterlab(
        no_model,
        (f"--PersonaManager.default_persona_id={PERSONA}", "--KernelAgentPersona.scripted_demo=True"),
        collaborative=True,
    )
    try:
        yield server
    finally:
        stop_jupyterlab(server, base)


def test_the_demo_chat_leaves_one_notebook_that_follows_the_newest_round_and_says_answer_once(
    page: Any, demo_lab: JupyterLab
) -> None:
    (demo_lab.root / "city.chat").write_text("{}")
    page.goto(demo_lab.url("lab/tree/city.chat"))
    page.locator(f"{CHAT} .jp-chat-input-container textarea").first.wait_for(timeout=LAB_TIMEOUT_MS)

    ask(page, "@KernelAgent what drives revenue?")
    page.locator(f"{CHAT} .jp-chat-rendered-message", has_text="scripted").first.wait_for(timeout=LAB_TIMEOUT_MS)
    page.evaluate(  # the user opens the notebook the chat names, beside the chat
        "async () => { await window.jupyterapp.commands.execute('docmanager:open', "
        "{path: 'city.ipynb', options: {mode: 'split-right'}}); }"
    )
    notebook = page.locator(NOTEBOOK)
    notebook.locator(".jp-Cell").first.wait_for(timeout=LAB_TIMEOUT_MS)
    answer = notebook.locator(".jp-RenderedMarkdown", has_text="Sales 2023–2024: findings").first
    answer.wait_for(timeout=LAB_TIMEOUT_MS)  # the run's answer, synced into the notebook

    where = page.evaluate(_NEWEST_IN_VIEW)
    assert where["newest"] >= 3 and where["shown"] and where["top"] > 0, where  # it scrolled, to the newest round
    assert page.evaluate(_SETUP_FOLDED)  # the setup cell's source folded (its source_hidden), not filling the view
    headings = [
        text.replace("¶", "").strip()
        for text in notebook.locator(".jp-RenderedMarkdown :is(h1, h2, h3, h4)").all_inner_texts()
    ]
    assert [text for text in headings if re.match(r"\s*(final\s+)?answer\b", text, re.IGNORECASE)] == ["Answer"]

    page.evaluate("async () => { await window.jupyterapp.commands.execute('filebrowser:refresh'); }")
    listing = page.locator(".jp-DirListing-content .jp-DirListing-itemName")
    listing.filter(has_text="city-agent").first.wait_for(timeout=30_000)
    names = listing.all_inner_texts()
    assert [name for name in names if name.endswith(".ipynb")] == ["city.ipynb"], names
    assert sorted(names) == ["city-agent", "city.chat", "city.ipynb"], names
    assert (demo_lab.root / ".city-agent.ipynb").is_file() and (demo_lab.root / ".city-agent.clean.ipynb").is_file()
    screenshot(page, "jupyterlab-chat-demo-follows")
    assert page.log.page_errors == []
    assert page.log.external() == []
