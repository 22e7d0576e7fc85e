"""HTML that is safe to show: kernel outputs, the model's markdown and a notebook's content as data.

Owns the policy JupyterLab applies to untrusted output, applied with nh3 (the Ammonia sanitizer):
no script, event handler, ``javascript:`` URL, form, input, ``<meta>``, ``<base>``, ``<style>``,
iframe or object; images only as ``data:`` (nothing is fetched from elsewhere); inline style only
for properties that cannot lift an element out of its box (no ``position``, ``margin``, ``transform``,
``z-index``); no ``class``, ``id`` or other name a page's stylesheet or script could hook into, so an
output cannot dress itself in the page's own styles (``jp-Dialog``, position: fixed, over the page); SVG
only as an image (``<img src="data:image/svg+xml;base64,…">``, where its scripts do
not run); ``application/javascript`` and other active types dropped. Tables, figures, code, markdown
and LaTeX (left for the front end's typesetter) still render.

``clean_html`` cleans a fragment, ``markdown_html`` renders markdown to clean HTML, ``code_html``
highlights code, and ``safe_bundle`` turns a display bundle (a kernel's ``display_data``) into one
that a front end trusting it may render: ``Shown`` is the only value the magic displays, each
``contained`` in a box it cannot paint outside of. ``clean_page`` cleans a page our template made around
such content: the template's own classes stay (and only those), the content's are already gone.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import nh3

__all__ = [
    "CONTAINER_STYLE",
    "SAFE_MIMETYPES",
    "Shown",
    "clean_html",
    "clean_page",
    "code_html",
    "contained",
    "markdown_html",
    "markdown_source",
    "safe_bundle",
    "shown_code",
    "shown_code_box",
    "shown_html",
    "shown_markdown",
    "svg_image",
]

_BOX_STYLE = "border: 1px solid #90a4ae; border-left: 4px solid #1976d2; background-color: #f5f8fc; padding: 2px 10px"
_LABEL_STYLE = "font-size: 80%; color: #546e7a; font-family: sans-serif; padding-top: 4px"
_EXTRA_TAGS = {"details", "summary", "figure", "figcaption", "caption", "mark"}
# No ``class``, ``id``, ``name``, ``form``, ``for``, ``popover``, ``slot``, ``part``, ``data-*``: each names
# something the page holding the output defines (its styles, its elements, its scripts' hooks). JupyterLab's
# CSS gives ``jp-Dialog`` and ``jp-HoverBox`` a fixed place over the page, and a toast library's container
# z-index 9999; a prefix would keep the names harmless too, but nothing renders worse without them (tables,
# code and markdown style by element), so they go.
_GENERIC_ATTRIBUTES = {"style", "title", "lang", "dir", "align", "valign"}
_TAG_ATTRIBUTES = {
    "a": {"href", "target"},
    "img": {"src", "alt", "width", "height"},
    "table": {"border", "cellpadding", "cellspacing", "summary"},
    "td": {"colspan", "rowspan", "nowrap"},
    "th": {"colspan", "rowspan", "scope", "nowrap"},
    "col": {"span", "width"},
    "colgroup": {"span", "width"},
    "ol": {"start", "type", "reversed"},
    "li": {"value"},
    "details": {"open"},
    "time": {"datetime"},
    "abbr": {"title"},
}
# Style that colours, aligns and sizes within the element's own box; nothing that positions it over the page.
_STYLE_PROPERTIES = {
    "color",
    "background-color",
    "font-weight",
    "font-style",
    "font-family",
    "font-size",
    "text-align",
    "text-decoration",
    "vertical-align",
    "white-space",
    "border",
    "border-collapse",
    "border-color",
    "border-style",
    "border-width",
    "border-top",
    "border-bottom",
    "border-left",
    "border-right",
    "padding",
    "padding-top",
    "padding-bottom",
    "padding-left",
    "padding-right",
    "width",
    "max-width",
    "min-width",
    "height",
    "max-height",
    "overflow",
    "overflow-x",
    "overflow-y",
}
_IMAGE_DATA = re.compile(r"\s*data:image/(png|jpeg|gif|webp|svg\+xml);base64,[A-Za-z0-9+/=\s]*\Z", re.IGNORECASE)
_LINK_SCHEMES = re.compile(r"\s*(https?:|mailto:|#|[^:]*(/|\Z))", re.IGNORECASE)


def _attribute(tag: str, name: str, value: str) -> str | None:
    """Images only from data (nothing fetched); links only to the web, mail, or relative places."""
    if name == "src":
        return value if tag == "img" and _IMAGE_DATA.match(value) else None
    if name == "href":
        return value if _LINK_SCHEMES.match(value) else None
    if name == "target":
        return "_blank"
    return value


@cache
def _cleaner() -> nh3.Cleaner:
    return nh3.Cleaner(
        tags=(nh3.ALLOWED_TAGS | _EXTRA_TAGS) - {"area", "map"},
        clean_content_tags={"script", "style", "template", "noscript", "title", "textarea", "select", "option"},
        attributes={"*": _GENERIC_ATTRIBUTES, **_TAG_ATTRIBUTES},
        attribute_filter=_attribute,
        url_schemes={"http", "https", "mailto", "data"},
        filter_style_properties=_STYLE_PROPERTIES,
    )


def clean_html(fragment: str) -> str:
    """``fragment`` with everything active or external removed (see the module's policy)."""
    return _cleaner().clean(fragment)


# The classes our page template (nbconvert's lab template and ours) puts on its own markup: its layout, the
# highlighted code's tokens (pygments), the coloured streams (ansi). Nothing else: a cell tag
# (``celltag_…``) or anything a notebook's content might still carry never matches JupyterLab's styles.
_PAGE_CLASS = re.compile(
    r"(jp-(Notebook|Notebook-cell|Cell|CodeCell|MarkdownCell|Cell-(input|output)(Area|Wrapper|Collapser)"
    r"|Collapser|(Input|Output)Collapser|InputArea|InputArea-(editor|prompt)|InputPrompt|OutputPrompt"
    r"|CodeMirrorEditor|Editor|OutputArea|OutputArea-(child|output|prompt|executeResult|stderr)|MarkdownOutput"
    r"|Rendered(HTMLCommon|HTML|Markdown|Text|Image|Latex|SVG)|mod-(noOutputs|noInput))"
    r"|ka-[a-z-]+|ansi-[a-z-]+|cm-editor|cm-s-jupyter|highlight|hl-[a-z0-9]+|[a-z][a-z0-9]{0,2})\Z"
)
_PAGE_ID = re.compile(r"cell-id=[A-Za-z0-9_-]{1,64}\Z")


def _page_attribute(tag: str, name: str, value: str) -> str | None:
    if name == "class":
        kept = [token for token in value.split() if _PAGE_CLASS.match(token)]
        return " ".join(kept) or None
    if name == "id":
        return value if _PAGE_ID.match(value) else None
    return _attribute(tag, name, value)


@cache
def _page_cleaner() -> nh3.Cleaner:
    """The content's policy, with the template's own classes and cell ids (see ``_PAGE_CLASS``) kept."""
    return nh3.Cleaner(
        tags=(nh3.ALLOWED_TAGS | _EXTRA_TAGS) - {"area", "map"},
        clean_content_tags={"script", "style", "template", "noscript", "title", "textarea", "select", "option"},
        attributes={"*": _GENERIC_ATTRIBUTES | {"class", "id"}, **_TAG_ATTRIBUTES},
        attribute_filter=_page_attribute,
        url_schemes={"http", "https", "mailto", "data"},
        filter_style_properties=_STYLE_PROPERTIES,
    )


_BODY_OPEN = re.compile(r"<body\b[^>]*>", re.IGNORECASE)
_HEAD_OPEN = re.compile(r"<head\b[^>]*>", re.IGNORECASE)


def clean_page(page: str, csp: str) -> str:
    """A whole page made by our template around a notebook's content: everything between ``<body>``
    and ``</body>`` (where the content is) cleaned, and ``csp`` as the page's first ``<meta>``, so a
    copy opened from disk forbids scripts and external loads too. The head is the template's own.

    The template's own classes and cell ids stay (``_PAGE_CLASS``), no others: the content in it must
    already be ``clean_html``'s (so its classes are gone) for the page to look like the template's."""
    opened = _BODY_OPEN.search(page)
    closed = page.lower().rfind("</body")  # the template's, after any the content holds
    if opened is None or closed < opened.end():
        ours = f'<head><meta charset="utf-8">{_csp_meta(csp)}</head>'
        return f"<!DOCTYPE html>\n<html>{ours}<body>{clean_html(page)}</body></html>"
    body = page[: opened.end()] + _page_cleaner().clean(page[opened.end() : closed]) + page[closed:]
    head = _HEAD_OPEN.search(body)
    if head is None or head.start() > opened.start():
        return body.replace(opened.group(), f"{_csp_meta(csp)}{opened.group()}", 1)
    return body[: head.end()] + _csp_meta(csp) + body[head.end() :]


def _csp_meta(csp: str) -> str:
    return f'<meta http-equiv="Content-Security-Policy" content="{html.escape(csp)}">'


def svg_image(svg: str) -> str:
    """An SVG as an image: scripts and links inside it do not run there."""
    encoded = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f'<img src="data:image/svg+xml;base64,{encoded}" alt="SVG figure">'


def code_html(code: str, language: str = "python") -> str:
    """``code`` highlighted with inline colours (no stylesheet to carry), cleaned like any HTML."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name

    return clean_html(highlight(code, get_lexer_by_name(language), HtmlFormatter(noclasses=True, nobackground=True)))


# -- markdown -----------------------------------------------------------------------------------------

# Code, where markdown shows text as it is. Where this and a markdown parser could disagree, it errs
# towards prose (escaped): a fence opens only at the line's start with no backtick after it and closes at
# the first line a parser could close it on; an inline span stays on one line and holds no backtick.
_CODE = re.compile(
    r"^(`{3,}|~{3,})[^`\n]*\n.*?(?:^ {0,3}\1[`~]*[ \t]*$|\Z)|(?<![`\\])(`+)(?!`)[^`\n]*?(?<!`)\2(?!`)",
    re.MULTILINE | re.DOTALL,
)
_MATH = re.compile(
    # each span stops at the next opener of its kind, so text full of unclosed openers stays linear
    r"\$\$.+?\$\$|\\\[(?:(?!\\\[).)+?\\\]|\\\((?:(?!\\\().)+?\\\)|(?<![\\$\w])\$(?=\S)[^$\n]+?(?<=\S)\$(?!\w)",
    re.DOTALL,
)
_MATH_TEXT = 100_000  # longer markdown (a huge output) is rendered without math protection: its regex is quadratic
_PLACEHOLDER = "KAMATH{}X"
_PLACED = re.compile(r"KAMATH(\d+)X")


@cache
def _markdown_it() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


def _protect_math(text: str) -> tuple[str, list[str]]:
    """Math kept out of markdown's reach (``\\\\`` and ``_`` mean something there), as JupyterLab does."""
    found: list[str] = []
    if len(text) > _MATH_TEXT:
        return text, found

    def hold(match: re.Match[str]) -> str:
        found.append(match.group())
        return _PLACEHOLDER.format(len(found) - 1)

    parts, last = [], 0
    for code in _CODE.finditer(text):
        parts.append(_MATH.sub(hold, text[last : code.start()]))
        parts.append(code.group())
        last = code.end()
    parts.append(_MATH.sub(hold, text[last:]))
    return "".join(parts), found


_ACTIVE_LINK = re.compile(r"\]\(\s*<?\s*(?:javascript|vbscript|data|file):", re.IGNORECASE)


def _inert(text: str) -> str:
    """Prose (no code) made inert; math (``$…$``) left for the typesetter, which escapes it itself."""
    if len(text) > _MATH_TEXT:
        return _inert_prose(text)
    parts, last = [], 0
    for math in _MATH.finditer(text):
        parts.append(_inert_prose(text[last : math.start()]))
        parts.append(math.group())
        last = math.end()
    parts.append(_inert_prose(text[last:]))
    return "".join(parts)


def _inert_prose(prose: str) -> str:
    prose = prose.replace("<", "&lt;")  # raw HTML is shown as text
    prose = prose.replace("![", "!\\[")  # an image would be fetched: a link stays, the fetch goes
    return _ACTIVE_LINK.sub("](#", prose)


def markdown_source(text: str) -> str:
    """Markdown for a front end that renders it (a chat message): raw HTML shown as text, images as
    links, links to active schemes cut; code (fenced or inline) and math left as they are."""
    parts, last = [], 0
    for code in _CODE.finditer(text):
        parts.append(_inert(text[last : code.start()]))
        parts.append(code.group())
        last = code.end()
    parts.append(_inert(text[last:]))
    return "".join(parts)


def markdown_html(text: str) -> str:
    """Markdown (the model's, a notebook's) as clean HTML; raw HTML in it is cleaned too, and math is
    left as ``$…$`` text for the front end's typesetter."""
    protected, math = _protect_math(text)
    page = clean_html(_markdown_it().render(protected))
    if not math:
        return page
    return _PLACED.sub(lambda m: html.escape(math[int(m.group(1))]) if int(m.group(1)) < len(math) else "", page)


# -- display bundles ----------------------------------------------------------------------------------

# What a front end may render of a bundle it would trust: text, images as data, cleaned HTML, LaTeX, JSON.
SAFE_MIMETYPES = (
    "text/html",
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "text/latex",
    "application/json",
    "application/vnd.jupyter.stderr",
    "text/plain",
)
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*\Z")


@dataclass(frozen=True)
class Shown:
    """A display bundle made safe by this module: the only thing the magic hands to ``display``."""

    data: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)


