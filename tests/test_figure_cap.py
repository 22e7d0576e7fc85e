"""Figures past the image cap are not rendered inside the kernel: closed, counted, said."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_agent.kernel.outputs import OutputCaps
from kernel_agent.kernel.session_sync import KernelSession

pytestmark = pytest.mark.kernel

MANY = """\
import matplotlib.pyplot as plt
for i in range(20):
    plt.figure()
    plt.plot([0, i])
print("drawn")
"""


def test_figures_past_the_cap_are_closed_unrendered_and_counted(tmp_path: Path) -> None:
    with KernelSession(tmp_path, caps=OutputCaps(max_images=3)) as session:
        names = session.execute("print(sorted(n for n in dir() if not n.startswith('_')))").stdout
        session.execute("%matplotlib inline")
        result = session.execute(MANY)
        after = session.execute("import os\nprint(len(plt.get_fignums()), os.environ.get('PYTHONSTARTUP'))").stdout
        again = session.execute("plt.plot([1, 2]); plt.show()\nplt.plot([2, 1]); plt.show()")
    assert names.strip() == "['In', 'Out', 'exit', 'get_ipython', 'open', 'quit']"  # start-up left no names
    assert result.status == "ok" and len(result.images) == 3
    assert result.dropped_images == 17 and result.stdout.startswith("drawn\n")
    assert "image cap of 3 reached; 17 images not kept (figures past the cap are closed" in result.stdout
    assert "17 images not kept" in result.to_llm_text()
    assert after == "0 None\n"  # the skipped figures were closed too; the start-up hook is gone
    assert len(again.images) == 2 and "not rendered" not in again.stdout  # counted per cell


def test_the_users_own_pythonstartup_still_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    startup = tmp_path / "startup.py"
    startup.write_text("greeting = 'from my PYTHONSTARTUP'\n")
    monkeypatch.setenv("PYTHONSTARTUP", str(startup))
    with KernelSession(tmp_path / "ws", caps=OutputCaps(max_images=1)) as session:
        session.execute("%matplotlib inline")
        greeting = session.execute(f"import os\nprint(greeting, os.environ['PYTHONSTARTUP'] == {str(startup)!r})")
        capped = session.execute(
            "import matplotlib.pyplot as plt\nfor i in range(3):\n    plt.figure(); plt.plot([0, i])"
        )
    assert greeting.stdout == "from my PYTHONSTARTUP True\n"
    assert len(capped.images) == 1 and capped.dropped_images == 2
