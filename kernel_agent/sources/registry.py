"""The ``kernel_agent.sources`` entry-point group: which installed kind claims a source URI's scheme.

An entry point is a ``SourceKind`` value (not a factory): its ``name``, the URI ``schemes`` it claims,
``check`` (a target → its default source name; raises ``SourceError`` for a target carrying a password or
malformed) and ``open`` (a ``SourceSpec`` → a ``Source``, connecting lazily). Ours is
``postgresql = "kernel_agent.sources.postgresql:POSTGRESQL"`` in our pyproject, as a third party's
(``mysql``, ``snowflake``) is in theirs. A scheme two kinds claim goes to the first in ``SOURCES.names()``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigError, SourceError
from ..plugins import Registry

if TYPE_CHECKING:
    from .base import Source, SourceSpec

__all__ = ["SOURCES", "SourceKind", "kind_for_scheme", "kinds", "open_source"]


@dataclass(frozen=True)
class SourceKind:
    """One engine's way in: ``name`` (a ``SourceSpec.kind``), the lower-case URI ``schemes`` it claims,
    ``check(target) -> default name`` (raises ``SourceError``; never echoes the target) and
    ``open(spec) -> Source`` (cheap: connections are made when used)."""

    name: str
    schemes: tuple[str, ...]
    check: Callable[[str], str]
    open: Callable[[SourceSpec], Source]

    def __repr__(self) -> str:
        return f"<SourceKind {self.name} {'/'.join(self.schemes)}>"


SOURCES: Registry[SourceKind] = Registry(
    "kernel_agent.sources", "data source kind", SourceKind, ("postgresql",), factory=False
)


def kinds() -> tuple[SourceKind, ...]:
    """Every installed kind, ours first. Raises ``ConfigError`` for a plug-in that cannot be loaded."""
    return tuple(SOURCES.make(name) for name in SOURCES.names())


def kind_for_scheme(scheme: str) -> SourceKind | None:
    """The first kind that claims URI ``scheme`` (any case), or None. A plug-in that cannot be loaded is
    passed over while another claims the scheme; when none does, its ``ConfigError`` is raised (it may be
    the one meant)."""
    wanted = scheme.lower()
    broken: ConfigError | None = None
    for name in SOURCES.names():
        try:
            kind = SOURCES.make(name)
        except ConfigError as exc:
            broken = broken or exc
            continue
        if wanted in kind.schemes:
            return kind
    if broken is not None:
        raise broken
    return None


def open_source(spec: SourceSpec) -> Source:
    """A ``Source`` for ``spec`` from its kind (no connection made yet). Raises ``SourceError`` for a kind
    that is not installed, ``ConfigError`` for a plug-in that cannot be loaded."""
    if spec.kind not in SOURCES:
        raise SourceError(
            f"data source {spec.name!r} is of kind {spec.kind!r}, which is not installed "
            f"(installed: {', '.join(SOURCES.names()) or 'none'})",
            source=spec.name,
        )
    return SOURCES.make(spec.kind).open(spec)
