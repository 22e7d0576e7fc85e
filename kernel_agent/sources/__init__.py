"""Live data sources: databases the host queries for the kernel, which never holds their credentials.

``spec.py`` reads a ``--data`` value that names a source (``SourceSpec``); ``registry.py`` finds the kind
that claims its URI scheme (the ``kernel_agent.sources`` entry points: ours is ``postgresql.py``);
``base.py`` is what a kind's ``Source`` does (describe, query as Arrow batches, cancel, close);
``broker.py`` serves one session's queries to its kernel over a Unix socket, whose kernel side is
``kernel/inside/sql_client.py``. Database FILES (SQLite, DuckDB) are not sources: they are data files
the kernel opens itself. Nothing here imports psycopg or pyarrow until a source is used.
"""

from __future__ import annotations

from ..errors import QueryError, SourceError
from .base import DescribeLimits, QueryLimits, Results, Source
from .registry import SOURCES, SourceKind, open_source
from .spec import SourceSpec, is_source, parse_source

__all__ = [
    "SOURCES",
    "DescribeLimits",
    "QueryError",
    "QueryLimits",
    "Results",
    "Source",
    "SourceError",
    "SourceKind",
    "SourceSpec",
    "is_source",
    "open_source",
    "parse_source",
]
