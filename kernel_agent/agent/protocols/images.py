"""Figures for a vision model: ``downscale_png`` and the chat parts that carry them.

Owns shrinking captured PNGs and turning an execution's base64 images into
OpenAI ``image_url`` content parts, capped at ``MAX_IMAGES``. Does not own
where those parts go in the history (the protocols decide) nor capturing the
figures (the kernel session does).

Pure: Pillow only re-encodes bytes in memory, and is imported where used so
that importing this module stays cheap.
"""

from __future__ import annotations

import base64
import binascii
import io

from ...model.messages import ContentPart

__all__ = ["MAX_IMAGES", "MAX_IMAGE_SIDE", "downscale_png", "image_parts"]

MAX_IMAGE_SIDE = 768
MAX_IMAGES = 4  # per execution; more would crowd the context for little gain


def downscale_png(data: bytes, max_side: int = MAX_IMAGE_SIDE) -> bytes:
    """PNG bytes at most ``max_side`` px on the long side (unchanged when already small).

    Raises ``ValueError`` when ``data`` is not a readable image.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            if max(image.size) <= max_side and image.format == "PNG":
                return data
            image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
            out = io.BytesIO()
            image.save(out, format="PNG", optimize=True)
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        raise ValueError(f"not a readable image: {exc}") from exc
    return out.getvalue()


def image_parts(images: tuple[str, ...]) -> list[ContentPart]:
    """Content parts for base64 PNGs: the first ``MAX_IMAGES`` downscaled, the rest counted.

    An image that cannot be decoded becomes a text part saying so. Raises nothing.
    """
    parts: list[ContentPart] = []
    for number, b64 in enumerate(images[:MAX_IMAGES], start=1):
        try:
            small = downscale_png(base64.b64decode(b64, validate=False))
        except (ValueError, binascii.Error):
            parts.append({"type": "text", "text": f"[image {number} could not be decoded]"})
            continue
        url = "data:image/png;base64," + base64.b64encode(small).decode("ascii")
        parts.append({"type": "image_url", "image_url": {"url": url}})
    if len(images) > MAX_IMAGES:
        parts.append({"type": "text", "text": f"[{len(images) - MAX_IMAGES} more images not shown]"})
    return parts