def _text(value: Any) -> str:
    return "".join(str(part) for part in value) if isinstance(value, list) else str(value or "")


# Whatever an output draws stays in its box: paint contained (a fixed element is placed and clipped within
# it), a stacking context of its own (a z-index inside competes only inside), wide content scrolled.
CONTAINER_STYLE = "contain: paint; position: relative; z-index: 0; isolation: isolate; overflow-x: auto"


def contained(shown: Shown) -> Shown:
    """``shown`` with its HTML in a box it cannot paint outside of (``CONTAINER_STYLE``, inline: the page
    around it, JupyterLab's, is not ours to style)."""
    if "text/html" not in shown.data:
        return shown
    box = f'<div style="{CONTAINER_STYLE}">{shown.data["text/html"]}</div>'
    return Shown({**shown.data, "text/html": box}, shown.metadata)


def shown_html(page: str, plain: str) -> Shown:
    """Our own HTML (built around kernel or model text), cleaned, with its plain-text form."""
    return Shown({"text/html": clean_html(page), "text/plain": plain})


def shown_markdown(text: str) -> Shown:
    """Markdown as clean HTML, with the text itself as its plain form."""
    return Shown({"text/html": markdown_html(text), "text/plain": text})


def shown_code(code: str, language: str = "python") -> Shown:
    """Code, highlighted, with the code itself as its plain form."""
    return Shown({"text/html": code_html(code, language), "text/plain": code})


