"""Search spaces of ``marljoint tune``: the ranges Optuna samples settings from (Optuna is optional).

``pip install "marljoint[tune]"`` installs Optuna; nothing here imports it until a search runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["SCALES", "OptunaUnavailable", "ParamRange", "check_search_space", "require_optuna"]

SCALES = ("linear", "log", "int")
"""How a :class:`ParamRange` is sampled: uniformly, log-uniformly, or uniformly over the integers."""


class OptunaUnavailable(ImportError):
    """Optuna is needed (``marljoint tune``) but not installed; the message gives the install command."""


def require_optuna() -> Any:
    """Imports Optuna, or raises :class:`OptunaUnavailable` naming the extra that installs it."""
    try:
        import optuna
    except ImportError as exc:
        raise OptunaUnavailable('marljoint tune needs Optuna: pip install "marljoint[tune]"') from exc
    return optuna


@dataclass(frozen=True)
class ParamRange:
    """One setting to search: a key any config file holds and the range its values are drawn from.

    Attributes:
        key: the setting (``learning_rate``, ``ent_coef``, ...).
        low: the smallest value.
        high: the largest value (above ``low``).
        scale: one of :data:`SCALES`.

    Raises:
        ValueError: for an unknown scale, ``low >= high``, a log range that is not above 0, or an int range with
            non-integral bounds.
    """

    key: str
    low: float
    high: float
    scale: str = "linear"

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("key must be a setting name such as learning_rate, got ''")
        if self.scale not in SCALES:
            raise ValueError(f"scale must be one of {list(SCALES)}, got {self.scale!r}")
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low >= self.high:
            raise ValueError(
                f"{self.key}: the range needs finite bounds LOW < HIGH, got {self.low:g}:{self.high:g}; swap them"
            )
        if self.scale == "log" and self.low <= 0:
            raise ValueError(f"{self.key}: a log range needs LOW > 0, got {self.low:g}; use LOW:HIGH for a linear one")
        if self.scale == "int" and (self.low != int(self.low) or self.high != int(self.high)):
            raise ValueError(f"{self.key}: an int range needs integral bounds, got {self.low:g}:{self.high:g}")

    @classmethod
    def parse(cls, text: str) -> ParamRange:
        """``KEY=LOW:HIGH`` (uniform), ``KEY=log:LOW:HIGH`` (log-uniform) or ``KEY=int:LOW:HIGH`` (integers).

        Raises:
            ValueError: for any other form, naming the forms accepted.

        Example:
            >>> ParamRange.parse("learning_rate=log:1e-4:1e-2")
            ParamRange(key='learning_rate', low=0.0001, high=0.01, scale='log')
        """
        forms = "KEY=LOW:HIGH, KEY=log:LOW:HIGH or KEY=int:LOW:HIGH such as learning_rate=log:1e-4:1e-2"
        key, sep, rest = text.partition("=")
        parts = [p.strip() for p in rest.split(":")]
        scale = parts.pop(0) if parts and parts[0] in ("log", "int") else "linear"
        if not sep or not key.strip() or len(parts) != 2:
            raise ValueError(f"expected {forms}, got {text!r}")
        try:
            low, high = float(parts[0]), float(parts[1])
        except ValueError:
            raise ValueError(f"expected numbers in {forms}, got {text!r}") from None
        return cls(key.strip(), low, high, scale)

    def __str__(self) -> str:
        """The range as ``--param`` takes it: ``learning_rate=log:0.0001:0.01``."""
        scale = "" if self.scale == "linear" else f"{self.scale}:"
        return f"{self.key}={scale}{self.low:g}:{self.high:g}"

    def ends(self) -> tuple[float | int, float | int]:
        """The smallest and the largest value a trial can draw, of the type it draws (``int`` for an int range)."""
        if self.scale == "int":
            return int(self.low), int(self.high)
        return float(self.low), float(self.high)

    def suggest(self, trial: Any) -> float | int:
        """The value an Optuna trial draws from this range."""
        if self.scale == "int":
            return trial.suggest_int(self.key, int(self.low), int(self.high))
        return trial.suggest_float(self.key, self.low, self.high, log=self.scale == "log")


def check_search_space(params: Sequence[ParamRange], spec: Any) -> None:
    """Refuses a search space a trial's settings could fall outside of, before the first trial: both ends of every
    range are built into the run's settings, one range at a time, as a trial builds them, so the settings' own
    validation names the field.

    Args:
        params: the ranges (``--param``).
        spec: the run's settings (:class:`~marljoint.run.spec.RunSpec`) the trials change.

    Raises:
        RunError: naming the range, the value a trial could draw and why the settings refuse it (and the int range
            to search instead, for a setting that takes integers).

    Example:
        >>> from marljoint.run.spec import RunSpec
        >>> check_search_space([ParamRange.parse("n_epochs=1:4")], RunSpec())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        marljoint.run.errors.RunError: --param n_epochs=1:4: a trial could draw n_epochs = 1.0, ...=int:1:4
    """
    from marljoint.run.errors import RunError

    for param in params:
        for value in param.ends():
            reason = _refusal(param.key, value, spec)
            if reason is None:
                continue
            low, high = math.ceil(param.low), math.floor(param.high)
            hint = ""
            if param.scale != "int" and low < high and _refusal(param.key, round(value), spec) is None:
                hint = f"; search integers with {param.key}=int:{low}:{high}"
            raise RunError(
                f"--param {param}: a trial could draw {param.key} = {value!r}, which the run refuses ({reason}){hint}"
            )


def _refusal(key: str, value: Any, spec: Any) -> str | None:
    """Why the run's settings refuse ``key = value`` (built as a trial builds them), or ``None``."""
    from marljoint.run.errors import RunError
    from marljoint.run.spec import RunSpec

    try:
        RunSpec.from_dict({key: value}, base=spec, given={key: value})
    except RunError as exc:
        return str(exc)
    return None
