"""A small TOML writer for run configs (reading uses the standard library's ``tomllib``)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["dumps", "loads"]

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def loads(text: str) -> dict[str, Any]:
    """Parses TOML text (``tomllib`` on Python 3.11+, ``tomli`` before)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib.loads(text)


def dumps(values: Mapping[str, Any], comments: Mapping[str, str] | None = None) -> str:
    """Writes a mapping as TOML: scalars and lists as ``key = value``, nested mappings as inline tables.

    ``None`` values are left out (TOML has no null), with a comment saying so.

    Raises:
        TypeError: for values TOML cannot hold (e.g. ``None`` inside a list, or arbitrary objects).
    """
    comments = comments or {}
    lines = []
    for key, value in values.items():
        if key in comments:
            lines.extend(f"# {line}" for line in comments[key].splitlines())
        if value is None:
            lines.append(f"# {_key(key)} is not set (None)")
            continue
        lines.append(f"{_key(key)} = {_value(value)}")
    return "\n".join(lines) + "\n"


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = [f"{_key(str(k))} = {_value(v)}" for k, v in value.items() if v is not None]
        if len(items) != len(value):
            raise TypeError("TOML cannot hold None inside a table")
        return "{" + ", ".join(items) + "}"
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _value(value.item())
    raise TypeError(f"TOML cannot hold a {type(value).__name__} ({value!r})")
