"""``kernel-agent show RUN.ipynb --html`` as a browser shows it: figures, highlighted code, long outputs boxed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from browser import screenshot

pytestmark = pytest.mark.browser

EXAMPLE = Path(__file__).resolve().parent.parent / "notebooks" / "example-sales-analysis.ipynb"


def test_show_html_renders_the_run_offline(page: Any, tmp_path: Path) -> None:
    nb = nbformat.read(EXAMPLE, as_version=4)
    long_text = "".join(f"line {i}\n" for i in range(400))
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    code_cells[2].outputs.append(nbformat.v4.new_output("stream", name="stdout", text=long_text))
    source = tmp_path / "run.ipynb"
    nbformat.write(nb, source)
    kernel_agent = Path(sys.executable).with_name("kernel-agent")
    subprocess.run(
        [str(kernel_agent), "show", str(source), "--html", str(tmp_path / "run.html")], check=True, capture_output=True
    )

    page.goto((tmp_path / "run.html").as_uri())

    assert page.title().startswith("kernel-agent: Analyse sales.csv: two years of order lines")
    figures = page.locator(".jp-OutputArea-output img")
    assert figures.count() == 3
    assert all(width > 200 for width in figures.evaluate_all("imgs => imgs.map(i => i.naturalWidth)"))
    assert page.locator(".jp-InputArea .highlight span.k").count() > 10  # keywords coloured by pygments
    long_box = page.locator("pre", has_text="line 399")
    box = long_box.evaluate("el => ({client: el.clientHeight, scroll: el.scrollHeight})")
    assert box["client"] < 700 < box["scroll"]  # 400 lines kept in a scroll box
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")  # no sideways overflow
    assert page.get_by_text("Key findings", exact=False).count() >= 1
    assert page.log.external() == [] and page.log.console_errors == [] and page.log.page_errors == []
    screenshot(page, "show-html")
