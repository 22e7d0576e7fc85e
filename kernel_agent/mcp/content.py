"""What an MCP client sees of our results: ``execution_content``, ``image_block``, ``text_block``.

Owns the translation from kernel values to MCP content blocks: the bounded
text view of an execution (the same ``to_llm_text`` our own model reads,
head and tail kept, errors biased to the tail, cuts named), each figure as
an ``ImageContent`` block downscaled to ``max_side`` pixels, and the
execution's status as structured content. Pure: no kernel, no server, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass
from typing import Any

from mcp.types import CallToolResult, ContentBlock, ImageContent, TextContent

from ..result import ExecutionResult, png_size

__all__ = ["ContentLimits", "execution_content", "image_block", "text_block", "text_result"]


@dataclass(frozen=True)
class ContentLimits:
    """How much of one result goes back to the client.

    ``max_chars`` bounds the text view (head and tail kept, the cut named);
    ``max_images`` bounds the figures sent (the rest are named, not sent);
    ``max_side`` is the longest side, in pixels, a figure is scaled down to.
    """

    max_chars: int = 8000
    max_images: int = 8
    max_side: int = 1024


def text_block(text: str) -> TextContent:
    """One text content block."""
    return TextContent(type="text", text=text)


def text_result(text: str, *, error: bool = False, structured: dict[str, Any] | None = None) -> CallToolResult:
    """A tool result made of one text block (``error=True`` marks a failed tool call)."""
    return CallToolResult(content=[text_block(text)], is_error=error, structured_content=structured)


def image_block(png_b64: str, max_side: int) -> ImageContent:
    """A PNG (base64) as an image block, scaled down so neither side exceeds ``max_side``.

    Images that are already small enough, or that Pillow cannot read, pass unchanged.
    """
    size = png_size(png_b64)
    if size is not None and max(size) > max_side:
        png_b64 = _downscale(png_b64, max_side)
    return ImageContent(type="image", data=png_b64, mime_type="image/png")


def _downscale(png_b64: str, max_side: int) -> str:
    from PIL import Image, UnidentifiedImageError  # matplotlib's own dependency

    try:
        with Image.open(io.BytesIO(base64.b64decode(png_b64))) as image:
            image.thumbnail((max_side, max_side))
            buffer = io.BytesIO()
            image.save(buffer, format="PNG", optimize=True)
    except (binascii.Error, OSError, UnidentifiedImageError, ValueError):
        return png_b64
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def execution_content(result: ExecutionResult, limits: ContentLimits) -> CallToolResult:
    """The tool result of one execution: a status line, the bounded text view, then the figures.

    ``structured_content`` carries the status (``ok``/``error``/``timeout``/``died``),
    ``state_lost`` with its note, the execution count and the number of figures.
    ``is_error`` is True unless the status is ``ok``: in the MCP spec ``isError`` is a tool-level failure
    the calling model should see and correct (not a protocol error, which it would not see), and code
    that raised, timed out or killed its kernel is that. The result is data all the same: the output
    so far, the traceback and the figures come with it.
    """
    images = result.images
    sent = images[: limits.max_images]
    blocks: list[ContentBlock] = [text_block(_status_header(result) + result.to_llm_text(limits.max_chars))]
    blocks.extend(image_block(png, limits.max_side) for png in sent)
    if len(images) > len(sent):
        blocks.append(text_block(f"[{len(images) - len(sent)} more figure(s) not sent; limit {limits.max_images}]"))
    return CallToolResult(
        content=blocks,
        is_error=result.status != "ok",
        structured_content=execution_summary(result, figures=len(images)),
    )


def execution_summary(result: ExecutionResult, *, figures: int) -> dict[str, Any]:
    """The machine-readable part of an execution's tool result."""
    return {
        "status": result.status,
        "state_lost": result.state_lost,
        "note": result.note,
        "execution_count": result.execution_count,
        "duration_s": round(result.duration_s, 3),
        "figures": figures,
        "error": str(result.error) if result.error else None,
    }


def _status_header(result: ExecutionResult) -> str:
    count = f" [{result.execution_count}]" if result.execution_count is not None else ""
    lost = " state_lost" if result.state_lost else ""
    return f"status: {result.status}{lost}{count} ({result.duration_s:.1f}s)\n"
