"""What a document served over HTTP carries, so that nothing in it runs or loads: header values.

A run's report, notebook or generated file is the kernel's or the model's content. Served from the
API's origin it must not run scripts there (they would read other threads with the user's key) nor
fetch from elsewhere, nor be sniffed into HTML, nor be opened inline when it is not the report
itself. The web page, which is our code, gets a CSP of its own: scripts from the app only.
"""

from __future__ import annotations

import mimetypes
from urllib.parse import quote

__all__ = ["DOCUMENT_CSP", "PAGE_CSP", "attachment", "document_headers", "path_url", "served_type"]

# A document: no script, no plugin, no frame, no external image, style, font or connection. This part
# also goes into the page itself (a <meta>), so a downloaded copy opened from disk keeps it.
DOCUMENT_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
# Served over HTTP, a document also gets an origin of its own (sandbox) and is never framed.
_SERVED_CSP = f"{DOCUMENT_CSP}; frame-ancestors 'none'; sandbox"
# The web page: its own scripts only; images as data (figures); the API on its own origin. Inline style
# is allowed because DOMPurify parses outputs in a document under this policy (a pandas table's <style>
# would be reported as refused); the page's sanitizer drops style from outputs and the page's CSS keeps
# them in their box (app.css: contain: paint).
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


# What a file the code wrote (or an upload) may be served as: passive types only. Anything a browser
# would run or lay out as a page of our origin (HTML, SVG, XML, scripts, PDF) goes as bytes.
_PASSIVE_TYPES = frozenset(
    {
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "text/csv",
        "text/plain",
        "text/tab-separated-values",
        "application/json",
        "application/zip",
        "application/gzip",
        "application/vnd.ms-excel",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "application/x-ipynb+json",
    }
)


def attachment(filename: str, disposition: str = "attachment") -> str:
    """A Content-Disposition that downloads ``filename`` (RFC 6266 / 5987); ``disposition="inline"``
    names the file a browser saves while showing it."""
    quoted = quote(filename)
    if quoted != filename:
        return f"{disposition}; filename*=utf-8''{quoted}"
    return f'{disposition}; filename="{filename}"'


def path_url(path: str) -> str:
    """``path`` (a file's name the kernel chose, relative, ``/``-separated) as a URL path: every character
    other than ASCII letters, digits, ``-._~`` and ``/`` percent-encoded, so a newline, a bidi control
    (U+202E) or a zero-width character in the name never reaches a URL (or a page showing it) raw, and
    ``?``, ``#`` and ``%`` stay part of the name."""
    return quote(path, safe="/")


def document_headers(filename: str | None = None, *, inline: bool = False) -> dict[str, str]:
    """Headers for a document made from run content: the CSP, ``nosniff``, and, given a ``filename``,
    ``attachment`` (anything that is not the page itself is downloaded, never shown inline). ``inline``
    is for the report itself (shown in its sandbox): the filename then only names a saved copy."""
    headers = {"Content-Security-Policy": _SERVED_CSP, "X-Content-Type-Options": "nosniff"}
    if filename is not None:
        headers["Content-Disposition"] = attachment(filename, "inline" if inline else "attachment")
    return headers


def served_type(filename: str) -> str:
    """The Content-Type a file named ``filename`` is served with: its own for passive types (images,
    tables, text), ``application/octet-stream`` for anything else, HTML and SVG included."""
    guessed = mimetypes.guess_type(filename, strict=False)[0]
    return guessed if guessed in _PASSIVE_TYPES else "application/octet-stream"
