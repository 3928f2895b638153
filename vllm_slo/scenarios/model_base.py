"""What every model of a scenario file is built on: `Frozen` (immutable, unknown keys refused),
the field types the sections share (`Seconds`: a duration as the user writes it, at most a
week; the highest rate), and the validation of mapping keys that a registry names rather than
the model's fields — the `slo:` block's metrics (`metrics.METRICS`) and `traffic`'s profile
sections (`profile_specs.PROFILE_SPECS`) — so that a metric or a profile registered in one
module is a key of the scenario file at once, with errors as precise as a field's: located at
the key, reported together with the model's own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    TypeAdapter,
    ValidationError,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from vllm_slo.scenarios.units import parse_duration_s

_Model = TypeVar("_Model", bound=BaseModel)
MAX_DURATION_S = 7 * 86_400.0  # any duration or timeout of a scenario: at most a week
MAX_RATE = 100_000.0  # requests (or users spawned) per second


def _at_most_a_week(seconds: float) -> float:
    if not seconds <= MAX_DURATION_S:  # also NaN
        raise ValueError(f"at most 7 days ({MAX_DURATION_S:.0f} s), got {seconds:g} s")
    return seconds


Seconds = Annotated[float, BeforeValidator(parse_duration_s), AfterValidator(_at_most_a_week)]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @classmethod
    def registered_keys(cls) -> Mapping[str, Any]:
        """Keys of this mapping that a registry adds to the model's fields, each with the type
        of its value (a model, for the loader to name the keys allowed inside it)."""
        return {}


def _details(error: Mapping[str, Any], *prefix: str | int) -> InitErrorDetails:
    """One error of a ValidationError, located under `prefix` (type and message kept)."""
    return InitErrorDetails(type=PydanticCustomError(str(error["type"]), str(error["msg"])),
                            loc=(*prefix, *error["loc"]), input=error.get("input"))


def validate_registered_keys(
        model: type[BaseModel], data: object, types: Mapping[str, TypeAdapter[Any]],
        validate_rest: Callable[[Any], _Model]) -> tuple[_Model, dict[str, Any] | None]:
    """Validates the keys of the mapping `data` named in `types` by their adapters and the rest
    by `validate_rest` (a model validator's handler); raises one ValidationError holding every
    error of both. Returns the model and the registered keys' values (None when `data` was not
    a mapping: a model instance passes through with its own values)."""
    if not isinstance(data, dict):
        return validate_rest(data), None
    errors: list[InitErrorDetails] = []
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in types:
            try:
                values[key] = types[key].validate_python(value)
            except ValidationError as error:
                errors += [_details(item, key) for item in error.errors(include_url=False)]
    try:
        validated = validate_rest({key: v for key, v in data.items() if key not in types})
    except ValidationError as error:
        if not errors:
            raise
        errors = [_details(item) for item in error.errors(include_url=False)] + errors
    if errors:
        raise ValidationError.from_exception_data(model.__name__, errors)
    return validated, values
