"""Text from the kernel or the model, made safe to print on a terminal: ``printable``.

A terminal obeys every escape it is sent: OSC 52 writes the clipboard, OSC 0 the title, OSC 8 makes
links, DCS queries answer into the input, CSI moves the cursor and erases what was shown. So every
C0 control other than newline and tab, ESC, DEL and the C1 controls are shown as visible symbols
(``␛]52;…``), never sent. Colour codes (SGR) are dropped rather than shown: they carry no meaning in
a log but could hide text (concealed, black on black). Carriage returns keep what a terminal would
have shown of the line (a progress bar's last state). Our own colours are rich styles added after
this, so they stay.
"""

from __future__ import annotations

import re

__all__ = ["printable"]

_SGR = re.compile(r"\x1b\[[0-9;:]*m")
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SHOWN = {0x1B: "␛", 0x7F: "␡"}


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code in _SHOWN:
        return _SHOWN[code]
    if code < 0x20:
        return chr(0x2400 + code)  # the Control Pictures block: ␀ … ␟
    return f"<U+{code:04X}>"  # C1: no picture of its own


def _last_return(line: str) -> str:
    return line.rstrip("\r").rsplit("\r", 1)[-1]


def printable(text: str) -> str:
    """``text`` with no control sequence a terminal would act on; newlines and tabs kept."""
    if "\r" in text:
        text = "\n".join(_last_return(line) for line in text.split("\n"))
    return _UNSAFE.sub(_visible, _SGR.sub("", text))
