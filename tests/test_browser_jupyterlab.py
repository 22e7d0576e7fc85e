"""The ``%%agent`` magic in a real JupyterLab, driven from chromium: what a user sees in the notebook.

One JupyterLab for the module; notebooks written into its root, opened and run
from the browser through JupyterLab's own commands (what its menus and Shift+Enter
call); the agent talks to the scripted model server over HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from browser import screenshot
from jupyterlab import JupyterLab, start_jupyterlab, stop_jupyterlab
from openai_server import OpenAIServer, Reply, python_call
from test_browser_hostile import CLEAN, CODE, INERT, MARKDOWN, assert_uncovered

pytestmark = [pytest.mark.browser, pytest.mark.kernel, pytest.mark.timeout(300)]

LAB_TIMEOUT_MS = 120_000  # JupyterLab and kernel starts on a loaded 2-core machine
STDERR = '[data-mime-type="application/vnd.jupyter.stderr"]'

_CURRENT = "window.jupyterapp.shell.currentWidget"
_READY = f"""() => {{
  const panel = window.jupyterapp && {_CURRENT};
  const kernel = panel && panel.sessionContext && panel.sessionContext.session && panel.sessionContext.session.kernel;
  return Boolean(kernel && kernel.status === 'idle' && panel.context.isReady && panel.content.widgets.length);
}}"""
_RUN = f"""async ([index, wait]) => {{
  const panel = {_CURRENT};
  panel.content.activeCellIndex = index;
  panel.content.deselectAll();
  const done = window.jupyterapp.commands.execute('notebook:run-cell');
  if (wait) await done;
}}"""


@pytest.fixture(scope="module")
def lab() -> Iterator[JupyterLab]:
    server, base = start_jupyterlab()
    try:
        yield server
    finally:
        stop_jupyterlab(server, base)


def open_notebook(page: Any, lab: JupyterLab, name: str) -> Any:
    """Open ``name`` in JupyterLab, wait for its kernel; return a locator of its cells."""
    page.goto(lab.url(f"lab/tree/{name}"))
    page.wait_for_function(_READY, timeout=LAB_TIMEOUT_MS)
    return current_cells(page)


def current_cells(page: Any) -> Any:
    panel = page.evaluate(f"{_CURRENT}.id")
    return page.locator(f"#{panel} .jp-Cell")


def run_cell(page: Any, index: int, *, wait: bool = True) -> None:
    page.evaluate(_RUN, [index, wait])


def outputs_json(page: Any) -> list[list[dict[str, Any]]]:
    """The current notebook's outputs per code cell, from JupyterLab's model."""
    outputs: list[list[dict[str, Any]]] = page.evaluate(f"""() => Array.from({_CURRENT}.content.model.cells)
        .filter(cell => cell.type === 'code').map(cell => cell.outputs.toJSON())""")
    return outputs


def watch_for(page: Any, texts: list[str]) -> None:
    """Record, in order, the first moment each of ``texts`` appears anywhere on the page.

    Reads every mutation record, not only the page as it stands when the observer runs: mutations
    are delivered in batches, and a status that is replaced within one batch (the agent's kernel
    can start that fast) would otherwise never be seen although it was shown.
    """
    page.evaluate(
        """texts => {
      window.__seen = [];
      const note = (shown) => {
        for (const text of texts) if (shown.includes(text) && !window.__seen.includes(text)) window.__seen.push(text);
      };
      new MutationObserver((records) => {
        for (const record of records) {
          if (record.type === 'characterData') note(record.target.textContent || '');
          for (const node of record.addedNodes) note(node.textContent || '');
        }
      }).observe(document.body, {subtree: true, childList: true, characterData: true});
    }""",
        texts,
    )


def test_agent_cell_shows_the_run_and_its_notebook_replays(
    page: Any, lab: JupyterLab, openai_server: OpenAIServer
) -> None:
    plot = "import matplotlib.pyplot as plt\nprint(df.describe())\nplt.plot(df['x'], df['y'])\nplt.show()"
    openai_server.add(Reply("**Looking** at `df` first.", tool_calls=(python_call(plot),)))
    openai_server.add(Reply("## Answer\n\nThe mean of y is **5.0**."))
    lab.notebook(
        "analysis.ipynb",
        [
            "import pandas as pd\ndf = pd.DataFrame({'x': [1, 2, 3], 'y': [4.0, 5.0, 6.0]})\n%load_ext kernel_agent",
            f"%%agent --share df --model m --base-url {openai_server.base_url} -w run1\nWhat is the mean of y? Plot y.",
            "print(type(_agent_run).__name__, _agent_run.stop_reason, _agent_run.answer.splitlines()[-1])",
        ],
    )
    cells = open_notebook(page, lab, "analysis.ipynb")
    run_cell(page, 0)
    watch_for(page, ["kernel-agent: starting…", "starting the agent's own kernel", "Round 1/"])
    run_cell(page, 1)
    run_cell(page, 2)

    assert page.evaluate("window.__seen") == ["kernel-agent: starting…", "starting the agent's own kernel", "Round 1/"]
    agent = cells.nth(1)
    assert agent.locator(".jp-RenderedHTMLCommon strong", has_text="Looking").count() == 1  # reasoning as markdown
    code = agent.locator("pre", has_text="plt.plot")  # code, highlighted with inline colours (no class of ours)
    assert code.count() == 1 and code.locator("span[style*='color']").count() > 0
    assert agent.locator(".jp-OutputArea-output img").count() == 1
    assert agent.locator(".jp-OutputArea-output img").evaluate("img => img.naturalWidth") > 100
    assert agent.locator("h3", has_text="Answer").count() == 1 and agent.locator("h2", has_text="Answer").count() == 0
    assert agent.get_by_text("The mean of y is").count() == 1
    assert agent.locator(STDERR).count() == 0  # a clean run shows nothing as a problem
    link = agent.locator("a", has_text="run1.ipynb")
    assert "/files/run1.ipynb" in link.get_attribute("href")  # JupyterLab resolved it in its root
    assert "Run answer The mean of y is **5.0**." in cells.nth(2).inner_text()  # _agent_run in the next cell
    assert page.log.external() == []
    screenshot(page, "jupyterlab-agent-cell")

    link.click()  # JupyterLab opens the run's notebook in a new tab
    page.wait_for_function(f"() => {_CURRENT}.context.path === 'run1.ipynb'", timeout=LAB_TIMEOUT_MS)
    page.wait_for_function(_READY, timeout=LAB_TIMEOUT_MS)
    assert page.evaluate(f"{_CURRENT}.sessionContext.session.kernel.name") == "python3"
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    exported = outputs_json(page)
    assert exported and all(output["output_type"] != "error" for cell in exported for output in cell)
    assert any(output.get("data", {}).get("image/png") for cell in exported for output in cell)


def test_hostile_outputs_and_replies_stay_inert_in_the_users_notebook(
    page: Any, lab: JupyterLab, openai_server: OpenAIServer
) -> None:
    # JupyterLab trusts the outputs of a cell the user ran: the magic must hand it nothing active.
    openai_server.add(Reply(f"**Looking** first. {MARKDOWN}", tool_calls=(python_call(CODE),)))
    openai_server.add(Reply(f"## Answer\n\nThe area is $x^2$. {MARKDOWN}"))
    lab.notebook(
        "hostile.ipynb",
        ["%load_ext kernel_agent", f"%%agent --model m --base-url {openai_server.base_url} -w hostile1\nShow it."],
    )
    cells = open_notebook(page, lab, "hostile.ipynb")
    run_cell(page, 0)
    run_cell(page, 1)

    agent = cells.nth(1)
    agent.locator("h3", has_text="Answer").wait_for(timeout=LAB_TIMEOUT_MS)
    page.wait_for_load_state("networkidle")
    assert page.evaluate(INERT, f"#{page.evaluate(f'{_CURRENT}.id')}") == CLEAN
    assert page.evaluate("window.PWNED === undefined") and page.url.endswith("lab/tree/hostile.ipynb")
    assert agent.locator("b", has_text="kept html").count() == 1 and agent.locator("td", has_text="41").count() == 1
    agent.get_by_text("BORROWED toast", exact=True).first.scroll_into_view_if_needed()
    assert_uncovered(page, headings=False)  # JupyterLab's own dialog, hover box and toast classes: not borrowed
    assert agent.locator("[class*=Dialog], [class*=HoverBox], [class*=Toastify], [id^=jp-]").count() == 0
    assert agent.locator("img[src^='data:image/svg+xml;base64,']").count() == 1  # the SVG, as an image
    assert agent.locator(".jp-RenderedHTMLCommon strong", has_text="markdown").count() >= 2  # reply, output
    assert agent.locator("mjx-container").count() >= 1  # the answer's LaTeX is still typeset
    assert "printed text" in agent.inner_text()
    assert page.log.external() == []
    screenshot(page, "jupyterlab-hostile")


def test_problems_look_like_problems(
    page: Any, lab: JupyterLab, openai_server: OpenAIServer, refused_port: int
) -> None:
    failing = "import warnings\nwarnings.warn('careful with y')\n1 / 0"
    openai_server.add(Reply("Trying.", tool_calls=(python_call(failing),)), Reply("It failed, as expected."))
    openai_server.add(Reply("Waiting.", tool_calls=(python_call("import time\ntime.sleep(120)"),)))
    lab.notebook(
        "problems.ipynb",
        [
            "%load_ext kernel_agent\nimport glob, os, tempfile",
            f"%%agent --model m --base-url {openai_server.base_url} -w p1\nDivide.",
            f"%%agent --model m --base-url {openai_server.base_url} --data nope.csv\nRead nope.csv.",
            f"%%agent --model m --base-url http://127.0.0.1:{refused_port}/v1 -w p3\nHello?",
            f"%%agent --model m --base-url {openai_server.base_url} -w p4\nSleep.",
            # a dir another process is still creating has no owner file yet: not ours
            "mine = [d for d in glob.glob(tempfile.gettempdir() + '/kernel-agent-*')\n"
            "        if os.path.isfile(d + '/owner.pid') and open(d + '/owner.pid').read() == str(os.getpid())]\n"
            "print(_agent_run.stop_reason, mine)",
        ],
    )
    cells = open_notebook(page, lab, "problems.ipynb")
    for index in range(4):
        run_cell(page, index)

    failed = cells.nth(1)
    status = failed.locator(STDERR, has_text="✗ error")
    assert status.count() == 1 and "ZeroDivisionError: division by zero" in status.inner_text()
    assert failed.locator(STDERR, has_text="careful with y").count() == 1  # a warning is not output
    background = status.evaluate("el => getComputedStyle(el).backgroundColor")
    assert background not in ("rgba(0, 0, 0, 0)", "transparent")
    missing = cells.nth(2).locator(".jp-Cell-outputArea").inner_text()
    assert "UsageError: data file not found" in missing and "nope.csv" in missing and "Traceback" not in missing
    assert not (lab.root / "agent-runs").exists()  # the failed invocation left no folder
    unreachable = cells.nth(3)
    assert unreachable.locator(STDERR, has_text="Error:").count() == 1
    assert "Traceback" not in unreachable.inner_text()
    assert unreachable.locator(".jp-OutputArea-output", has_text="…").count() == 0  # placeholder cleared

    run_cell(page, 4, wait=False)
    cells.nth(4).get_by_text("running…").wait_for(timeout=LAB_TIMEOUT_MS)
    page.locator('.jp-NotebookPanel-toolbar [data-command="notebook:interrupt-kernel"]').first.click()
    cells.nth(4).get_by_text("Interrupted: the notebook is saved").wait_for(timeout=LAB_TIMEOUT_MS)
    page.wait_for_function(_READY, timeout=LAB_TIMEOUT_MS)
    run_cell(page, 5)
    interrupted = cells.nth(4).inner_text()
    assert "KeyboardInterrupt" not in interrupted and "RuntimeError" not in interrupted
    assert cells.nth(4).locator(STDERR, has_text="✗ interrupted").count() == 1 and "running…" not in interrupted
    assert "cancelled []" in cells.nth(5).inner_text()  # the run was saved, its kernel's runtime dir removed
    screenshot(page, "jupyterlab-problems")


def test_installed_kernelspec_is_in_the_launcher(page: Any, lab: JupyterLab) -> None:
    page.goto(lab.url("lab"))
    card = page.locator(".jp-LauncherCard", has_text="Python 3 (kernel-agent)").first
    card.wait_for(timeout=LAB_TIMEOUT_MS)
    assert lab.api("kernelspecs")["kernelspecs"]["kernel-agent"]["spec"]["argv"][0].startswith("/")
    card.click()
    page.wait_for_function(_READY, timeout=LAB_TIMEOUT_MS)
    assert page.evaluate(f"{_CURRENT}.sessionContext.session.kernel.name") == "kernel-agent"
