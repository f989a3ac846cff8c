"""Resolving an env name, as given to ``marljoint train --env``, into a factory of PettingZoo envs.

Accepted forms:

- a bundled env: ``bucket_brigade_v0`` (any module of :mod:`marljoint_envs`);
- a module path: ``mpe2.simple_spread_v3``, ``pettingzoo.sisl.multiwalker_v9`` (its ``parallel_env``, else its
  ``env``);
- a factory path: ``my_pkg.my_env:make`` (any callable returning a PettingZoo env);
- an OpenSpiel game: ``openspiel:leduc_poker`` (any OpenSpiel game string, through Shimmy, observing the
  information state; ``--env-kwargs`` are the game's parameters; see :mod:`marljoint.env.openspiel`).

Keyword arguments (``--env-kwargs``) are passed to the factory on every call.

A factory path calls any function it names, so a config file that is not the user's (unsigned, or signed under
another key) may not name one: :mod:`marljoint.run.config_trust` refuses it before this module resolves anything.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import re
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import marljoint_envs
from marljoint.best_response.games import KnownGame, MatrixGame
from marljoint.best_response.resolve import game_by_name
from marljoint.env.openspiel import OPENSPIEL_PREFIX, load_openspiel_game, openspiel_env

__all__ = [
    "BUNDLED_ENVS",
    "EnvSpecError",
    "ResolvedEnv",
    "env_factory",
    "is_factory_path",
    "known_game",
    "resolve_env",
    "supersuit_wrappers",
    "wrapped_factory",
]

BUNDLED_ENVS: tuple[str, ...] = tuple(marljoint_envs.__all__)
"""Names accepted without a package prefix: the modules of :mod:`marljoint_envs`."""


class EnvSpecError(ValueError):
    """An env name that cannot be resolved, or keyword arguments the env does not accept."""


@dataclass(frozen=True)
class ResolvedEnv:
    """A resolved ``--env``: the name as given, its keyword arguments, and the factory to call.

    Attributes:
        name: the name as given (``bucket_brigade_v0``, ``mpe2.simple_spread_v3``, ``pkg.mod:make``).
        factory: the bare factory (``parallel_env``, ``env`` or the named callable).
        kwargs: keyword arguments passed to ``factory`` on every call.
    """

    name: str
    factory: Callable[..., Any] = field(repr=False, compare=False)
    kwargs: dict[str, Any] = field(default_factory=dict)

    def make(self, **extra: Any) -> Any:
        """Builds one env with :attr:`kwargs` (``extra`` keyword arguments override them)."""
        return self.factory(**{**self.kwargs, **extra})

    def env_fn(self, **extra: Any) -> Callable[[], Any]:
        """A picklable zero-argument function building one env, as :class:`~marljoint.PettingZooJointEnv` takes."""
        return functools.partial(self.factory, **{**self.kwargs, **extra})


def is_factory_path(name: str) -> bool:
    """Whether ``name`` is an env of the form ``package.module:function`` (which calls that function), as opposed
    to a bundled env, a module path or an ``openspiel:`` game.

    Example:
        >>> is_factory_path("my_pkg.envs:make"), is_factory_path("openspiel:kuhn_poker"), is_factory_path("counter_v0")
        (True, False, False)
    """
    name = name.strip()
    return ":" in name and not name.startswith(OPENSPIEL_PREFIX)


def resolve_env(name: str, kwargs: dict[str, Any] | None = None) -> ResolvedEnv:
    """Resolves ``name`` (see the module docstring) and checks that the factory accepts ``kwargs``.

    Example:
        >>> env = resolve_env("bucket_brigade_v0", {"scenario": "easy"})
        >>> env.make().possible_agents[:2]
        ['agent_0', 'agent_1']

    Raises:
        EnvSpecError: for a name that does not import, a module without ``parallel_env``/``env``, an attribute
            that is not callable, or keyword arguments that the factory's signature rejects.
    """
    if not isinstance(name, str) or not name.strip():
        raise EnvSpecError(f"env name must be a non-empty string, got {name!r}")
    kwargs = dict(kwargs or {})
    name = name.strip()
    if name.startswith(OPENSPIEL_PREFIX):
        return _resolve_openspiel(name, kwargs)
    module_path, _, attribute = name.partition(":")
    if ":" in name and (not module_path or not attribute):
        raise EnvSpecError(f"env {name!r}: a factory path looks like 'package.module:function'")
    if module_path in BUNDLED_ENVS:
        module_path = f"marljoint_envs.{module_path}"
    module = _import(name, module_path)
    if attribute:
        factory = module
        for part in attribute.split("."):
            factory = getattr(factory, part, None)
            if factory is None:
                raise EnvSpecError(f"env {name!r}: module {module_path!r} has no attribute {attribute!r}")
        if not callable(factory):
            raise EnvSpecError(f"env {name!r}: {attribute!r} is a {type(factory).__name__}, not a function")
    else:
        factory = _module_factory(name, module)
    _check_kwargs(name, factory, kwargs)
    return ResolvedEnv(name=name, factory=factory, kwargs=kwargs)


def _resolve_openspiel(name: str, kwargs: dict[str, Any]) -> ResolvedEnv:
    """``openspiel:<game string>``: the game is loaded once here, so an unknown game or parameter fails now."""
    game = name[len(OPENSPIEL_PREFIX) :].strip()
    if not game:
        raise EnvSpecError(f"env {name!r}: name the OpenSpiel game after the prefix, e.g. openspiel:leduc_poker")
    parameters = {k: v for k, v in kwargs.items() if k != "render_mode"}
    try:
        load_openspiel_game(game, **parameters)
    except ImportError as exc:
        raise EnvSpecError(f"env {name!r}: {exc}") from None
    except ValueError as exc:
        raise EnvSpecError(f"env {name!r}: {exc}") from None
    return ResolvedEnv(name=name, factory=functools.partial(openspiel_env, game), kwargs=kwargs)


# The pip command that installs a package envs come from, by its top-level name (missing ones get no hint).
_INSTALL_COMMANDS = {
    "mpe2": 'pip install "marljoint[mpe]"',
    "pettingzoo": 'pip install "marljoint[envs]"',
    "shimmy": 'pip install "marljoint[openspiel]"',
    "pyspiel": 'pip install "marljoint[openspiel]"',
    "open_spiel": 'pip install "marljoint[openspiel]"',
    "supersuit": "pip install supersuit",
}
# PettingZoo's env families whose dependencies are optional; the first three come with marljoint[envs].
_PETTINGZOO_FAMILIES = ("classic", "sisl", "butterfly", "atari", "mpe")


def _import(name: str, module_path: str) -> types.ModuleType:
    try:
        return importlib.import_module(module_path)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_path
        if module_path.startswith(missing) or missing == module_path:
            raise EnvSpecError(f"unknown env {name!r}: {_unknown_module(module_path, missing)}") from None
        raise EnvSpecError(
            f"env {name!r}: importing {module_path!r} needs the missing package {missing!r}; install it with "
            f"{_install_command(module_path, missing)}"
        ) from None
    except Exception as exc:  # envs raise their own types for missing optional dependencies
        family = _family(module_path)
        hint = f"; {_install_command(module_path, None)} installs its dependencies" if family else ""
        if family == "mpe":
            env = module_path.rpartition(".")[2]
            hint = f'; PettingZoo\'s MPE envs are now the package mpe2: --env mpe2.{env} (pip install "marljoint[mpe]")'
        raise EnvSpecError(
            f"env {name!r}: importing {module_path!r} failed ({type(exc).__name__}: {exc}){hint}"
        ) from None


def _unknown_module(module_path: str, missing: str) -> str:
    """Why ``module_path`` does not import: the versions its package has of the env, or how to install the
    package that is missing."""
    if "." not in module_path:
        versions = _versions(list(BUNDLED_ENVS), module_path)
        if versions:
            return f"no bundled env of that version; bundled versions: {', '.join(versions)}"
        return (
            f"no module named {missing!r} (bundled envs: {', '.join(BUNDLED_ENVS)}; for other envs give the "
            "module path, e.g. mpe2.simple_spread_v3)"
        )
    parent_path, _, leaf = module_path.rpartition(".")
    try:
        parent = importlib.import_module(parent_path)
    except Exception:
        top = module_path.split(".")[0]
        return f"no module named {missing!r}; is the package {top!r} installed? ({_install_command(module_path, top)})"
    siblings = [m.name for m in pkgutil.iter_modules(getattr(parent, "__path__", []))]
    versions = _versions(siblings, leaf)
    if versions:
        return f"{parent_path} has no {leaf}; the versions it has: {', '.join(parent_path + '.' + v for v in versions)}"
    envs = [m for m in siblings if _VERSIONED.fullmatch(m)]
    listed = f" (its envs: {', '.join(envs[:12])}{', ...' if len(envs) > 12 else ''})" if envs else ""
    return f"{parent_path} has no module {leaf!r}{listed}"


_VERSIONED = re.compile(r"(.+)_v(\d+)")


def _versions(names: list[str], leaf: str) -> list[str]:
    """The names among ``names`` that are versions (``<base>_v<N>``) of the env ``leaf`` names, oldest first."""
    match = _VERSIONED.fullmatch(leaf)
    base = match.group(1) if match else leaf
    found = [(int(m.group(2)), n) for n in names if (m := _VERSIONED.fullmatch(n)) and m.group(1) == base]
    return [n for _, n in sorted(found) if n != leaf]


def _family(module_path: str) -> str | None:
    parts = module_path.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "pettingzoo" and parts[1] in _PETTINGZOO_FAMILIES else None


def _install_command(module_path: str, missing: str | None) -> str:
    """The pip command that installs what ``module_path`` needs: PettingZoo's extra for its env families, ours
    for the packages our extras hold, else the missing package itself."""
    family = _family(module_path)
    if family is not None:
        ours = ' or pip install "marljoint[envs]"' if family in ("classic", "sisl", "butterfly") else ""
        return f'pip install "pettingzoo[{family}]"{ours}'
    top = (missing or module_path).split(".")[0]
    return _INSTALL_COMMANDS.get(top, f"pip install {top}")


def _module_factory(name: str, module: types.ModuleType) -> Callable[..., Any]:
    for attribute in ("parallel_env", "env"):
        factory = getattr(module, attribute, None)
        if callable(factory):
            return factory
    raise EnvSpecError(
        f"env {name!r}: module {module.__name__!r} has neither parallel_env() nor env(); "
        f"name the factory as '{module.__name__}:function'"
    )


def _check_kwargs(name: str, factory: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return
    try:
        signature.bind_partial(**kwargs)
    except TypeError:
        params = signature.parameters.values()
        if any(p.kind == p.VAR_KEYWORD for p in params):
            return
        accepted = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        unknown = sorted(set(kwargs) - set(accepted))
        raise EnvSpecError(
            f"env {name!r} does not accept the keyword argument(s) {unknown}; it accepts {accepted}"
        ) from None


def known_game(env_name: str, env_kwargs: dict[str, Any] | None = None) -> KnownGame | None:
    """The known game behind a bundled env, or ``None`` when the env has no known tree.

    Example:
        >>> known_game("matrix_game_v0", {"game": "rps"}).num_players
        2

    Args:
        env_name: a ``marljoint_envs`` module name, e.g. ``"kuhn_poker_v0"`` or ``"matrix_game_v0"``.
        env_kwargs: the env's keyword arguments (``game=`` or ``payoffs=`` for ``matrix_game_v0``).

    Returns:
        :class:`~marljoint.best_response.KuhnGame`, :class:`~marljoint.best_response.MatrixGame`, an
        :class:`~marljoint.best_response.openspiel_game.OpenSpielGame` for ``openspiel:<game>``, or ``None``.

    Raises:
        ValueError: an OpenSpiel game that cannot be tabulated (too many information states, mean-field
            dynamics), naming the count and the alternative.
    """
    kwargs = dict(env_kwargs or {})
    known = game_by_name(env_name, kwargs)
    if known is not None:
        return known
    if env_name == "matrix_game_v0":
        from marljoint_envs import matrix_game_v0

        if kwargs.get("payoffs") is not None:
            return MatrixGame(matrix_game_v0.payoff_tensors(np.asarray(kwargs["payoffs"])), "custom")
        name = kwargs.get("game", "rps")
        return MatrixGame(matrix_game_v0.payoff_tensors(name), name)
    return None


def supersuit_wrappers(wrappers: Any) -> list[tuple[str, dict[str, Any]]]:
    """Checks a list of SuperSuit wrappers to apply to every env copy, in order, before the adapter.

    Each entry is a wrapper name (``"color_reduction_v0"``) or a table with ``name`` and its keyword arguments
    (``{name = "resize_v1", x_size = 84, y_size = 84}``).

    Returns:
        ``[(name, kwargs), ...]``.

    Raises:
        EnvSpecError: for an entry of another form, or a name SuperSuit does not have (with the fix).
    """
    if wrappers is None:
        return []
    if isinstance(wrappers, (str, Mapping)) or not isinstance(wrappers, (list, tuple)):
        raise EnvSpecError(f"wrappers must be a list of SuperSuit wrappers, got {wrappers!r}")
    import supersuit

    out = []
    for entry in wrappers:
        if isinstance(entry, str):
            name, kwargs = entry, {}
        elif isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            name, kwargs = entry["name"], {k: v for k, v in entry.items() if k != "name"}
        else:
            raise EnvSpecError(
                f"a wrapper is a SuperSuit wrapper name or a table such as "
                f'{{name = "resize_v1", x_size = 84, y_size = 84}}, got {entry!r}'
            )
        try:  # only SuperSuit's versioned wrappers: a config file may name nothing else to call
            found = bool(_VERSIONED.fullmatch(name)) and not name.startswith("_") and callable(getattr(supersuit, name))
        except (AttributeError, ImportError):  # supersuit's module __getattr__ raises ImportError
            found = False
        if not found:
            known = sorted(n for n in dir(supersuit) if n[-3:-1] == "_v" and n[-1].isdigit())[:12]
            raise EnvSpecError(f"supersuit has no wrapper {name!r}; some it has: {', '.join(known)}, ...")
        out.append((name, dict(kwargs)))
    return out


def wrapped_factory(factory: Callable[[], Any], wrappers: Sequence[tuple[str, dict[str, Any]]]) -> Callable[[], Any]:
    """``factory`` with the SuperSuit ``wrappers`` applied to every env it builds (picklable if ``factory`` is)."""
    if not wrappers:
        return factory
    return functools.partial(_build_wrapped, factory, tuple((n, dict(k)) for n, k in wrappers))


def _build_wrapped(factory: Callable[[], Any], wrappers: Sequence[tuple[str, dict[str, Any]]]) -> Any:
    import supersuit

    env = factory()
    for name, kwargs in wrappers:
        env = getattr(supersuit, name)(env, **kwargs)
    return env


def env_factory(env_name: str, env_kwargs: Mapping[str, Any]) -> Callable[[], Any]:
    """A function building one env of ``env_name`` with ``env_kwargs``: any name ``marljoint train --env`` takes
    (a bundled env, a PettingZoo module path, ``package.module:factory``).

    Kuhn poker is built as its bare AEC env (``raw_env``): the adapter checks actions itself, and PettingZoo's
    checking wrappers would halve the env's speed.

    Raises:
        ValueError: an env that does not resolve, keyword arguments the env rejects (one env is built here to
            check), or an env with fewer than two agents (best responses need opponents).
    """
    kwargs = dict(env_kwargs)
    if env_name == "kuhn_poker_v0":
        factory: Callable[[], Any] = functools.partial(marljoint_envs.kuhn_poker_v0.raw_env, **kwargs)
    else:
        factory = resolve_env(env_name, kwargs).env_fn()
    try:
        probe = factory()
    except TypeError as exc:
        raise ValueError(f"{env_name} does not accept the keyword arguments {kwargs}: {exc}") from exc
    agents = list(getattr(probe, "possible_agents", []))
    probe.close()
    if len(agents) < 2:
        raise ValueError(
            f"env {env_name!r} has {len(agents)} agent(s) {agents}; PSRO and NFSP play agents against each other, "
            "so they need at least two"
        )
    return factory