def shown_code_box(code: str, label: str, language: str = "python") -> Shown:
    """Code, highlighted, in a framed box under a small ``label`` (plain text): a front end's way to show code
    that is not one of the cell's outputs (the magic's rounds)."""
    box = (
        f'<div style="{_BOX_STYLE}"><div style="{_LABEL_STYLE}">{html.escape(label)}</div>'
        f"{code_html(code, language)}</div>"
    )
    return Shown({"text/html": clean_html(box), "text/plain": code})


def safe_bundle(data: Mapping[str, Any], metadata: Mapping[str, Any] | None = None) -> Shown:
    """``data`` (a mime bundle) with only what is safe to render: HTML and markdown cleaned (markdown
    becomes HTML), SVG as an image, images only when they are base64, text as text; active types
    (``application/javascript``, widgets, anything unknown) dropped. Image sizes stay in the metadata."""
    kept: dict[str, Any] = {}
    if "text/html" in data:
        kept["text/html"] = clean_html(_text(data["text/html"]))
    elif "image/svg+xml" in data:
        kept["text/html"] = svg_image(_text(data["image/svg+xml"]))
    elif "text/markdown" in data:
        kept["text/html"] = markdown_html(_text(data["text/markdown"]))
    for mime in SAFE_MIMETYPES[1:]:
        if mime not in data:
            continue
        value = data[mime]
        if mime.startswith("image/"):
            if isinstance(value, (str, list)) and _BASE64.match(_text(value)):
                kept[mime] = _text(value)
        elif mime == "application/json":
            kept[mime] = value
        else:
            kept[mime] = _text(value)
    if not kept:
        kept["text/plain"] = f"[output of type {', '.join(sorted(data)) or 'none'} not shown]"
    return Shown(kept, _sizes(metadata or {}, kept))


def _sizes(metadata: Mapping[str, Any], kept: Mapping[str, Any]) -> dict[str, Any]:
    """The width and height ``metadata`` gives the kept types (numbers only; nothing else of it)."""
    sizes: dict[str, Any] = {}
    for mime, entry in metadata.items():
        if mime in kept and isinstance(entry, Mapping):
            size = {k: v for k, v in entry.items() if k in ("width", "height") and isinstance(v, (int, float))}
            if size:
                sizes[mime] = size
    return sizes
