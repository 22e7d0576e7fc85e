"""PostgreSQL result rows as Arrow: one Arrow type per PostgreSQL type (by OID), rows to a record batch.

Ints, floats, booleans, text, dates, times, timestamps (``timestamptz`` in UTC), intervals and ``bytea`` keep
their Arrow twins; ``numeric`` is float64 (its loader is psycopg's ``FloatLoader``: what ``pandas.read_sql``
gives with ``coerce_float``); ``json``/``jsonb`` are their text; everything else (arrays, ``uuid``,
``inet``, enums, ranges, a column a twin cannot hold) is its text as Python spells the value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow

__all__ = ["batch_of", "schema_of"]

_TYPES: dict[int, pyarrow.DataType] = {
    16: pyarrow.bool_(),
    20: pyarrow.int64(),
    21: pyarrow.int16(),
    23: pyarrow.int32(),
    26: pyarrow.int64(),
    700: pyarrow.float32(),
    701: pyarrow.float64(),
    1700: pyarrow.float64(),
    18: pyarrow.string(),
    19: pyarrow.string(),
    25: pyarrow.string(),
    114: pyarrow.string(),
    1042: pyarrow.string(),
    1043: pyarrow.string(),
    3802: pyarrow.string(),
    17: pyarrow.binary(),
    1082: pyarrow.date32(),
    1083: pyarrow.time64("us"),
    1114: pyarrow.timestamp("us"),
    1184: pyarrow.timestamp("us", tz="UTC"),
    1186: pyarrow.duration("us"),
}


def schema_of(columns: Sequence[Any]) -> pyarrow.Schema:
    """The Arrow schema of a cursor's ``description`` (names as PostgreSQL gives them, duplicates kept)."""
    return pyarrow.schema(
        [pyarrow.field(column.name, _TYPES.get(column.type_code, pyarrow.string())) for column in columns]
    )


def batch_of(schema: pyarrow.Schema, rows: Sequence[Sequence[Any]]) -> pyarrow.RecordBatch:
    """``rows`` (tuples, as psycopg gives them) as one record batch of ``schema``."""
    if not rows or not schema:
        return pyarrow.RecordBatch.from_pylist([], schema=schema)
    try:  # the rows as one struct array: pyarrow reads the tuples in C++, ten times faster than by column
        whole = pyarrow.array(rows, type=pyarrow.struct(list(schema)))
        return pyarrow.RecordBatch.from_struct_array(whole)
    except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError, TypeError, ValueError, OverflowError):
        pass  # a column some values of which only text can hold (uuid, arrays, …): column by column
    arrays = [_array([row[index] for row in rows], field.type) for index, field in enumerate(schema)]
    return pyarrow.RecordBatch.from_arrays(arrays, schema=schema)


def _array(values: Sequence[Any], kind: pyarrow.DataType) -> pyarrow.Array:
    try:
        return pyarrow.array(values, type=kind)
    except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError, TypeError, ValueError, OverflowError):
        if kind == pyarrow.string():
            return pyarrow.array([None if value is None else str(value) for value in values], type=kind)
        raise
