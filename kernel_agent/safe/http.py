"""What a document served over HTTP carries, so that nothing in it runs or loads: header values.

A run's report, notebook or generated file is the kernel's or the model's content. Served from the
API's origin it must not run scripts there (they would read other threads with the user's key) nor
fetch from elsewhere, nor be sniffed into HTML, nor be opened inline when it is not the report
itself. The web page, which is our code, gets a CSP of its own: scripts from the app only.
"""

from __future__ import annotations

from urllib.parse import quote

__all__ = ["DOCUMENT_CSP", "PAGE_CSP", "attachment", "document_headers"]

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


def attachment(filename: str) -> str:
    """A Content-Disposition that downloads ``filename`` (RFC 6266 / 5987)."""
    quoted = quote(filename)
    if quoted != filename:
        return f"attachment; filename*=utf-8''{quoted}"
    return f'attachment; filename="{filename}"'


def document_headers(filename: str | None = None) -> dict[str, str]:
    """Headers for a document made from run content: the CSP, ``nosniff``, and, given a ``filename``,
    ``attachment`` (anything that is not the page itself is downloaded, never shown inline)."""
    headers = {"Content-Security-Policy": _SERVED_CSP, "X-Content-Type-Options": "nosniff"}
    if filename is not None:
        headers["Content-Disposition"] = attachment(filename)
    return headers
