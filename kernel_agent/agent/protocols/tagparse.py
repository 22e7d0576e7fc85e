"""The DeepAnalyze tag scanner: reply text -> blocks, readable reasoning, runnable code.

Owns the tags (``<Analyze>``, ``<Understand>``, ``<Code>``, ``<Execute>``,
``<Answer>``, ``<File>``, ``<think>``), splitting a reply into tagged blocks
and loose text, rendering the prose blocks as markdown, pulling the code out
of a ``<Code>`` body (or any fenced text) and closing a block the model left
open. Does not own what a reply *means* (code, answer or a problem to report):
that is the tag protocols' job (``TagProtocol.parse`` in ``tags.py``, which
``deepanalyze.py`` shares).

Pure functions of their text, linear in its length.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

__all__ = [
    "CLOSING_FENCE",
    "PYTHON_FENCE",
    "Block",
    "close_code",
    "closed",
    "extract_code",
    "parse_blocks",
    "render_prose",
]

_TAG = re.compile(r"<(/?)(Analyze|Understand|Code|Execute|Answer|File|think)>")
_PROSE_TAGS = frozenset({"Analyze", "Understand", "File"})  # may be closed by the next opening tag
_TITLES = {"Analyze": "Analyze", "Understand": "Understand", "File": "Files", "think": "Thinking"}
_FENCE_LINE = re.compile(r"^[ \t]*```[^\n]*$", re.M)
_INLINE_FENCE = re.compile(r"```(?:python3?|py)?(.*?)```", re.S)
PYTHON_FENCE = re.compile(r"^[ \t]*```[ \t]*(?:python3?|py|ipython)[ \t]*$", re.M | re.I)
CLOSING_FENCE = re.compile(r"^[ \t]*```[ \t]*$", re.M)


@dataclass(frozen=True)
class Block:
    """One tagged block of a reply, or a run of loose text between blocks."""

    tag: str | None  # None: text outside any tag
    body: str
    end: int  # offset just past the block (past its closing tag when closed)
    closed: bool = True


def _scan(text: str, *, implicit: bool) -> list[Block]:
    """Split ``text`` into tagged blocks and loose text, without nesting.

    Inside a block only its own closing tag counts, so code may mention tags.
    With ``implicit``, an opening tag also ends an open prose block
    (``<Analyze>`` never closed before ``<Code>``).
    """
    blocks: list[Block] = []
    pos = 0
    open_tag: str | None = None
    body_at = 0
    for match in _TAG.finditer(text):
        closing, tag = match.group(1) == "/", match.group(2)
        if open_tag is not None:
            if closing and tag == open_tag:
                blocks.append(Block(open_tag, text[body_at : match.start()], match.end()))
                open_tag, pos = None, match.end()
                continue
            if closing or not (implicit and open_tag in _PROSE_TAGS):
                continue
            blocks.append(Block(open_tag, text[body_at : match.start()], match.start()))
            pos = match.start()
        elif closing:
            continue  # a stray closing tag stays in the loose text
        if match.start() > pos:
            blocks.append(Block(None, text[pos : match.start()], match.start()))
        open_tag, body_at = tag, match.end()
    if open_tag is not None:
        blocks.append(Block(open_tag, text[body_at:], len(text), closed=False))
    elif pos < len(text):
        blocks.append(Block(None, text[pos:], len(text)))
    return blocks


def parse_blocks(text: str) -> list[Block]:
    """The blocks of ``text``; a prose block left open is closed by the next opening tag."""
    blocks = _scan(text, implicit=False)
    if blocks and not blocks[-1].closed and blocks[-1].tag in _PROSE_TAGS:
        blocks = _scan(text, implicit=True)
    return blocks


def render_prose(blocks: list[Block]) -> str:
    """Readable markdown for the prose blocks: ``**Analyze**`` headings, no raw tags."""
    parts = []
    for block in blocks:
        if block.tag is None:
            body = _TAG.sub("", block.body).strip()
        elif block.tag in _TITLES:
            # A tag mentioned in prose would vanish as HTML in a markdown cell: show it as code.
            body = _TAG.sub(r"`\g<0>`", block.body).strip()
            body = f"**{_TITLES[block.tag]}**\n\n{body}" if body else ""
        else:
            continue
        if body:
            parts.append(body)
    return "\n\n".join(parts)


def extract_code(body: str) -> str:
    """The code in ``body``: every fenced block joined, else the bare text, dedented."""
    fences = list(_FENCE_LINE.finditer(body))
    if not fences:
        return textwrap.dedent(body).strip("\n").rstrip()
    pieces = []
    for i in range(0, len(fences), 2):
        start = fences[i].end() + 1
        stop = fences[i + 1].start() if i + 1 < len(fences) else len(body)
        pieces.append(textwrap.dedent(body[start:stop]).strip("\n").rstrip())
    code = "\n\n".join(piece for piece in pieces if piece)
    if not code:  # ```python print(1)``` on one line
        inline = _INLINE_FENCE.search(body)
        code = inline.group(1).strip() if inline else ""
    return code


def closed(text: str, closing: str) -> str:
    """``text`` with ``closing`` appended on a line of its own."""
    return text + ("" if text.endswith("\n") else "\n") + closing


def close_code(kept: str, body: str, *, by_stop: bool) -> str:
    """``kept`` (a reply up to its open ``<Code>`` block's end) closed with ``</Code>``.

    ``by_stop``: the server stopped on ``</Code>`` and left it out.
    """
    if by_stop:
        return kept + "</Code>"  # exactly what vLLM left out, as DeepAnalyze does
    # An odd number of fence lines leaves a fence open: close it before the tag.
    return closed(kept, "```\n</Code>" if len(_FENCE_LINE.findall(body)) % 2 else "</Code>")
