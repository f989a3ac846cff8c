"""Argument types of the ``marljoint`` commands: each refuses bad input with a message argparse prints as one line."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

USAGE_ERROR = 2
"""The exit status of every command's bad input (argparse's own)."""

__all__ = [
    "USAGE_ERROR",
    "integer",
    "json_object",
    "non_negative_float",
    "non_negative_int",
    "out_path",
    "positive_float",
    "positive_int",
    "seed",
    "setting",
    "sweep_axis",
    "wandb_project",
    "wrapper",
]

MAX_SEED = 2**63 - 1
"""The largest seed: every generator of a run is seeded from it (numpy's seed sequences take it)."""


def integer(text: str) -> int:
    """An integer; ``100_000`` and an integral ``1e5`` are accepted too."""
    cleaned = text.strip().replace("_", "")
    try:
        return int(cleaned)
    except ValueError:
        pass
    try:
        value = float(cleaned)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not math.isfinite(value) or value != int(value):
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return int(value)


def positive_int(text: str) -> int:
    """An integer >= 1 (``1e5`` accepted)."""
    value = integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text}")
    return value


def seed(text: str) -> int:
    """A seed: an integer in ``[0, 2**63 - 1]``."""
    value = integer(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"a seed must be an integer from 0 to 2**63 - 1, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def json_object(text: str) -> dict[str, Any]:
    """A JSON object (keyword arguments), nested at most :data:`~marljoint.run._toml.MAX_NESTING` levels deep."""
    from marljoint.run import _toml

    try:
        value = _toml.loads_json(text, "the JSON object")
    except _toml.NestingTooDeep as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg} at column {exc.colno}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f'expected a JSON object like \'{{"scenario": "easy"}}\', got {text!r}')
    return value


def setting(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` with the value read as TOML (``3e-4``, ``[128, 128]``, ``true``, ``{backend = "ray"}``); a
    value that is not TOML is taken as a string (``device=cuda``). The key is checked with the other settings."""
    from marljoint.run import _toml

    key, sep, raw = text.partition("=")
    key, raw = key.strip(), raw.strip()
    if not sep or not key or not raw:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE such as learning_rate=3e-4, got {text!r}")
    try:
        value = _toml.loads(f"value = {raw}", f"the value of {key}")["value"]
    except _toml.NestingTooDeep as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    except ValueError:
        value = raw
    return key, value


def wrapper(text: str) -> str | dict[str, Any]:
    """``NAME`` or ``NAME:KEY=VALUE,KEY=VALUE`` of a SuperSuit wrapper (``resize_v1:x_size=84,y_size=84``), values
    read as TOML; the name is checked with the other settings."""
    from marljoint.run import _toml

    name, _, rest = text.partition(":")
    name = name.strip()
    if not name:
        raise argparse.ArgumentTypeError(
            f"expected NAME or NAME:KEY=VALUE,... such as resize_v1:x_size=84, got {text!r}"
        )
    if not rest.strip():
        return name
    kwargs: dict[str, Any] = {"name": name}
    for item in rest.split(","):
        key, sep, raw = item.partition("=")
        if not sep or not key.strip() or not raw.strip():
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE in {text!r}, got {item!r}")
        try:
            kwargs[key.strip()] = _toml.loads(f"value = {raw.strip()}", f"the value of {key.strip()}")["value"]
        except _toml.NestingTooDeep as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        except ValueError:
            kwargs[key.strip()] = raw.strip()
    return kwargs


def out_path(text: str) -> Path:
    """A path to write (``--out``). An empty or blank one is refused: it would be the current directory, where
    ``--force`` would replace whatever run files it holds."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"an empty or blank path ({text!r}) would be the current directory; give the directory to write, "
            "e.g. --out runs/spread (or --out . to mean the current directory)"
        )
    return Path(text)


def wandb_project(text: str) -> str:
    """A Weights & Biases project name W&B accepts (:func:`marljoint.run.wandb_names.check_project`)."""
    from marljoint.run.errors import RunError
    from marljoint.run.wandb_names import check_project

    try:
        return check_project(text)
    except RunError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--wandb: ")) from None


def workers_or_auto(text: str) -> int | str:
    """A positive integer, or ``auto``."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be a positive integer or 'auto', got {text}") from None


def env_workers_count(text: str) -> int | str:
    """A number of env workers: an integer >= 0 (0: collect in this process), or ``auto``."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0 (0: in this process) or 'auto', got {text}")
    return value


def sweep_axis(text: str) -> tuple[str, list[tuple[str, Any]]]:
    """``KEY=V1,V2,...`` as ``(key, [(label, value), ...])``, each value read as ``--set`` reads it; commas inside
    brackets, braces or quotes belong to the value (``hidden_sizes=[64,64],[128,128]``)."""
    key, sep, rest = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=V1,V2,... such as learning_rate=1e-3,3e-4, got {text!r}")
    labels = [part.strip() for part in _split_values(rest)]
    if not all(labels):
        raise argparse.ArgumentTypeError(f"empty value in {text!r}; give KEY=V1,V2,... with no empty item")
    values = [setting(f"{key}={label}")[1] for label in labels]
    for k, value in enumerate(values):
        if any(value == earlier and type(value) is type(earlier) for earlier in values[:k]):
            raise argparse.ArgumentTypeError(f"{key} lists the value {labels[k]} twice in {text!r}")
    return key, list(zip(labels, values))


def _split_values(text: str) -> list[str]:
    """Splits at the commas outside brackets, braces and quotes."""
    parts, depth, quote, current = [], 0, "", []
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    return [*parts, "".join(current)]
