"""What the model reads of an execution: short tracebacks, and errors that name the limit behind them.

Real kernels: a pandas KeyError, a MemoryError under a memory limit, a write past the file size
limit. The notebook's outputs keep the full traceback; only ``to_llm_text`` is shortened.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_agent.kernel.sandbox.limit_notes import limit_note
from kernel_agent.kernel.sandbox.limits import Limits
from kernel_agent.kernel.session_sync import KernelSession
from kernel_agent.result import ErrorInfo, compact_traceback, fold_traceback, strip_ansi

pytestmark = pytest.mark.kernel


def test_frames_inside_installed_packages_are_one_line_each_for_the_model(tmp_path: Path) -> None:
    with KernelSession(tmp_path) as session:
        result = session.execute("import pandas as pd\ndf = pd.DataFrame({'a': [1]})\ndf['nope']")
    full = "\n".join(result.error.traceback)  # type: ignore[union-attr]
    text = result.to_llm_text()
    assert "site-packages/pandas/core/frame.py" in full and "indexer = self.columns.get_loc(key)" in full
    assert "  pandas/core/frame.py:" in text and " in DataFrame.__getitem__(self, key)" in text
    assert "site-packages" not in text and "self.columns.get_loc(key)" not in text  # source lines of pandas gone
    assert "----> 3 df['nope']" in text and text.rstrip().endswith("shown as one line each)")
    assert len(text) < len(full) / 2
    notebook_traceback = next(o for o in result.outputs if o["output_type"] == "error")["traceback"]
    assert any("site-packages/pandas/core/frame.py" in line for line in notebook_traceback)  # kept whole
    folded = fold_traceback([strip_ansi(line) for line in notebook_traceback])  # the same rule, for people
    assert folded.lead[0].startswith("Cell In[1], line 3") and "----> 3 df['nope']" in folded.lead[0]
    assert folded.lead[-1] == "KeyError: 'nope'" and len(folded.lead) == 2
    assert "  pandas/core/frame.py:" in "\n".join(folded.library) and all(
        "site-packages" not in f for f in folded.library
    )


def test_frames_of_the_analysed_code_stay_whole() -> None:
    frames = [
        "KeyError                                  Traceback (most recent call last)",
        "Cell In[2], line 1\n----> 1 helper()\n",
        "File /work/run/helpers.py:3, in helper()\n      2 def helper():\n----> 3     return {}['x']\n",
        "File /usr/lib/python3.11/json/__init__.py:346, in loads(s)\n    345 if cls is None:\n--> 346     return x\n",
        "KeyError: 'x'",
    ]
    out = compact_traceback(frames)
    assert out[:3] == frames[:3] and out[3] == "  json/__init__.py:346 in loads(s)" and out[4] == frames[4]
    assert out[5] == "(1 frame(s) inside installed packages shown as one line each)"
    assert compact_traceback(frames[:3]) == frames[:3]
    folded = fold_traceback(frames)
    assert folded.lead == (frames[1].rstrip("\n"), frames[2].rstrip("\n"), "KeyError: 'x'")  # header left out
    assert folded.library == ("  json/__init__.py:346 in loads(s)",)


def test_a_chained_traceback_leads_with_the_cell_line_and_the_last_exception() -> None:
    frames = [
        "-" * 75,
        "KeyError                                  Traceback (most recent call last)",
        "File /venv/lib/python3.11/site-packages/pandas/core/indexes/base.py:3816, in Index.get_loc(self, key)\n"
        "-> 3816     return self._engine.get_loc(casted_key)\n",
        "File pandas/_libs/index.pyx:172, in pandas._libs.index.IndexEngine.get_loc()\n",
        "KeyError: 'profit'",
        "\nThe above exception was the direct cause of the following exception:\n",
        "KeyError                                  Traceback (most recent call last)",
        "Cell In[7], line 2\n      1 sales = data['sales']\n----> 2 sales['profit']\n",
        "File /venv/lib/python3.11/site-packages/pandas/core/frame.py:4102, in DataFrame.__getitem__(self, key)\n",
        "KeyError: 'profit'",
    ]
    folded = fold_traceback(frames)
    assert folded.lead == (
        "Cell In[7], line 2\n      1 sales = data['sales']\n----> 2 sales['profit']",
        "KeyError: 'profit'",
    )
    assert folded.library == (
        "  pandas/core/indexes/base.py:3816 in Index.get_loc(self, key)",
        "  pandas/_libs/index.pyx:172 in pandas._libs.index.IndexEngine.get_loc()",
        "  pandas/core/frame.py:4102 in DataFrame.__getitem__(self, key)",
    )
    assert fold_traceback([]).lead == () and fold_traceback(["SyntaxError: bad"]).lead == ("SyntaxError: bad",)


def test_a_memory_error_under_the_memory_limit_names_the_limit(tmp_path: Path) -> None:
    with KernelSession(tmp_path, limits=Limits(memory_mb=4096)) as session:
        result = session.execute("block = bytearray(6 * 1024 ** 3)")
        assert result.status == "error" and result.error.ename == "MemoryError"  # type: ignore[union-attr]
        assert "memory limit of 4,096 MB" in result.note and "Limits.memory_mb" in result.note
        assert "[limit] the kernel's memory limit of 4,096 MB" in result.to_llm_text()
        assert session.execute("print('alive')").stdout == "alive\n"  # a policy, and the kernel lives on


def test_a_file_past_the_size_limit_names_the_limit(tmp_path: Path) -> None:
    with KernelSession(tmp_path, limits=Limits(max_file_mb=1)) as session:
        result = session.execute("open('big.bin', 'wb').write(b'x' * 3 * 1024 * 1024)")
        plain = session.execute("raise OSError('something else')")
    assert "File too large" in str(result.error) and "file size limit of 1 MB" in result.note
    assert plain.status == "error" and plain.note == ""


def test_limit_notes_only_for_limits_that_are_on() -> None:
    eagain = ErrorInfo(
        "BlockingIOError",
        "[Errno 11] Resource temporarily unavailable",
        ("Cell In[4], line 3\n----> 3 pid = os.fork()\n",),
    )
    thread = ErrorInfo("RuntimeError", "can't start new thread")
    socket_eagain = ErrorInfo(
        "BlockingIOError",
        "[Errno 11] Resource temporarily unavailable",
        ("Cell In[5], line 1\n----> 1 sock.recv(10)\n",),
    )
    assert "limit of 64 processes and threads" in limit_note(eagain, Limits(max_processes=64))
    assert limit_note(socket_eagain, Limits(max_processes=64)) == ""  # a non-blocking socket, not the limit
    assert "Limits.max_processes" in limit_note(thread, Limits(max_processes=64))
    assert limit_note(eagain, Limits.off()) == ""
    assert limit_note(ErrorInfo("MemoryError", ""), Limits.off()) == ""
    assert limit_note(ErrorInfo("KeyError", "'x'"), Limits()) == "" and limit_note(None, Limits()) == ""


def test_running_out_of_processes_under_the_limit_names_the_limit(tmp_path: Path) -> None:
    spawn = (
        "import threading\nrelease = threading.Event()\nthreads = []\n"
        "while len(threads) < 500:  # a guard of our own, should the limit be missing\n"
        "    thread = threading.Thread(target=release.wait)\n    thread.start()\n    threads.append(thread)"
    )
    with KernelSession(tmp_path, limits=Limits(max_processes=32)) as session:
        result = session.execute(spawn, timeout=60)
        session.execute("release.set()\nfor thread in threads: thread.join()")
    assert result.status == "error", result.stdout
    assert "limit of 32 processes and threads (Limits.max_processes)" in result.note
    assert "[limit]" in result.to_llm_text()
