"""Text from the kernel or the model, made safe to print on a terminal: ``printable`` and ``one_line``.

A terminal obeys every escape it is sent: OSC 52 writes the clipboard, OSC 0 the title, OSC 8 makes
links, DCS queries answer into the input, CSI moves the cursor and erases what was shown. So every
C0 control other than newline and tab, ESC, DEL and the C1 controls are shown as visible symbols
(``␛]52;…``), never sent. Colour codes (SGR) are dropped rather than shown: they carry no meaning in
a log but could hide text (concealed, black on black). Carriage returns keep what a terminal would
have shown of the line (a progress bar's last state). Our own colours are rich styles added after
this, so they stay.

A terminal also shows text it is not asked to obey in an order or a shape the text does not have:
bidi controls (U+202E turns ``report\u202efdp.exe`` into ``reportexe.pdf``), zero-width and other
invisible format characters (U+200B, U+2060, U+FEFF, tag characters) and the Unicode line and paragraph
separators. These are shown as ``<U+202E>``, in both forms; a zero-width joiner between two emoji (a
family, a profession) stays, since it only joins them. Other text, ü and 中文 and emoji, is printed as it is.

``printable`` is for text meant to span lines (code, outputs, tracebacks, answers): newlines and tabs
stay. ``one_line`` is for what is printed as one line among the tool's own (a file name, an id, an
outcome, a path): newlines, carriage returns and tabs are shown as ``\\n``, ``\\r``, ``\\t``, so a name
cannot print a line that looks like the tool's (``✔ Answer: 42``).
"""

from __future__ import annotations

import re

__all__ = ["INVISIBLE", "one_line", "printable"]

_SGR = re.compile(r"\x1b\[[0-9;:]*m")
# Format characters (Unicode's Cf: bidi controls, zero-width characters, the BOM, tag characters…), the
# line and paragraph separators, and the fillers that draw nothing (Hangul fillers, the combining
# grapheme joiner), as the inside of a regex character class. ``test_safe.py`` checks it against the
# running Python's ``unicodedata``.
INVISIBLE = (
    "\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\u3164\ufeff\uffa0\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
_UNSAFE = re.compile(rf"[\x00-\x08\x0b-\x1f\x7f-\x9f{INVISIBLE}]")
_UNSAFE_LINE = re.compile(rf"[\x00-\x1f\x7f-\x9f{INVISIBLE}]")
_SHOWN = {0x1B: "␛", 0x7F: "␡"}
_ESCAPED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ZWJ = 0x200D


def _pictographic(char: str) -> bool:
    """An emoji a zero-width joiner may join (emoji blocks, dingbats, or a variation selector ending one)."""
    code = ord(char)
    return 0x1F000 <= code <= 0x1FAFF or 0x2600 <= code <= 0x27BF or code == 0xFE0F


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _ESCAPED:
        return _ESCAPED[char]
    if code == _ZWJ:
        text, at = match.string, match.start()
        if 0 < at < len(text) - 1 and _pictographic(text[at - 1]) and _pictographic(text[at + 1]):
            return char
    if code in _SHOWN:
        return _SHOWN[code]
    if code < 0x20:
        return chr(0x2400 + code)  # the Control Pictures block: ␀ … ␟
    return f"<U+{code:04X}>"  # C1 and invisible characters: no picture of their own


def _last_return(line: str) -> str:
    return line.rstrip("\r").rsplit("\r", 1)[-1]


def printable(text: str) -> str:
    """``text`` with no control sequence a terminal would act on and nothing shown out of its order or
    unseen (bidi, zero-width); newlines and tabs kept."""
    if "\r" in text:
        text = "\n".join(_last_return(line) for line in text.split("\n"))
    return _UNSAFE.sub(_visible, _SGR.sub("", text))


def one_line(text: object) -> str:
    """``text`` (a name, an id, an outcome, a path) as one line: ``printable``'s rules, and newlines,
    carriage returns and tabs shown as ``\\n``, ``\\r``, ``\\t``. Colour codes are shown, not dropped:
    a name has none of its own."""
    return _UNSAFE_LINE.sub(_visible, str(text))
