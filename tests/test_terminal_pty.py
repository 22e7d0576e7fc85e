"""What a real terminal receives from ``kernel-agent run`` and ``show`` when the model's code and reply carry
escape sequences: none of them (each is shown as text), while the CLI's own colours still arrive.

The CLI runs under a real pseudo-terminal (``pty``), so rich draws its live view and colours as for a user;
everything the terminal would be sent is read from the master side and checked byte by byte."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from openai_server import OpenAIServer, Reply, python_call

pytestmark = [pytest.mark.kernel]

# The model's code prints them, raises with them, names a file with them; its reply and answer carry them.
ESCAPES = {
    "OSC 52 (clipboard)": "\x1b]52;c;UFdORUQ=\x07",
    "OSC 0 (title)": "\x1b]0;PWNED-TITLE\x07",
    "OSC 8 (link)": "\x1b]8;;https://attacker.example/\x1b\\click\x1b]8;;\x1b\\",
    "DCS (query)": '\x1bP$q"p\x1b\\',
    "CSI cursor": "\x1b[5;5H\x1b[2J",
    "C1 CSI": "\x9b31m",
    "C1 OSC": "\x9d0;PWNED-C1\x9c",
}
PAYLOAD = " ".join(ESCAPES.values())
# What must never reach the terminal: OSC and DCS introducers, the payload's cursor moves, any C1 control
# (as UTF-8: C2 80 … C2 9F), and the raw 8-bit C1 bytes.
ARRIVED = {
    "OSC": re.compile(rb"\x1b\]"),
    "DCS": re.compile(rb"\x1bP"),
    "cursor position": re.compile(rb"\x1b\[5;5H"),
    "erase display": re.compile(rb"\x1b\[2J"),
    "C1 (UTF-8)": re.compile(rb"\xc2[\x80-\x9f]"),
}
CODE = (
    f"payload = {PAYLOAD!r}\n"
    "print('out', payload)\n"
    "import sys; print('err', payload, file=sys.stderr)\n"
    "open('report' + payload[:12].replace('/', '_') + '.txt', 'w').write('x')\n"
    "raise ValueError(payload)"
)


def through_pty(command: list[str], cwd: Path) -> tuple[int, bytes]:
    """Run ``command`` with a pty as its terminal; return its exit code and every byte it wrote there."""
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, close_fds=True)
    os.close(slave)
    received = bytearray()
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                received.extend(chunk)
            elif process.poll() is not None:
                break
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    return process.returncode, bytes(received)


def assert_inert(received: bytes) -> None:
    reached = {name: pattern.findall(received)[:3] for name, pattern in ARRIVED.items() if pattern.search(received)}
    assert reached == {}, reached
    assert re.search(rb"\x1b\[[0-9;]*m", received)  # the CLI's own colours still arrive
    assert "␛]52;c;UFdORUQ=".encode() in received  # the payload is shown, as text


def test_run_and_show_send_no_escape_of_the_payload_to_the_terminal(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    openai_server.add(Reply(f"Printing {PAYLOAD} now.", tool_calls=(python_call(CODE),)))
    openai_server.add(Reply(f"## Answer\n\nThe payload was {PAYLOAD}."))
    notebook = tmp_path / "run.ipynb"
    kernel_agent = [sys.executable, "-m", "kernel_agent.cli"]
    base = ["--model", "m", "--base-url", openai_server.base_url, "--workspace", str(tmp_path / "ws")]

    code, received = through_pty(
        [*kernel_agent, "run", f"Print this: {PAYLOAD}", *base, "--out", str(notebook)], tmp_path
    )
    assert code == 0, received.decode(errors="replace")[-2000:]
    assert_inert(received)
    assert b"ValueError" in received and b"The payload was" in received

    code, received = through_pty([*kernel_agent, "show", str(notebook)], tmp_path)
    assert code == 0, received.decode(errors="replace")[-2000:]
    assert_inert(received)
    assert received.count("␛]52;c;UFdORUQ=".encode()) >= 3  # task, reasoning, output, answer: all shown


# Names the kernel gives its files: one forges the tool's own lines, one reads backwards, one hides characters;
# the last is ordinary text in other scripts, which must print as it is.
FORGED = "fake\n✔ Answer: 42 (verified)\nsales.csv"
NAMES = [FORGED, "report\u202efdp.exe", "zero\u200bwidth\u2060.txt", "Zürich_中文.csv"]
INVISIBLE = re.compile("[\u061c\u200b-\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff]")


def test_file_names_print_on_one_line_with_nothing_hidden_or_reversed(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    code = f"for name in {NAMES!r}:\n    open(name, 'w').write('x')\nprint('wrote', len({NAMES!r}))"
    openai_server.add(Reply("Writing the files.", tool_calls=(python_call(code),)))
    openai_server.add(Reply("## Answer\n\nWrote them."))
    notebook = tmp_path / "names.ipynb"
    kernel_agent = [sys.executable, "-m", "kernel_agent.cli"]
    base = ["--model", "m", "--base-url", openai_server.base_url, "--workspace", str(tmp_path / "ws")]

    code_, received = through_pty([*kernel_agent, "run", "Write files", *base, "--out", str(notebook)], tmp_path)
    assert code_ == 0, received.decode(errors="replace")[-2000:]
    for command in (None, [*kernel_agent, "show", str(notebook)]):
        if command is not None:
            code_, received = through_pty(command, tmp_path)
            assert code_ == 0, received.decode(errors="replace")[-2000:]
        text = received.decode()
        assert "files: " in text, text[-2000:]
        assert "fake\\n✔ Answer: 42 (verified)\\nsales.csv" in text  # one line, its newlines shown
        assert not re.search(r"(^|[\r\n])[ \t]*(\x1b\[[0-9;]*m)*✔ Answer: 42", text)  # never a line of its own
        assert "report<U+202E>fdp.exe" in text and "zero<U+200B>width<U+2060>.txt" in text
        assert not INVISIBLE.search(text)  # no bidi or zero-width character reaches the terminal
        assert "Zürich_中文.csv" in text


def test_ctrl_c_during_start_up_prints_only_what_is_true_and_leaves_nothing(tmp_path: Path) -> None:
    """A real SIGINT while ``demo``'s kernel starts (one that never gets ready, so the run cannot have begun):
    the run says nothing was saved, prints no "Next:" about a notebook that does not exist, and the workspace
    it made for its copy of the data is gone; the folder the user had stays."""
    import json
    import signal

    spec = tmp_path / "jupyter" / "kernels" / "never-ready"
    spec.mkdir(parents=True)
    kernel = {"argv": ["sh", "-c", "sleep 120", "{connection_file}"], "display_name": "x", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel))
    home = tmp_path / "project"
    (home / "notebooks").mkdir(parents=True)  # the user's, as in a clone: it stays
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "JUPYTER_PATH": str(tmp_path / "jupyter")}
    command = [sys.executable, "-m", "kernel_agent.cli", "demo", "--scripted", "--kernel", "never-ready"]
    process = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, cwd=home, env=env, close_fds=True)
    os.close(slave)
    copy = home / "notebooks" / "demo-run" / "sales.csv"
    received = bytearray()
    try:
        deadline = time.monotonic() + 120
        while not copy.exists():  # the data are copied and the kernel is starting: the run has not begun
            assert process.poll() is None and time.monotonic() < deadline, received.decode(errors="replace")
            if select.select([master], [], [], 0.05)[0]:
                received.extend(os.read(master, 65536))
        process.send_signal(signal.SIGINT)
        while True:
            if not select.select([master], [], [], 60)[0]:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            received.extend(chunk)
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", received.decode(errors="replace"))
    assert code == 130, text
    assert "the run had not started; nothing was saved" in text
    assert "Next:" not in text and "Traceback" not in text
    assert sorted(p.relative_to(home).as_posix() for p in home.rglob("*")) == ["notebooks"]
