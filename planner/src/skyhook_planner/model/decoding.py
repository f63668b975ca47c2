"""Reading API objects with pydantic: the base every wire model extends, the field types and the
label selector that a Skyhook and a DeploymentPolicy share, and the one place a
`ValidationError` becomes our `path: problem` lines.

A wire model mirrors the CRD's schema for one part of an object as written (camelCase names);
its `decoded()` builds the frozen value the planner reads. Our own checks raise `ValueError`
with the words a person sees; `fail` reports problems found below the object being checked,
each at its own path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, NoReturn, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    StrictStr,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import InitErrorDetails, PydanticCustomError, PydanticUseDefault

from skyhook_planner.model.vocabulary import (
    SELECTOR_OPERATORS,
    LabelSelector,
    SelectorRequirement,
    label_key_problem,
    label_value_problem,
)
from skyhook_schemas.durations import parse_duration
from skyhook_schemas.images import split_image

Loc = tuple[str | int, ...]
T = TypeVar("T")


class Wire(BaseModel):
    """One part of an API object as written. A null field counts as absent (the apiserver
    keeps nulls of nullable fields); an unknown field is ignored, as upstream's structs do,
    unless the model sets `unknown_field`."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel)

    # The problem an unknown field is refused with; None: unknown fields are ignored.
    unknown_field: ClassVar[str | None] = None
    # Required fields whose own check reports a missing value too, as null ("None is not ...").
    checked_when_missing: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _as_written(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        # Refused before the fields are read: the typo may be the field that looks missing.
        if cls.unknown_field is not None and (unknown := set(data) - set(_aliases(cls))):
            note = f"{cls.unknown_field}; known: {', '.join(_aliases(cls))}"
            fail(*(((key,), note) for key in sorted(map(str, unknown))))
        if None in data.values():
            data = {key: value for key, value in data.items() if value is not None}
        if cls.checked_when_missing:
            return {**dict.fromkeys(cls.checked_when_missing), **data}
        return data


@functools.cache
def _aliases(model: type[BaseModel]) -> tuple[str, ...]:
    return tuple(sorted(field.alias or name for name, field in model.model_fields.items()))


class Closed(Wire):
    """A part of our own design, where an unknown field is a typo to refuse."""

    unknown_field: ClassVar[str | None] = "unknown field"


def fail(*problems: tuple[Loc, str]) -> NoReturn:
    """Raise problems found below the object being validated, each at its path from it."""
    raise ValidationError.from_exception_data(
        "problems",
        [
            InitErrorDetails(type=PydanticCustomError("problem", text), loc=loc, input=None)
            for loc, text in problems
        ],
    )


def check(test: Callable[[Any], str | None]) -> AfterValidator:
    """A field validator from a function saying what is wrong with a value (None: nothing)."""

    def validate(value: Any) -> Any:
        if problem := test(value):
            raise ValueError(problem)
        return value

    return AfterValidator(validate)


def in_range(minimum: int, maximum: int | None = None) -> AfterValidator:
    allowed = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"
    return check(
        lambda value: (
            f"{value} is out of range (allowed {allowed})"
            if value < minimum or (maximum is not None and value > maximum)
            else None
        )
    )


def one_of(choices: tuple[str, ...]) -> AfterValidator:
    return check(
        lambda value: None if value in choices else f"{value!r} is not one of {', '.join(choices)}"
    )


def _unset_if_falsy(value: Any) -> Any:
    if not value:
        raise PydanticUseDefault
    return value


def _text(value: Any) -> str:
    return str(value or "")


# Leniencies Skyhook's decoder has always had, kept so that nothing it admitted is refused now:
# on some fields a falsy value ("", 0, false, an empty list) is unset too (`value or default`);
# some are read as text whatever was written (`str(value or "")`).
FalsyIsUnset = BeforeValidator(_unset_if_falsy)
Text = Annotated[str, BeforeValidator(_text)]


def parsed(parse: Callable[[str], T]) -> PlainValidator:
    """A field given as a non-empty string and read by `parse`, whose ValueError says what is
    wrong with it."""

    def validate(value: object) -> T:
        if not isinstance(value, str):
            raise ValueError(f"{value!r} is not a string")
        if not value:
            raise ValueError("required")
        return parse(value)

    return PlainValidator(validate)


def _duration(text: str) -> float:
    seconds = parse_duration(text)
    if seconds is None:
        raise ValueError(f"{text!r} is not a duration such as 90s, 30m or 1h30m")
    return seconds


# Ours: a Go duration (`30m`, `1h30m`, `0`), read as seconds.
Duration = Annotated[float, parsed(_duration)]


def _non_negative_duration(text: str) -> float:
    # Go's duration grammar takes a sign; a negative one is named as such rather than as
    # "not a duration", as upstream's webhook says it.
    if text.startswith("-") and parse_duration(text[1:]) is not None:
        raise ValueError("must be greater than or equal to 0")
    return _duration(text.removeprefix("+"))


# Upstream's fields of type Duration (drainConfig.timeout, stageTimeout): a Go duration that
# may carry a sign, of which only a negative one is refused.
NonNegativeDuration = Annotated[float, parsed(_non_negative_duration)]

# A string that must be given and not empty ("required" either way).
NonEmpty = Annotated[StrictStr, Field(min_length=1)]


def _pullable(image: str) -> str:
    """An image a pod runs as written: a full reference (`repo:tag`, `repo@digest`)."""
    if image:
        split_image(image)
    return image


# An image reference a pod of ours runs as written ("" when unset).
PullableImage = Annotated[StrictStr, AfterValidator(_pullable)]

# Our words for pydantic's structural errors; anything else keeps pydantic's message.
_WORDS = {
    "missing": "required",
    "string_too_short": "required",
    "string_type": "{input!r} is not a string",
    "bool_type": "{input!r} is not a boolean",
    "int_type": "{input!r} is not an integer",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
}


def messages(error: ValidationError, root: str) -> list[str]:
    """One `path: problem` line per error, the path dotted from `root` (`spec.packages.foo.version`,
    `spec.compartments[1].name`)."""
    lines = []
    for found in error.errors(include_url=False):
        path = root + "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}"
            for part in found["loc"]
            if part != "[key]"  # a bad dict key is named by the key itself
        )
        if found["type"] == "value_error":
            problem = str(found["ctx"]["error"])
        elif found["type"] in _WORDS:
            problem = _WORDS[found["type"]].format(input=found["input"])
        else:
            problem = found["msg"]
        lines.append(f"{path}: {problem}")
    return lines


