"""Issue 27's benchmark of the chat persona in JupyterLab, seen from chromium. ``NAME`` and ``PARTS``.

* ``cells``: a scripted run of eight rounds (the model answering each request after 0.5 s: a fast model)
  through KernelAgent in Jupyter AI's chat, with the
  notebook open beside it. Each round's code ends by printing ``time.time()`` (the moment the code
  finished, on this machine's clock); the page records ``Date.now()`` when that round's output first
  is in the notebook's DOM (``textContent``: ``innerText`` would force a layout on every mutation, and
  JupyterLab skips rendering cells scrolled out of view). The row is the median delay (target ≤ 250 ms): the
  output reaching the agent, written into the shared document, sent to the page and rendered. Two rows split
  it where a second client of the document (Python, off the browser) first has that text, and where the page's
  websocket hands it to the page's script (a wrapped ``WebSocket``, before JupyterLab loads): the gap between
  the two is the page's main thread, busy rendering earlier updates (new cells' editors, the chat message).
* ``cells_back_to_back``: the same with the model answering at once, eight rounds in about a second: a
  stress case (a round far faster than a model can give one), where the page falls behind on rendering.
* ``first_token``: the time to the first streamed text of the model's reply, from the click on the
  chat's send button to the text on the page, vs ``kernel-agent run --json`` from its start to its
  first ``text_delta`` event, on the same scripted model (a fresh kernel on both sides; both send the first
  request while the kernel starts). Target (issue 38): the chat no later than the CLI (ratio at most 1), though
  the chat's side includes Jupyter AI's routing and the shared document's round trip.

Both sides check their answers: a missing output or event raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from report import Row, median, scaled

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from jupyterlab import start_jupyterlab, stop_jupyterlab
from openai_server import OpenAIServer, Reply, python_call

NAME = "jupyter"
MODEL_PAUSE_S = 0.5  # the scripted model's answer time in ``cells``: a fast model (a real one takes seconds)

PERSONA = "jupyter-ai-personas::kernel_agent::KernelAgentPersona"
CHAT = ".jp-chat-widget"
WAIT_MS = 180_000
_SAVED = """() => {
  for (const widget of window.jupyterapp.shell.widgets('main'))
    if (widget.context && widget.context.path.endsWith('.chat'))
      return widget.context.model.sharedModel.getState('dirty') === false;
  return false;
}"""
_WIRE = """() => {  // before JupyterLab loads: when each round's output first arrives over a websocket
  window.__wire = {};
  const decoder = new TextDecoder('utf-8', {fatal: false});
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener('message', (event) => {
        const data = event.data;
        if (!(data instanceof ArrayBuffer) && !(data instanceof Blob) && typeof data !== 'string') return;
        const now = Date.now() / 1000;
        const read = (text) => { for (const match of text.matchAll(/round (\\d+) done at [0-9]/g))
          if (!(match[1] in window.__wire)) window.__wire[match[1]] = now; };
        if (typeof event.data === 'string') read(event.data);
        else if (event.data instanceof ArrayBuffer) read(decoder.decode(event.data));
      });
    }
  };
}"""
_WATCH = """() => {
  window.__seen = {};
  window.__firstText = null;
  new MutationObserver(() => {
    const now = Date.now() / 1000;
    const notebook = document.querySelector('.jp-NotebookPanel');
    if (notebook) for (const match of notebook.textContent.matchAll(/round (\\d+) done at ([0-9.]+)/g))
      if (!(match[1] in window.__seen)) window.__seen[match[1]] = [parseFloat(match[2]), now];
    const chat = document.querySelector('.jp-chat-messages-container');
    if (window.__firstText === null && chat && chat.innerText.includes('Looking first')) window.__firstText = now;
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def _round(k: int) -> str:
    return f"import time\nx{k} = {k}\nprint('round {k} done at', repr(time.time()))"


def _open(page: Any, lab: Any, chat: str, notebook: str) -> None:
    page.goto(lab.url(f"lab/tree/{chat}"))
    page.locator(f"{CHAT} textarea").first.wait_for(timeout=WAIT_MS)
    page.evaluate(
        "async (path) => { await window.jupyterapp.commands.execute('docmanager:open', "
        "{path, options: {mode: 'split-right'}}); }",
        notebook,
    )
    page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for(timeout=WAIT_MS)
    page.evaluate(_WATCH)
    page.wait_for_function(_SAVED, timeout=WAIT_MS)


def _send(page: Any, text: str) -> float:
    page.locator(f"{CHAT} textarea").first.fill(text)
    sent = page.evaluate("() => Date.now() / 1000")
    page.locator(f"{CHAT} .jp-chat-send-button").first.click()
    return float(sent)


def _browser(playwright: Any) -> Any:
    from browser import FLAGS

    return playwright.chromium.launch(
        executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"), args=FLAGS, headless=True
    )


class _Stage:
    """The scripted model, the JupyterLab (persona, real-time collaboration) and the chromium the three parts
    share: a lab's start costs seconds. Each part opens its own chat and notebook in it."""

    def __init__(self) -> None:
        from playwright.sync_api import sync_playwright

        self._stack = contextlib.ExitStack()
        try:
            self.model = self._stack.enter_context(OpenAIServer())
            playwright = self._stack.enter_context(sync_playwright())
            lab, base = start_jupyterlab(
                {"OPENAI_BASE_URL": self.model.base_url, "KERNEL_AGENT_MODEL": "scripted-m"},
                (f"--PersonaManager.default_persona_id={PERSONA}",),
                collaborative=True,
            )
            self._stack.callback(stop_jupyterlab, lab, base)
            self.lab = lab
            self.browser = _browser(playwright)
            self._stack.callback(self.browser.close)
        except BaseException:
            self._stack.close()
            raise
        self._names = itertools.count()

    def name(self, stem: str) -> str:
        """A file name no earlier part used in this lab."""
        return f"{stem}-{next(self._names)}"

    def close(self) -> None:
        self._stack.close()


_stage: _Stage | None = None


def _shared() -> _Stage:
    """The stage, started at the first part that needs it (``close()`` stops it)."""
    global _stage
    if _stage is None:
        _stage = _Stage()
    if _stage.model.remaining:  # an earlier part that failed left replies unread: they are not this part's
        raise RuntimeError(f"the scripted model still holds {_stage.model.remaining} replies of an earlier part")
    return _stage


def close() -> None:
    """Stop the shared model, JupyterLab and chromium (``run.py`` calls it after this module's last part)."""
    global _stage
    stage, _stage = _stage, None
    if stage is not None:
        stage.close()


class _Listener:
    """A second client of the notebook's shared document (``ydoc_client``, in a thread with its own loop), off
    the browser: when each round's output first reaches it is the server's part of the delay."""

    def __init__(self, lab: Any, path: str) -> None:
        self.lab, self.path = lab, path
        self.arrived: dict[str, float] = {}
        self.joined = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._listen()), daemon=True)
        self.thread.start()
        if not self.joined.wait(60):
            raise AssertionError("the listener did not join the notebook's document")

    async def _listen(self) -> None:
        from ydoc_client import shared_document

        def heard(event: Any) -> None:
            for match in re.finditer(rb"round (\d+) done at [0-9]", event.update):
                self.arrived.setdefault(match.group(1).decode(), time.time())

        async with shared_document(self.lab.port, self.lab.token, self.path, "notebook") as notebook:
            subscription = notebook.ydoc.observe(heard)
            self.joined.set()
            while not self.done.is_set():
                await asyncio.sleep(0.05)  # until the bench is done with the page
            notebook.ydoc.unobserve(subscription)

    def close(self) -> None:
        self.done.set()
        self.thread.join(30)


def cells(quick: bool, pause: float = MODEL_PAUSE_S) -> list[Row]:
    """Median seconds from a round's code finishing to its output showing in the open notebook, the model
    answering each request after ``pause`` seconds."""
    rounds = scaled(quick, 8, 3, 1)
    stage = _shared()
    lab, name = stage.lab, stage.name("bench")
    for k in range(1, rounds + 1):
        stage.model.add(Reply(f"Round {k}.", tool_calls=(python_call(_round(k)),), pause=pause))
    stage.model.add(Reply("Done."))
    (lab.root / f"{name}.chat").write_text("{}")
    lab.notebook(f"{name}.ipynb", ["# the user's own cell"])
    page = stage.browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.add_init_script(f"({_WIRE})()")
        _open(page, lab, f"{name}.chat", f"{name}.ipynb")
        listener = _Listener(lab, f"{name}.ipynb")
        try:
            _send(page, "@KernelAgent run the rounds")
            page.wait_for_function(f"() => Object.keys(window.__seen).length >= {rounds}", timeout=WAIT_MS)
            seen, wire = page.evaluate("[window.__seen, window.__wire]")
            page.locator(f"{CHAT} .jp-chat-rendered-message", has_text="Done.").first.wait_for(timeout=WAIT_MS)
        finally:
            listener.close()
    finally:
        page.close()
    delays = [shown - finished for finished, shown in seen.values()]
    server = [listener.arrived[k] - finished for k, (finished, _shown) in seen.items() if k in listener.arrived]
    if not server:
        raise AssertionError(f"the second client saw no round's output (the page saw {sorted(seen)})")
    wired = [wire[k] - finished for k, (finished, _shown) in seen.items()]
    page = [shown - wire[k] for k, (_finished, shown) in seen.items()]
    pace = f"the model answering after {pause:g} s" if pause else "rounds back to back (the model answering at once)"
    return [
        Row(
            f"round's code finished → its output visible in the open notebook, {pace}, median of {rounds} rounds "
            f"(max {max(delays) * 1000:.0f} ms)",
            median(delays),
            max_seconds=0.25 if pause else None,
        ),
        Row(
            f"  ↳ code finished → the update at a second client of the document, off the browser (the server: "
            f"kernel, agent, shared document; max {max(server) * 1000:.0f} ms)",
            median(server),
        ),
        Row(
            f"  ↳ code finished → the page's websocket hands the update to its script (the server, then the "
            f"wait for the page's busy main thread; max {max(wired) * 1000:.0f} ms)",
            median(wired),
        ),
        Row(
            f"  ↳ handed to the script → the output in the page's DOM (JupyterLab; max {max(page) * 1000:.0f} ms)",
            median(page),
        ),
    ]


def _cli_first_token(model: OpenAIServer, folder: Path) -> float:
    model.add(Reply("Looking first.", tool_calls=(python_call("print(1)"),)), Reply("One."))
    started = time.monotonic()
    command = [
        str(Path(sys.executable).with_name("kernel-agent")),
        "run",
        "--json",
        "--model",
        "m",
        "--base-url",
        model.base_url,
        "-w",
        str(folder / f"cli-{time.monotonic_ns()}"),
        "Say one.",
    ]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=folder) as process:
        first = None
        assert process.stdout is not None
        for line in process.stdout:
            if first is None and json.loads(line).get("event") == "text_delta":
                first = time.monotonic() - started
        process.wait()
    if first is None:
        raise AssertionError("kernel-agent run streamed no text")
    return first


