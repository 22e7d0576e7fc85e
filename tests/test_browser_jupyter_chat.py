"""KernelAgent in Jupyter AI's chat, in a real JupyterLab driven from chromium: a user's whole session, and the
opt-in run in the notebook's own kernel.

The chat (a ``.chat`` file, KernelAgent the chat's default persona) and the notebook open side by side;
the model is the scripted server over HTTP. What is asserted is what the page shows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import screenshot
from jupyterlab import JupyterLab, saved_cells, start_jupyterlab, stop_jupyterlab
from openai_server import OpenAIServer, Reply, python_call
from test_browser_hostile import CLEAN, CODE, HTML, INERT, MARKDOWN
from test_jupyter_persona import _comparable

from kernel_agent.jupyter.store import STORE_FILE

pytestmark = [pytest.mark.browser, pytest.mark.kernel, pytest.mark.timeout(400)]

PERSONA = "jupyter-ai-personas::kernel_agent::KernelAgentPersona"
LAB_TIMEOUT_MS = 150_000
CHAT = ".jp-chat-widget"
NOTEBOOK = ".jp-NotebookPanel"


@pytest.fixture(scope="module")
def lab(model: OpenAIServer) -> Iterator[JupyterLab]:
    server, base = start_jupyterlab(
        {
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "sk-browser-test-key-000000",
            "KERNEL_AGENT_MODEL": "scripted-m",
        },
        (f"--PersonaManager.default_persona_id={PERSONA}",),
        collaborative=True,
    )
    try:
        yield server
    finally:
        stop_jupyterlab(server, base)


_CHAT_SAVED = """() => {
  for (const widget of window.jupyterapp.shell.widgets('main')) {
    if (widget.context && widget.context.path.endsWith('.chat'))
      return widget.context.model.sharedModel.getState('dirty') === false;
  }
  return false;
}"""


def ask(page: Any, text: str) -> None:
    """Type into the chat's input and press its send button, as a user does. Once the chat is saved: the
    server routes no message that arrives while its chat is dirty (jupyterlab-chat's YChat takes those for
    messages being loaded), which a user typing after a just-opened chat or a just-finished reply could meet."""
    page.wait_for_function(_CHAT_SAVED, timeout=LAB_TIMEOUT_MS)
    field = page.locator(f"{CHAT} .jp-chat-input-container textarea").first
    field.click()
    field.fill(text)
    page.locator(f"{CHAT} .jp-chat-send-button").first.click()


def chat_text(page: Any) -> str:
    value: str = page.locator(f"{CHAT} .jp-chat-messages-container").inner_text()
    return value


def note_order(page: Any) -> None:
    """Record when the round's figure first shows in the notebook and when the answer first shows in the chat."""
    page.evaluate(f"""() => {{
      window.__order = [];
      const check = () => {{
        if (!window.__order.includes('cell') && document.querySelector('{NOTEBOOK} .jp-OutputArea-output img'))
          window.__order.push('cell');
        const chat = document.querySelector('{CHAT} .jp-chat-messages-container');
        if (!window.__order.includes('answer') && chat && chat.innerText.includes('Revenue totals'))
          window.__order.push('answer');
      }};
      new MutationObserver(check).observe(document.body, {{subtree: true, childList: true, characterData: true}});
    }}""")


_PAGE_CELLS = """(path) => {
  for (const widget of window.jupyterapp.shell.widgets('main'))
    if (widget.context && widget.context.path === path) return widget.context.model.toJSON().cells;
  return null;
}"""


def saved_equals_page(page: Any, path: Path) -> None:
    """The notebook on disk, once the server has saved it, equals what the page's notebook holds."""
    deadline = time.monotonic() + 30
    while True:
        shown = [_comparable(cell) for cell in page.evaluate(_PAGE_CELLS, path.name)]
        for cell in shown:  # the page's own view of trust, never saved; no attachments (undefined there)
            cell["metadata"] = {k: v for k, v in cell["metadata"].items() if k != "trusted"}
            if not cell.get("attachments", True):
                del cell["attachments"]
        saved = [_comparable(cell) for cell in saved_cells(path) or []]  # [] while the server writes it
        if shown == saved:
            assert any(c["cell_type"] == "code" and c["outputs"] for c in saved)
            return
        differ = [
            (a.get("id"), k, a.get(k, "-"), b.get(k, "-"))
            for a, b in zip(shown, saved, strict=False)
            for k in set(a) | set(b)
            if a.get(k, "-") != b.get(k, "-")
        ]
        assert time.monotonic() < deadline, (
            f"the saved notebook differs from the page: {str(differ)[:3000]}, "
            f"cells {[c.get('id') for c in shown]} vs {[c.get('id') for c in saved]}"
        )
        page.wait_for_timeout(200)  # the server saves the shared document a moment after it changes


