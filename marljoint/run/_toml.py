"""Reading the TOML and JSON a user gives (config files, ``--set``, ``--env-kwargs``) with a limit on how deep it
nests, and a small TOML writer for run configs (reading uses the standard library's ``tomllib`` and ``json``)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_NESTING", "NestingTooDeep", "check_nesting", "dumps", "loads", "loads_json"]

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")

MAX_NESTING = 64
"""How deep arrays and tables (JSON objects) may nest in what a user gives: far more than any setting needs, and far
below the depth at which the standard library's recursive parsers exhaust Python's stack (about 500 for TOML)."""

# Strings and comments, whose brackets do not nest, or one bracket. TOML's multi-line strings come first.
_TOML_TOKENS = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*|[\[\]{}]')
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


class NestingTooDeep(ValueError):
    """TOML or JSON text nested deeper than :data:`MAX_NESTING` levels; the message names where it came from."""


def loads(text: str, source: str = "the TOML text") -> dict[str, Any]:
    """Parses TOML text (``tomllib`` on Python 3.11+, ``tomli`` before), refusing text nested too deep.

    Args:
        text: the TOML.
        source: what the text is, for the error (``"config file runs/a/config.toml"``).

    Raises:
        NestingTooDeep: arrays or tables (inline, dotted keys or headers) nest deeper than :data:`MAX_NESTING`.
        ValueError: the text is not TOML (``tomllib.TOMLDecodeError``).

    Example:
        >>> loads("a = [[1]]")
        {'a': [[1]]}
    """
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    check_nesting(text, source)
    try:
        values = tomllib.loads(text)
    except RecursionError:
        raise NestingTooDeep(_too_deep(source, "arrays and tables")) from None
    _check_parsed_depth(values, source, "tables")  # dotted keys and [a.b.c] headers nest without brackets
    return values


def loads_json(text: str, source: str = "the JSON text") -> Any:
    """Parses JSON text, refusing text nested too deep (the JSON counterpart of :func:`loads`).

    Raises:
        NestingTooDeep: arrays or objects nest deeper than :data:`MAX_NESTING`.
        json.JSONDecodeError: the text is not JSON.

    Example:
        >>> loads_json('{"scenario": "easy"}', "--env-kwargs")
        {'scenario': 'easy'}
    """
    check_nesting(text, source, json_text=True)
    try:
        return json.loads(text)
    except RecursionError:
        raise NestingTooDeep(_too_deep(source, "arrays and objects")) from None


def check_nesting(text: str, source: str, json_text: bool = False) -> None:
    """Refuses ``text`` whose brackets and braces, outside strings and comments, nest deeper than
    :data:`MAX_NESTING`: a scan that reads the text once, before a recursive parser could run out of stack.

    Raises:
        NestingTooDeep: naming ``source`` and the limit.
    """
    depth = 0
    for token in (_JSON_TOKENS if json_text else _TOML_TOKENS).finditer(text):
        bracket = token.group()
        if bracket in "[{":
            depth += 1
            if depth > MAX_NESTING:
                kind = "arrays and objects" if json_text else "arrays and tables"
                raise NestingTooDeep(_too_deep(source, kind))
        elif bracket in "]}":
            depth = max(depth - 1, 0)


def _check_parsed_depth(value: Any, source: str, kind: str) -> None:
    """Walks the parsed value without recursion and refuses one deeper than :data:`MAX_NESTING`."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, Mapping) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, (Mapping, list)):
                if depth + 1 > MAX_NESTING:
                    raise NestingTooDeep(_too_deep(source, kind))
                stack.append((child, depth + 1))


def _too_deep(source: str, kind: str) -> str:
    return (
        f"{source} nests {kind} deeper than {MAX_NESTING} levels, the limit; no setting needs more than a few "
        "levels: flatten it"
    )


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
