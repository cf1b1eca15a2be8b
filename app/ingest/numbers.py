"""Whole numbers from untrusted text, JSON and pickles, kept only when the database can hold
them: steps below :data:`MAX_STEP`, counts and seeds in int64, batch sizes in int32."""

from __future__ import annotations

import math
from typing import Any

MAX_STEP = 2**62  # as metric_columns: steps are int64 arrays with room for arithmetic
INT64 = 2**63
INT32 = 2**31
_MAX_DIGITS = 19  # int() of longer text is slow, and past 4300 digits an error


def digits(text: str, *, below: int = MAX_STEP) -> int | None:
    """The number a run of decimal digits (``\\d+``) writes; None if ``below`` or more."""
    if len(text) > _MAX_DIGITS or not text.isdecimal():
        return None
    value = int(text)
    return value if value < below else None


def whole(value: Any, *, low: int = 0, below: int = INT64) -> int | None:
    """An int (or an integral finite float) in ``[low, below)``, else None; never a bool."""
    if type(value) is float and math.isfinite(value) and value.is_integer():
        value = int(value)
    if type(value) is not int:
        return None
    return value if low <= value < below else None
