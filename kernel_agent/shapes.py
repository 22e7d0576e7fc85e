"""The JSON shapes of a run's record, as pydantic models: one adapter for every encoder.

``Shape`` is the base: written from our own values (``of``: read by attribute from a record's
dataclass), read back from hostile JSON (``read``: strict types, unknown keys ignored, and a field
whose value has the wrong type read as its default, as a hand edit may leave it). The notebook's
metadata (``notebook/metadata.py``) and the events' JSON (``event_dict``, behind ``Event.to_dict``: one
serializer per event class, compiled at its first event, that reads the event itself and writes its records
as these shapes) are made of these shapes. Owns no I/O and no layout: which cell holds what is ``notebook/export.py``'s.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from functools import cache, partial
from typing import Annotated, Any, Literal, Self, TypeVar

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)
from pydantic_core import SchemaSerializer, core_schema

from .records import Round, Run, Usage
from .result import Artifact, ExecutionResult

__all__ = [
    "OMIT_EMPTY",
    "ArtifactShape",
    "ErrorShape",
    "Kept",
    "ResultWire",
    "RoundWire",
    "RunWire",
    "Shape",
    "UsageShape",
    "event_dict",
]


def _empty(value: object) -> bool:
    return not value


# Field marker: the key is left out of the JSON while the value is empty (older records stay as they were);
# pydantic's serializer decides it per marked field, no Python pass over every object written.
OMIT_EMPTY = Field(exclude_if=_empty)
_LENIENT = "lenient"  # the validation context's key under which a mistyped field reads as its default


def _kept_entries(value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
    """Read leniently, a list keeps the entries that are well-formed, each validated alone."""
    if not (info.context or {}).get(_LENIENT) or not isinstance(value, list):
        return handler(value)  # our own values, or no list at all: validated as they are
    kept: list[Any] = []
    for entry in value:
        try:
            kept.extend(handler([entry]))
        except ValidationError:
            continue
    return kept


_T = TypeVar("_T")
# A list of which, read leniently, the entries that are not well-formed are dropped (hand edits).
Kept = Annotated[list[_T], WrapValidator(_kept_entries)]


class Shape(BaseModel):
    """A JSON object of our record: unknown keys ignored; read strictly, a mistyped value as the field's default.

    A field marked ``OMIT_EMPTY`` is written only when it holds something.
    """

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, populate_by_name=True)

    @model_validator(mode="wrap")
    @classmethod
    def _lenient(cls, value: Any, handler: ModelWrapValidatorHandler[Self], info: ValidationInfo) -> Self:
        """Read leniently, a key whose value is wrong reads as its field's default (still counted as given).
        One call per object read, none per field: writing a round's record stays cheap."""
        try:
            return handler(value)
        except ValidationError as exc:
            if not (info.context or {}).get(_LENIENT) or not isinstance(value, dict):
                raise
            wrong = {error["loc"][0] for error in exc.errors() if error["loc"] and error["type"] != "missing"}
            defaults = _defaults(cls)
            if not wrong & value.keys() & defaults.keys():
                raise
            return handler({key: defaults[key]() if key in wrong else item for key, item in value.items()})

    @classmethod
    def of(cls, record: object) -> Self:
        """This shape of ``record`` (a dataclass of ours), its fields read by attribute."""
        return cls.model_validate(record, from_attributes=True, strict=False)

    @classmethod
    def read(cls, value: object) -> Self:
        """This shape read from hostile JSON: anything not an object reads as all defaults. Raises
        ``ValidationError`` only when a field without a default (``TurnRecord.task``) is missing or wrong."""
        return cls.model_validate(value if isinstance(value, dict) else {}, context={_LENIENT: True})


@cache
def _defaults(shape: type[Shape]) -> dict[Any, Callable[[], Any]]:
    """Each key a field is read from (its name, alias, or alias choices), with its default."""
    found: dict[Any, Callable[[], Any]] = {}
    for name, field in shape.model_fields.items():
        choices = field.validation_alias.choices if isinstance(field.validation_alias, AliasChoices) else []
        for key in (name, field.alias, *choices):
            if key is not None:
                found[key] = partial(field.get_default, call_default_factory=True)
    return found


class UsageShape(Shape):
    """Token counts (``records.Usage``); ``reasoning_tokens`` only when a reasoning model spent any."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: Annotated[int, OMIT_EMPTY] = 0

    def record(self) -> Usage:
        return Usage(self.prompt_tokens, self.completion_tokens, self.total_tokens, self.reasoning_tokens)


class ArtifactShape(Shape):
    """A file the round's code created or modified (``result.Artifact``), relative to the workspace."""

    path: str
    size: int = 0
    change: Literal["created", "modified"] = "created"

    def record(self) -> Artifact:
        return Artifact(self.path, self.size, self.change)


