"""Plumbing shared by the bundled environments: argument and action checks, a simultaneous-move base class.

Private to the package: the environments' public surface is each module's ``parallel_env`` / ``env`` and the
helpers those modules export.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from pettingzoo import ParallelEnv

RENDER_MODES = ["ansi"]


def check_int(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    """Returns ``value`` as an int if it is an integer in ``[minimum, maximum]``, else raises ValueError.

    Booleans are rejected although Python counts them as ints: ``num_agents=True`` is always a mistake.
    """
    if not (_is_int(value) and minimum <= value and (maximum is None or value <= maximum)):
        bounds = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name} must be an integer {bounds}, got {value!r}; pass an integer {bounds}.")
    return int(value)


def check_float(name: str, value: Any, minimum: float = -math.inf, maximum: float = math.inf) -> float:
    """Returns ``value`` as a float if it is a finite real number in ``[minimum, maximum]``, else raises."""
    valid = _is_real(value) and math.isfinite(value) and minimum <= value <= maximum
    if not valid:
        if math.isinf(maximum):
            expected = "a finite real number" + ("" if math.isinf(minimum) else f" >= {minimum}")
        else:
            expected = f"a real number in [{minimum}, {maximum}]"
        raise ValueError(f"{name} must be {expected}, got {value!r}; pass {expected}.")
    return float(value)


def check_choice(name: str, value: Any, choices: Mapping[str, Any] | tuple[str, ...] | list[str]) -> str:
    """Returns ``value`` if it is one of ``choices`` (strings), else raises ValueError listing them."""
    if not (isinstance(value, str) and value in choices):
        valid = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {valid}, got {value!r}; pass one of those.")
    return value


def check_nvec(name: str, nvec: Any) -> np.ndarray:
    """Returns MultiDiscrete head sizes as int64 if ``nvec`` is a non-empty sequence of integers >= 1."""
    heads = np.asarray(nvec)
    if heads.ndim != 1 or heads.size == 0 or not np.issubdtype(heads.dtype, np.integer) or np.any(heads < 1):
        raise ValueError(
            f"{name} must be a non-empty sequence of integers >= 1 (one size per action head), got {nvec!r}; "
            f"pass e.g. {name}=(3, 2)."
        )
    return heads.astype(np.int64)


def check_discrete_action(agent: str, action: Any, space: spaces.Discrete) -> int:
    """Returns ``action`` as an int if it lies in the Discrete ``space`` (start 0), else raises ValueError.

    Accepts Python ints, NumPy integer scalars and 0-d integer arrays; booleans and floats are rejected.
    """
    # Plain integers take the first branch without creating an array: this check runs for every agent on
    # every step.
    if _is_int(action):
        if 0 <= action < space.n:
            return int(action)
    else:
        array = np.asarray(action)
        if array.shape == () and array.dtype.kind in "iu" and 0 <= array < space.n:
            return int(array)
    raise _action_error(agent, action, space, (), int(space.n))


def check_multidiscrete_action(agent: str, action: Any, space: spaces.MultiDiscrete) -> np.ndarray:
    """Returns ``action`` as an integer array if it lies in the MultiDiscrete ``space`` (start 0).

    Accepts integer arrays and sequences of the space's shape.

    Raises:
        ValueError: naming the agent, the action and the space.
    """
    array = np.asarray(action)
    # Comparing as Python lists is several times faster than NumPy reductions for a handful of heads.
    valid = (
        array.shape == space.shape
        and array.dtype.kind in "iu"
        and all(0 <= a < n for a, n in zip(array.ravel().tolist(), space.nvec.ravel().tolist()))
    )
    if not valid:
        raise _action_error(agent, action, space, space.shape, space.nvec.tolist())
    return array


def _action_error(agent: str, action: Any, space: gymnasium.Space, shape: tuple, high: Any) -> ValueError:
    return ValueError(
        f"action {action!r} of agent {agent!r} is not in its action space {space}; pass integers of "
        f"shape {shape} with 0 <= action < {high}, e.g. env.action_space({agent!r}).sample()."
    )


def render_text(name: str, render_mode: str | None, describe: Callable[[], str]) -> str | None:
    """Implements ``render()`` for the text mode ``"ansi"``; without a render mode, warns and returns None."""
    if render_mode is None:
        gymnasium.logger.warn(
            f"{name}: render() was called without a render_mode; pass render_mode='ansi' to the constructor."
        )
        return None
    return describe()


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_real(value: Any) -> bool:
    numeric = isinstance(value, (int, float, np.integer, np.floating))
    return numeric and not isinstance(value, (bool, np.bool_))


class SimultaneousEnv(ParallelEnv):
    """Base of the bundled simultaneous-move environments.

    Holds the cached spaces (``observation_space(agent)`` returns the same object every call), the env's
    random generator ``np_random`` (re-created only by ``reset(seed=...)``), the check that every live agent
    sent an action, and text rendering. Subclasses set ``metadata``, implement ``reset``/``step`` and
    ``_render_text``.
    """

    metadata: ClassVar[dict[str, Any]]

    def __init__(
        self,
        observation_spaces: dict[str, gymnasium.Space],
        action_spaces: dict[str, gymnasium.Space],
        render_mode: str | None,
    ) -> None:
        if render_mode is not None:
            check_choice("render_mode", render_mode, self.metadata["render_modes"])
        self.render_mode = render_mode
        self.possible_agents = list(observation_spaces)
        self.agents: list[str] = []
        self.observation_spaces = observation_spaces
        self.action_spaces = action_spaces
        self.np_random, self.np_random_seed = seeding.np_random()

    def observation_space(self, agent: str) -> gymnasium.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.Space:
        return self.action_spaces[agent]

    def _reseed(self, seed: int | None) -> None:
        """Re-creates ``np_random`` from ``seed``; without a seed the generator continues where it was."""
        if seed is not None:
            self.np_random, self.np_random_seed = seeding.np_random(seed)

    def _live_actions(self, actions: Mapping[str, Any]) -> dict[str, Any]:
        """Returns the actions of the live agents, in ``agents`` order; actions for other agents are ignored.

        Raises:
            RuntimeError: if the episode is over (no live agents).
            ValueError: if a live agent has no action.
        """
        if not self.agents:
            raise RuntimeError(
                f"{self.metadata['name']}: step() was called after the episode ended; call reset() first."
            )
        missing = [agent for agent in self.agents if agent not in actions]
        if missing:
            raise ValueError(
                f"{self.metadata['name']}: no action for live agents {missing}; pass one action for every "
                f"agent in env.agents ({self.agents})."
            )
        return {agent: actions[agent] for agent in self.agents}

    def render(self) -> str | None:
        """Returns the current state as text (``render_mode="ansi"``)."""
        return render_text(self.metadata["name"], self.render_mode, self._render_text)

    def _render_text(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        """Nothing to release: the environments hold no external resources."""
