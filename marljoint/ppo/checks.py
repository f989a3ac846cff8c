"""Validators the trainer's setting groups share: each raises ``ValueError`` naming the field, its value and the fix."""

from __future__ import annotations

import math
from typing import Any


def is_int(value: Any) -> bool:
    """Whether ``value`` is an ``int`` (``bool`` excluded, although Python counts it as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(name: str, value: Any) -> None:
    """Refuses what is not an integer >= 1."""
    if not is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def positive(name: str, value: Any, hint: str) -> None:
    """Refuses what is not a number > 0; ``hint`` says what to give instead."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r} ({hint})")


def finite(name: str, value: float, hint: str) -> None:
    """Refuses an infinite number; ``hint`` says what to give instead."""
    if math.isinf(value):
        raise ValueError(f"{name} must be finite, got {value!r} ({hint})")


def non_negative(name: str, value: Any) -> None:
    """Refuses what is not a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or math.isinf(value):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def in_unit_interval(name: str, value: Any) -> None:
    """Refuses what is not a number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")


def booleans(group: Any, names: tuple[str, ...]) -> None:
    """Refuses a field of ``names`` that is not ``True`` or ``False`` (a TOML string ``"true"`` included)."""
    for name in names:
        value = getattr(group, name)
        if not isinstance(value, bool):
            raise ValueError(
                f"{name} must be true or false, got {value!r}"
                + (" (a string: write it without quotes in TOML)" if isinstance(value, str) else "")
            )