class ErrorShape(Shape):
    """The exception the code raised: its name and value (the traceback is in the outputs)."""

    ename: str = ""
    evalue: str = ""


# -- the events' JSON --------------------------------------------------------------------------------

_SECONDS = BeforeValidator(lambda value: round(value, 3))
_COUNT = BeforeValidator(lambda value: len(value) if isinstance(value, tuple | list) else value)


class ResultWire(Shape):
    """An ``ExecutionResult`` in an event: its text, not its outputs; ``images`` is how many."""

    status: str
    execution_count: int | None = None
    duration_s: Annotated[float, _SECONDS] = 0.0
    state_lost: bool = False
    note: str = ""
    stdout: str = ""
    stderr: str = ""
    result_text: str | None = None
    error: ErrorShape | None = None
    images: Annotated[int, _COUNT] = 0


class RoundWire(Shape):
    """A ``Round`` in an event: its record without the reply's text or the outputs."""

    index: int
    status: str
    code: str | None = None
    answer: str | None = None
    usage: UsageShape = UsageShape()
    model_s: Annotated[float, _SECONDS] = 0.0
    exec_s: Annotated[float, _SECONDS] = 0.0
    artifacts: list[ArtifactShape] = []
    problem: str | None = None
    reasoning_content: str = ""


class RunWire(Shape):
    """A ``Run`` in an event: how it ended, and how many rounds it took."""

    answer: str | None = None
    stop_reason: str | None = None
    error: str | None = None
    rounds: Annotated[int, _COUNT] = 0
    usage: UsageShape = UsageShape()
    notebook_path: Annotated[str | None, BeforeValidator(lambda value: None if value is None else str(value))] = None


_WIRES: dict[Any, type[Shape]] = {
    ExecutionResult: ResultWire,
    Round: RoundWire,
    Run: RunWire,
    Artifact: ArtifactShape,
}


def _written_as(annotation: Any) -> core_schema.CoreSchema:
    """How an event's field is written: a record as its wire shape (``of``), a tuple of records as a list of
    them, anything else as pydantic writes its value (a tuple as a list, a float as it is)."""
    args = typing.get_args(annotation)
    if annotation in _WIRES:
        shape = _WIRES[annotation]
        write: Callable[[Any], Any] = shape.of
        written = shape.__pydantic_core_schema__
    elif typing.get_origin(annotation) is tuple and len(args) == 2 and args[1] is Ellipsis and args[0] in _WIRES:
        shape = _WIRES[args[0]]
        write = partial(_each, shape.of)
        written = core_schema.list_schema(shape.__pydantic_core_schema__)
    else:
        return core_schema.any_schema()
    # the shape's schema, not its own serializer: an infinite float is written by this one's config, as a float
    serialization = core_schema.plain_serializer_function_ser_schema(write, return_schema=written)
    return core_schema.any_schema(serialization=serialization)


def _each(write: Callable[[Any], Shape], records: tuple[Any, ...]) -> list[Shape]:
    return [write(record) for record in records]


_SERIALIZERS: dict[type[Any], SchemaSerializer] = {}


def _event_serializer(event_type: type[Any]) -> SchemaSerializer:
    """One compiled serializer per event class, reading the event dataclass itself: its fields in order, records
    as their wire shapes. Built at the class's first event; an event then costs what a dict of its values does."""
    if event_type in _SERIALIZERS:
        return _SERIALIZERS[event_type]
    hints = typing.get_type_hints(event_type)
    names = [field.name for field in dataclasses.fields(event_type)]
    fields = [core_schema.dataclass_field(name, _written_as(hints[name])) for name in names]
    schema = core_schema.dataclass_schema(
        event_type, core_schema.dataclass_args_schema(event_type.__name__, fields), names
    )
    _SERIALIZERS[event_type] = SchemaSerializer(schema, core_schema.CoreConfig(ser_json_inf_nan="constants"))
    return _SERIALIZERS[event_type]


def event_dict(event: Any) -> dict[str, Any]:
    """An event (a frozen dataclass with a ``kind``) as JSON-ready values: ``{"event": kind, ...fields}``."""
    return {"event": event.kind, **_event_serializer(type(event)).to_python(event, mode="json")}