# --- label selectors ----------------------------------------------------------------------------


# Read as text whatever was written, as Skyhook's decoder always has.
SelectorValue = Annotated[str, BeforeValidator(str), check(label_value_problem)]


class _RequirementWire(Wire):
    key: Annotated[Text, check(lambda key: label_key_problem(key) if key else "required")]
    operator: Annotated[StrictStr, one_of(SELECTOR_OPERATORS)]
    values: Annotated[tuple[SelectorValue, ...], FalsyIsUnset] = ()

    @model_validator(mode="after")
    def _values_fit_the_operator(self) -> _RequirementWire:
        if self.operator in {"In", "NotIn"} and not self.values:
            fail((("values",), f"must not be empty for operator {self.operator}"))
        if self.operator in {"Exists", "DoesNotExist"} and self.values:
            fail((("values",), f"must be empty for operator {self.operator}"))
        return self


class SelectorWire(Wire):
    """A Kubernetes label selector, with the label syntax the apiserver checks."""

    match_labels: Annotated[dict[StrictStr, StrictStr], FalsyIsUnset] = Field(default_factory=dict)
    match_expressions: Annotated[tuple[_RequirementWire, ...], FalsyIsUnset] = ()

    @model_validator(mode="after")
    def _labels_are_labels(self) -> SelectorWire:
        # Reported at matchLabels, each problem naming the key or value it is about.
        problems = [
            problem
            for key, value in self.match_labels.items()
            for problem in (label_key_problem(key), label_value_problem(value))
            if problem
        ]
        if problems:
            fail(*((("matchLabels",), problem) for problem in problems))
        return self

    def decoded(self) -> LabelSelector:
        return LabelSelector(
            dict(self.match_labels),
            tuple(SelectorRequirement(r.key, r.operator, r.values) for r in self.match_expressions),
        )