def first_token(quick: bool) -> list[Row]:
    """The chat's time to the first streamed text vs the CLI's, alternating, one fresh kernel each."""

    samples = scaled(quick, 3, 1, 1)
    chat_times: list[float] = []
    cli_times: list[float] = []
    stage = _shared()
    lab, model = stage.lab, stage.model
    for _ in range(samples):
        cli_times.append(_cli_first_token(model, lab.root))
        model.add(Reply("Looking first.", tool_calls=(python_call("print(1)"),)), Reply("One."))
        name = stage.name("t")
        (lab.root / f"{name}.chat").write_text("{}")
        lab.notebook(f"{name}.ipynb", ["1"])
        page = stage.browser.new_page(viewport={"width": 1280, "height": 900})
        try:
            _open(page, lab, f"{name}.chat", f"{name}.ipynb")
            sent = _send(page, "@KernelAgent say one")
            page.wait_for_function("() => window.__firstText !== null", timeout=WAIT_MS)
            chat_times.append(page.evaluate("window.__firstText") - sent)
            page.locator(f"{CHAT} .jp-chat-rendered-message", has_text="One.").first.wait_for(timeout=WAIT_MS)
        finally:
            page.close()
    return [
        Row(
            f"time to the first streamed token, median of {samples}: the chat (send click → text on the page) "
            "vs kernel-agent run --json (start → first text_delta)",
            median(chat_times),
            median(cli_times),
            max_ratio=1.0,
        )
    ]


PARTS: dict[str, Any] = {
    "cells": cells,
    "cells_back_to_back": lambda quick: cells(quick, pause=0.0),
    "first_token": first_token,
}
