"""The JSON shapes of a run's record, as pydantic models: one adapter for every encoder.

``Shape`` is the base: written from our own values (``of``: read by attribute from a record's
dataclass), read back from hostile JSON (``read``: strict types, unknown keys ignored, and a field
whose value has the wrong type read as its default, as a hand edit may leave it). The notebook's
metadata (``notebook/metadata.py``) and the events' JSON (``event_dict``, behind ``Event.to_dict``)
are made of these shapes. Owns no I/O and no layout: which cell holds what is ``notebook/export.py``'s.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from functools import cache, partial
from typing import Annotated, Any, ClassVar, Literal, Self, TypeVar

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    create_model,
    model_serializer,
    model_validator,
)

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


class _OmitEmpty:
    """Field marker: the key is left out of the JSON while the value is empty (older records stay as they were)."""

    def __repr__(self) -> str:
        return "OMIT_EMPTY"


OMIT_EMPTY = _OmitEmpty()
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

    @model_serializer(mode="wrap")
    def _omit_empty(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for name in _omitted(type(self)):
            key = type(self).model_fields[name].serialization_alias or name
            if key in out and not out[key]:
                del out[key]
        return out

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


@cache
def _omitted(shape: type[Shape]) -> tuple[str, ...]:
    return tuple(name for name, info in shape.model_fields.items() if OMIT_EMPTY in info.metadata)


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


class _EventWire(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="constants")
    kind: ClassVar[str]


def _wire_type(annotation: Any) -> Any:
    """The shape a field is written as: a record's wire shape, a tuple of them as a list, anything else as it is."""
    if annotation in _WIRES:
        return _WIRES[annotation]
    if typing.get_origin(annotation) is tuple:
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis and args[0] in _WIRES:
            return types.GenericAlias(list, (_WIRES[args[0]],))
    return Any


_TWINS: dict[type[Any], type[_EventWire]] = {}


def _twin(event_type: type[Any]) -> type[_EventWire]:
    """A pydantic twin of an event dataclass: the same fields in the same order, records as their wire shape."""
    if event_type in _TWINS:
        return _TWINS[event_type]
    hints = typing.get_type_hints(event_type)
    fields: dict[str, Any] = {
        field.name: (_wire_type(hints[field.name]), Field(validation_alias=AliasChoices(field.name)))
        for field in dataclasses.fields(event_type)
    }
    _TWINS[event_type] = create_model(f"{event_type.__name__}Wire", __base__=_EventWire, **fields)
    return _TWINS[event_type]


def event_dict(event: Any) -> dict[str, Any]:
    """An event (a frozen dataclass with a ``kind``) as JSON-ready values: ``{"event": kind, ...fields}``."""
    wire = _twin(type(event)).model_validate(event, from_attributes=True, strict=False)
    return {"event": event.kind, **wire.model_dump(mode="json")}
