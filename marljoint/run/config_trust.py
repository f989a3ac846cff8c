"""Whose a config file is, and what a config that is not the user's may name.

marljoint signs every ``config.toml`` it writes: the file's first line is ``# marljoint-signature: <64 hex digits>``,
the HMAC-SHA256 of the rest of the file under the user's secret key (:func:`marljoint.trust.text_signature`, the key
that signs env snapshots). A config read back (a run directory's ``config.toml``, or a ``--config`` file) is
*trusted* when that line matches this user's key, or when the user vouches for it (``--trust-run``,
``trust_run=True``).

A config that is not trusted (unsigned, signed under another key, or changed since it was signed) is read all the
same, but it may not name a function to call: its ``env`` may be a bundled env, an ``openspiel:`` game or a module
path (an installed module, which the user chose to install), never a factory path ``package.module:function``, which
calls any function of any module with the file's ``env_kwargs`` (``env = "os:system"`` runs a shell command). It is
refused before anything is imported (:class:`UntrustedConfigError`). No other setting names code: SuperSuit wrappers
are only looked up among SuperSuit's own wrappers (:func:`~marljoint.run.registry.supersuit_wrappers`) and called
with TOML values, and every other name (the algorithm, the collection backend, the redundancy kind, self-play) is a
key of one of marljoint's tables.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from typing import Any

from marljoint.run.errors import RunError
from marljoint.run.registry import is_factory_path
from marljoint.trust import text_signature

__all__ = [
    "SIGNATURE_PREFIX",
    "UntrustedConfigError",
    "config_signed",
    "function_env",
    "sign_config",
    "untrusted_config_error",
]

SIGNATURE_PREFIX = "# marljoint-signature: "
"""The start of a signed config's first line; the signature of the rest of the file follows it."""


class UntrustedConfigError(RunError):
    """A config file that is not signed with this user's key names a function to call; the message names the
    file, the value, why it is refused and the opt-in (``--trust-run``)."""


def sign_config(text: str) -> str:
    """``text`` with a first line holding its signature under the user's key.

    Example:
        >>> sign_config('env = "counter_v0"\\n').startswith(SIGNATURE_PREFIX)  # doctest: +SKIP
        True

    Raises:
        marljoint.trust.TrustKeyError: if the user's key file cannot be trusted (the message says how to fix it).
    """
    return f"{SIGNATURE_PREFIX}{text_signature(text)}\n{text}"


def config_signed(text: str) -> bool | None:
    """Whether ``text`` (a whole config file, newlines as ``\\n``) carries a signature line that matches its
    content under this user's key: ``True``; a signature line that does not match (another user's key, or changed
    since): ``False``; no signature line: ``None``.

    Raises:
        marljoint.trust.TrustKeyError: if the user's key file cannot be trusted.
    """
    first, newline, rest = text.partition("\n")
    if not first.startswith(SIGNATURE_PREFIX) or not newline:
        return None
    claimed = first[len(SIGNATURE_PREFIX) :].strip()
    return hmac.compare_digest(claimed.encode("ascii", "replace"), text_signature(rest).encode("ascii"))


def function_env(values: Mapping[str, Any]) -> str | None:
    """The ``env`` of ``values`` (a config file's settings) when it names a function to call
    (``package.module:function``), else ``None``: the one setting that can (see the module docstring).

    Example:
        >>> function_env({"env": "os:system"}), function_env({"env": "mpe2.simple_spread_v3"})
        ('os:system', None)
    """
    env = values.get("env")
    return env if isinstance(env, str) and is_factory_path(env) else None


def untrusted_config_error(
    path: str | os.PathLike[str], env: str, signed: bool | None, typed_env: bool | None = None
) -> UntrustedConfigError:
    """The refusal of a config file whose env names a function to call (:func:`function_env`) and that is not
    signed with this user's key.

    Args:
        path: the file.
        env: its env.
        signed: :func:`config_signed` of the file's text (``None``: unsigned; ``False``: another key, or altered).
        typed_env: for a ``--config`` file, ``False`` (the env was not given on the command line); ``None`` for a
            run directory's ``config.toml``.
    """
    why = (
        "is not signed (written by hand, or by a marljoint older than signed runs)"
        if signed is None
        else "is signed with another user's key, or was changed after it was signed"
    )
    fix = (
        "pass --trust-run (trust_run=True in Python) if you trust it"
        if typed_env is None
        else f"give the env on the command line (--env {env}) if you wrote this file, or pass --trust-run if you "
        "trust it"
    )
    return UntrustedConfigError(
        f"{path}: env = {env!r} names a function to call, and the file {why}, so calling it could run any code: "
        f"refused before anything was imported; {fix}"
    )