def assert_the_store_is_out_of_the_root(lab: JupyterLab) -> None:
    """jupyter-collaboration's SQLite store (and its journal) live in Jupyter's data dir, where the file
    browser's listings never meet them (``kernel_agent/jupyter/store.py``): a listing of the root that
    named the journal and lost it before its ``stat`` showed "Directory not found"."""
    assert sorted(path.name for path in lab.root.rglob(".*ystore*")) == []
    assert (lab.data_dir / STORE_FILE).is_file()


def test_the_chat_runs_the_agent_and_the_rounds_appear_as_cells(
    page: Any, lab: JupyterLab, model: OpenAIServer
) -> None:
    plot = (
        "import matplotlib.pyplot as plt\nsales = pd.read_csv('sales.csv')\ntotal = int(sales.revenue.sum())\n"
        "print('total', total)\nplt.plot(sales.month, sales.revenue)\nplt.show()"
    )
    model.add(Reply("**Summing** the revenue.", tool_calls=(python_call(plot),), chunk_size=4, chunk_pause=0.05))
    model.add(Reply("## Answer\n\nRevenue totals **60**.", pause=2.0))
    model.add(
        Reply("Waiting.", tool_calls=(python_call("import time\nprint('waiting', flush=True)\ntime.sleep(120)"),))
    )
    model.add(Reply("Adding.", tool_calls=(python_call("print('total + 1 =', total + 1)"),)))
    model.add(Reply("## Answer\n\nOne more is **61**."))
    model.add(
        Reply(
            "Waiting again.",
            tool_calls=(python_call("import time\nprint('still waiting', flush=True)\ntime.sleep(120)"),),
        )
    )
    (lab.root / "sales.csv").write_text("month,revenue\n1,10\n2,20\n3,30\n")
    (lab.root / "analysis.chat").write_text("{}")
    lab.notebook("analysis.ipynb", ["import pandas as pd"])

    page.goto(lab.url("lab/tree/analysis.chat"))
    page.locator(f"{CHAT} .jp-chat-input-container textarea").first.wait_for(timeout=LAB_TIMEOUT_MS)
    page.evaluate(
        "async () => { await window.jupyterapp.commands.execute('docmanager:open', "
        "{path: 'analysis.ipynb', options: {mode: 'split-right'}}); }"
    )
    page.locator(f"{NOTEBOOK} .jp-Cell").first.wait_for(timeout=LAB_TIMEOUT_MS)
    note_order(page)

    ask(page, "@KernelAgent what is the total revenue in sales.csv?")
    page.locator(f"{CHAT} .jp-chat-rendered-message", has_text="Round 1").first.wait_for(timeout=LAB_TIMEOUT_MS)
    page.locator(f"{CHAT} .jp-chat-rendered-message", has_text="Revenue totals").first.wait_for(timeout=LAB_TIMEOUT_MS)
    assert page.evaluate("window.__order") == ["cell", "answer"]  # the cell was on the page while the run went on
    notebook = page.locator(NOTEBOOK)
    assert notebook.locator(".jp-RenderedMarkdown strong", has_text="Summing").count() == 1
    assert notebook.locator(".jp-OutputArea-output img").evaluate("img => img.naturalWidth") > 100
    notebook.locator(".jp-Cell", has_text="Revenue totals").first.wait_for(timeout=30_000)
    figure = page.locator(f"{CHAT} .jp-chat-rendered-message img[alt='Figure of round 1']").first
    figure.wait_for(timeout=30_000)  # the answer's figure, in the chat's reply
    assert figure.evaluate("img => img.complete && img.naturalWidth") > 100
    assert figure.get_attribute("src").startswith("data:image/png;base64,")
    screenshot(page, "jupyterlab-chat-answer")

    ask(page, "@KernelAgent wait")
    page.locator(f"{CHAT} .jp-chat-rendered-message", has_text="waiting").first.wait_for(timeout=LAB_TIMEOUT_MS)
    page.locator(f"{CHAT} .jp-jai-stopButton").first.click()  # Jupyter AI's stop button
    page.locator(f"{CHAT} .jp-chat-rendered-message", has_text="Stopped.").first.wait_for(timeout=60_000)
    notebook.locator(".jp-Cell", has_text="not run on Run All").first.wait_for(timeout=30_000)

    ask(page, "@KernelAgent and one more?")
    page.locator(f"{CHAT} .jp-chat-rendered-message", has_text="One more is").first.wait_for(timeout=LAB_TIMEOUT_MS)
    assert "total + 1 = 61" in chat_text(page)  # the follow-up read a variable of the first message
    notebook.locator(".jp-Cell", has_text="One more is").first.wait_for(timeout=30_000)

    ask(page, "@KernelAgent wait again")
    page.locator(f"{CHAT} .jp-chat-rendered-message", has_text="still waiting").first.wait_for(timeout=LAB_TIMEOUT_MS)
    notebook.locator(".jp-Toolbar-item[data-jp-item-name='interrupt'] button").first.click()  # the notebook's stop
    page.locator(f"{CHAT} .jp-chat-rendered-message", has_text="Stopped.").nth(1).wait_for(timeout=60_000)
    notebook.locator(".jp-Cell", has_text="still waiting").first.wait_for(timeout=30_000)
    saved_equals_page(page, lab.root / "analysis.ipynb")

    notebook.first.click()  # the notebook is the current widget: Run All in its own kernel
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'",
        timeout=LAB_TIMEOUT_MS,
    )
    page.evaluate("async () => { await window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    outputs = page.evaluate("""() => Array.from(window.jupyterapp.shell.currentWidget.content.model.cells)
        .filter(cell => cell.type === 'code').map(cell => cell.outputs.toJSON())""")
    assert all(output["output_type"] != "error" for cell in outputs for output in cell)
    assert any("total 60" in "".join(output.get("text", "")) for cell in outputs for output in cell)
    screenshot(page, "jupyterlab-chat-run-all")
    assert page.log.console_errors == [] and page.log.page_errors == []
    assert_the_store_is_out_of_the_root(lab)
    assert page.log.external() == []


@pytest.mark.parametrize("moment", ["at its start", "mid-run"])
def test_a_notebook_opened_while_the_agent_writes_it_keeps_only_the_runs_cells(
    page: Any, lab: JupyterLab, model: OpenAIServer, moment: str
) -> None:
    """Issue 49: the chat's own notebook (made by the run), opened by the user while the agent writes it, as
    the tutorial invites (as soon as it appears, or mid-run), ends with exactly the run's cells: no blank
    code cell of the page's own, saved with them."""
    name = "start" if moment == "at its start" else "middle"
    first_held, answer_held = threading.Event(), threading.Event()
    model.add(Reply("Counting.", tool_calls=(python_call("print('rows', 3)"),), hold_after=1, hold=first_held))
    model.add(Reply("## Answer\n\nThere are **3** rows.", hold_after=1, hold=answer_held))
    (lab.root / f"{name}.chat").write_text("{}")
    page.goto(lab.url(f"lab/tree/{name}.chat"))
    page.locator(f"{CHAT} .jp-chat-input-container textarea").first.wait_for(timeout=LAB_TIMEOUT_MS)
    ask(page, "@KernelAgent how many rows?")
    if moment == "mid-run":
        first_held.set()
        page.locator(f"{CHAT} .jp-chat-rendered-message", has_text="Round 2").first.wait_for(timeout=LAB_TIMEOUT_MS)
    else:
        page.wait_for_function(
            f"async () => (await window.jupyterapp.serviceManager.contents.get('{name}.ipynb').then(() => true, "
            "() => false))",
            timeout=LAB_TIMEOUT_MS,
            polling=100,
        )
    page.evaluate(
        "async (path) => { await window.jupyterapp.commands.execute('docmanager:open', "
        "{path, options: {mode: 'split-right'}}); }",
        f"{name}.ipynb",
    )
    notebook = page.locator(NOTEBOOK)
    notebook.locator(".jp-Cell").first.wait_for(timeout=LAB_TIMEOUT_MS)
    first_held.set()
    answer_held.set()
    page.locator(f"{CHAT} .jp-chat-rendered-message", has_text="There are").first.wait_for(timeout=LAB_TIMEOUT_MS)
    notebook.locator(".jp-Cell", has_text="There are").first.wait_for(timeout=30_000)
    saved_equals_page(page, lab.root / f"{name}.ipynb")
    saved = saved_cells(lab.root / f"{name}.ipynb") or []
    assert [cell["id"] for cell in saved if not cell.get("metadata", {}).get("kernel_agent")] == []
    assert not [cell for cell in saved if cell["cell_type"] == "code" and not "".join(cell["source"]).strip()]
    assert page.log.page_errors == []


def test_hostile_replies_and_outputs_stay_inert_in_the_chat_and_the_notebook(
    page: Any, lab: JupyterLab, model: OpenAIServer
) -> None:
    model.add(Reply(f"**Showing** it. {MARKDOWN}", tool_calls=(python_call(CODE),)))
    model.add(Reply(f"## Answer\n\nShown. {MARKDOWN}\n\n{HTML}\n\n![beacon](https://attacker.example/b.png)"))
    (lab.root / "hostile.chat").write_text("{}")
    lab.notebook("hostile.ipynb", ["x = 1"])

    page.goto(lab.url("lab/tree/hostile.chat"))
    page.locator(f"{CHAT} .jp-chat-input-container textarea").first.wait_for(timeout=LAB_TIMEOUT_MS)
    page.evaluate(
        "async () => { await window.jupyterapp.commands.execute('docmanager:open', "
        "{path: 'hostile.ipynb', options: {mode: 'split-right'}}); }"
    )
    page.locator(f"{NOTEBOOK} .jp-Cell").first.wait_for(timeout=LAB_TIMEOUT_MS)
    ask(page, "@KernelAgent show the outputs")
    page.locator(f"{CHAT} .jp-chat-rendered-message", has_text="Shown.").first.wait_for(timeout=LAB_TIMEOUT_MS)
    notebook = page.locator(NOTEBOOK)
    notebook.locator(".jp-Cell", has_text="printed text").first.wait_for(timeout=30_000)
    page.wait_for_load_state("networkidle")

    assert page.evaluate(INERT, "body") == CLEAN
    assert page.url.endswith("lab/tree/hostile.chat")
    assert page.locator(f"{CHAT} .jp-chat-rendered-message strong", has_text="Showing").count() >= 1  # markdown
    assert notebook.locator("td", has_text="41").count() >= 1  # the table still renders in the notebook
    assert page.log.external() == []


@pytest.fixture(scope="module")
def own_lab(model: OpenAIServer) -> Iterator[JupyterLab]:
    """A JupyterLab whose KernelAgent runs in the notebook's own kernel (``c.KernelAgentPersona.kernel``)."""
    server, base = start_jupyterlab(
        {
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "sk-browser-test-key-000000",
            "KERNEL_AGENT_MODEL": "scripted-m",
        },
        (f"--PersonaManager.default_persona_id={PERSONA}", "--KernelAgentPersona.kernel=notebook"),
        collaborative=True,
    )
    try:
        yield server
    finally:
        stop_jupyterlab(server, base)


def test_in_the_notebooks_own_kernel_the_agent_sees_the_users_variables_and_an_attached_file(
    page: Any, own_lab: JupyterLab, model: OpenAIServer
) -> None:
    model.add(
        Reply(
            "Reading yours.",
            tool_calls=(
                python_call(
                    "doubled = my_threshold * 2\nprint('doubled is', doubled, 'costs', "
                    "int(pd.read_csv(data.costs).cost.sum()))"
                ),
            ),
        )
    )
    model.add(Reply("## Answer\n\nDoubled, it is **34**."))
    (own_lab.root / "own.chat").write_text("{}")
    own_lab.notebook("own.ipynb", ["my_threshold = 17"])
    (own_lab.root / "inputs").mkdir()
    (own_lab.root / "inputs" / "costs.csv").write_text("item,cost\na,3\nb,4\n")

    page.goto(own_lab.url("lab/tree/own.chat"))
    page.locator(f"{CHAT} .jp-chat-input-container textarea").first.wait_for(timeout=LAB_TIMEOUT_MS)
    page.evaluate(
        "async () => { await window.jupyterapp.commands.execute('docmanager:open', "
        "{path: 'own.ipynb', options: {mode: 'split-right'}}); }"
    )
    notebook = page.locator(NOTEBOOK)
    notebook.locator(".jp-Cell").first.wait_for(timeout=LAB_TIMEOUT_MS)
    notebook.first.click()
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session?.kernel?.status === 'idle'",
        timeout=LAB_TIMEOUT_MS,
    )
    page.evaluate(
        "async () => { await window.jupyterapp.commands.execute('notebook:run-all-cells'); }"
    )  # the user's cell
    notebook.locator(".jp-InputArea-prompt", has_text="[1]").first.wait_for(timeout=LAB_TIMEOUT_MS)

    page.locator(f"{CHAT} .jp-chat-attach-button").first.click()  # the chat's attach button: a file dialog
    dialog = page.locator(".jp-Dialog")
    dialog.locator(".jp-DirListing-item", has_text="inputs").first.dblclick()
    dialog.locator(".jp-DirListing-item", has_text="costs.csv").first.click()
    dialog.locator(".jp-Dialog-button.jp-mod-accept").first.click()
    page.locator(f"{CHAT} .jp-chat-attachment", has_text="costs.csv").first.wait_for(timeout=30_000)
    ask(page, "@KernelAgent what is my_threshold doubled, and what do the attached costs total?")
    page.locator(f"{CHAT} .jp-chat-rendered-message", has_text="Doubled, it is").first.wait_for(timeout=LAB_TIMEOUT_MS)
    text = chat_text(page)
    assert "doubled is 34 costs 7" in text and "unconfined in your notebook's own kernel" in text
    notebook.locator(".jp-Cell", has_text="Doubled, it is").first.wait_for(timeout=30_000)
    assert page.log.console_errors == [] and page.log.page_errors == []
    assert page.log.external() == []
