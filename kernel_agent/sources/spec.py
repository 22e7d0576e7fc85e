"""A ``--data`` value that names a live source: ``[NAME=]SCHEME://…`` read into a ``SourceSpec``.

Owns the generic rules (the ``NAME=`` prefix, names are identifiers, which kind claims the scheme, a
libpq keyword string is refused for a URI); what a target may hold (no password) and its default name are
its kind's (``SourceKind.check``). Nothing here echoes a value it refuses: it may hold a password.
"""

from __future__ import annotations

import re

from ..errors import SourceError
from .base import SourceSpec
from .postgresql import PASSWORD_WHERE
from .registry import kind_for_scheme, kinds

__all__ = ["SourceSpec", "default_name", "is_source", "parse_source"]

_URI = re.compile(r"(?:(?P<name>[^=:/?#]*)=)?(?P<target>(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://.*)", re.DOTALL)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# libpq's keyword form ("host=db dbname=shop password=…"): recognised only to be refused, so that its
# password is never taken for a file name and echoed in a "no such file" error.
_CONNINFO = re.compile(r"\s*(?:[a-z_]+\s*=\s*(?:'(?:[^'\\]|\\.)*'|\S+)\s*)+", re.DOTALL)
_CONNINFO_KEYS = re.compile(r"(?:^|\s)(?:host|hostaddr|port|dbname|user|password|service|passfile)\s*=")


def is_source(value: str) -> bool:
    """Whether a ``--data`` value names a live source rather than a file: ``[NAME=]SCHEME://…`` with a scheme
    an installed kind claims, or libpq's keyword form (``host=… dbname=…``, refused by ``parse_source``)."""
    found = _URI.fullmatch(value)
    if found is not None:
        return kind_for_scheme(found["scheme"]) is not None
    return _is_conninfo(value)


def _is_conninfo(value: str) -> bool:
    body = value.split("=", 1)[1] if re.match(r"[A-Za-z_][A-Za-z0-9_]*=[a-z_]+\s*=", value) else value
    return _CONNINFO.fullmatch(body) is not None and _CONNINFO_KEYS.search(body) is not None


def parse_source(value: str) -> SourceSpec:
    """``value`` (``[NAME=]SCHEME://…``) as a ``SourceSpec``: ``NAME`` when given, else the kind's default
    name for the target. Raises ``SourceError`` (a ``ConfigError``) for a bad name, a scheme no installed kind
    claims, a keyword string, or a target its kind refuses (a password in it: the message says where to put it)."""
    found = _URI.fullmatch(value)
    if found is None:
        if _is_conninfo(value):
            hint = f"; {PASSWORD_WHERE}" if re.search(r"(?:^|\s)password\s*=", value) else ""
            raise SourceError(
                "a PostgreSQL source is given as a URI, not as libpq keywords: "
                f"postgresql://USER@HOST:PORT/DATABASE or postgresql:///?service=NAME{hint}"
            )
        raise SourceError("a data source is given as a URI: [NAME=]SCHEME://…, e.g. postgresql://USER@HOST/DATABASE")
    name = found["name"]
    if name is not None and _IDENTIFIER.fullmatch(name) is None:
        raise SourceError(
            f"a data source's name must be an identifier (letters, digits and _, not starting with a digit): "
            f"{name!r} is not",
            source=name,
        )
    kind = kind_for_scheme(found["scheme"])
    if kind is None:
        claimed = ", ".join(f"{scheme}://" for each in kinds() for scheme in each.schemes)
        raise SourceError(
            f"no installed data source kind reads {found['scheme']}:// URIs (installed: {claimed or 'none'})",
            source=name,
        )
    target = found["target"]
    default = kind.check(target)
    return SourceSpec(name or default_name(default, kind.name), kind.name, target)


def default_name(wanted: str, fallback: str) -> str:
    """``wanted`` made an identifier (other characters become ``_``; a leading digit gets a ``_`` before it),
    ``fallback`` when it is empty."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", wanted)
    if not name:
        return fallback
    return f"_{name}" if name[0].isdigit() else name
