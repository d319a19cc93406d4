"""The strict field types every record of a bundle file is read with.

A bundle is a folder of files anyone can edit: a number must be a number ("12.5" is not one, nor is a
bool) and finite; a record's declared fields are checked for their type, its other keys kept, unread.
The records themselves: bench/bundle/schema.py and bench/bundle/cell_numbers.py.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, PlainValidator
from pydantic_core import PydanticCustomError


def _number(value: Any) -> int | float | None:
    """An int or a finite float, kept as it is (a count stays a whole number); never a string or a bool."""
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        if isinstance(value, float) and not math.isfinite(value):
            raise PydanticCustomError("finite_number", "Input should be a finite number")
        return value
    raise PydanticCustomError("float_type", "Input should be a valid number")


Num = Annotated[int | float | None, PlainValidator(_number)]


class Part(BaseModel):
    """A record of a bundle file, or a part of one: strict types, finite numbers, unknown keys kept."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)
