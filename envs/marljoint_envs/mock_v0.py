"""Mock environment of the original trainer: deterministic and cheap per step, for throughput benchmarks.

Agents:
    ``agent_0 .. agent_{num_agents-1}``, all present for the whole episode.

Observations:
    By default ``Box(-1, 1, (obs_dim,), float32)``, identical for every agent and derived from the step
    counter ``t`` (steps taken so far in the episode, 0 after reset):
    ``obs[k] = sin(0.1 * (t + 1) * (k + 1))``.
    With ``one_hot_obs=True`` agent ``i`` instead always sees the one-hot vector of ``i``,
    ``Box(0, 1, (num_agents,), float32)`` (``obs_dim`` is then unused).

Actions:
    ``Discrete(num_actions)``, or ``MultiDiscrete(nvec)`` when ``nvec`` is given.

Rewards:
    Every agent receives ``(sum over all agents of their action) / 10``; a MultiDiscrete action counts as the
    sum of its components.

Termination and truncation:
    Agents never terminate. When ``max_cycles`` is given, every agent is truncated on the step at which ``t``
    reaches ``max_cycles``.

Options:
    ``reset`` takes no options (any given are ignored). The env draws no random numbers; ``reset(seed=...)``
    only re-seeds ``np_random`` so that the env behaves like every other PettingZoo env.

Example:
    >>> from marljoint_envs import mock_v0
    >>> env = mock_v0.parallel_env(num_agents=2, max_cycles=3)
    >>> obs, infos = env.reset(seed=0)
    >>> _, rewards, _, truncations, _ = env.step({"agent_0": 2, "agent_1": 1})
    >>> rewards["agent_0"]
    0.3
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from marljoint_envs._common import (
    RENDER_MODES,
    SimultaneousEnv,
    check_discrete_action,
    check_int,
    check_multidiscrete_action,
    check_nvec,
)

__all__ = ["MockEnv", "parallel_env"]


class MockEnv(SimultaneousEnv):
    """The mock environment; see the module docstring for its dynamics.

    Args:
        num_agents: number of agents (>= 1).
        obs_dim: length of the shared observation (>= 1).
        num_actions: size of the Discrete action space (>= 1); unused when ``nvec`` is given.
        nvec: sizes of a MultiDiscrete action space, one per head (each >= 1); ``None`` for Discrete actions.
        one_hot_obs: give agent ``i`` the constant one-hot observation of ``i`` instead of the shared signal.
        max_cycles: truncate every agent after this many steps (>= 1); ``None`` never truncates.
        render_mode: ``None`` or ``"ansi"`` (``render()`` then returns the state as text).

    Raises:
        ValueError: if an argument is out of range.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "name": "mock_v0",
        "render_modes": RENDER_MODES,
        "is_parallelizable": True,
    }

    def __init__(
        self,
        num_agents: int = 2,
        obs_dim: int = 4,
        num_actions: int = 3,
        nvec: Sequence[int] | None = None,
        one_hot_obs: bool = False,
        max_cycles: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        num_agents = check_int("num_agents", num_agents, 1)
        obs_dim = check_int("obs_dim", obs_dim, 1)
        agents = [f"agent_{i}" for i in range(num_agents)]
        if nvec is None:
            num_actions = check_int("num_actions", num_actions, 1)
            action_spaces: dict[str, spaces.Space] = {agent: spaces.Discrete(num_actions) for agent in agents}
        else:
            heads = check_nvec("nvec", nvec)
            action_spaces = {agent: spaces.MultiDiscrete(heads) for agent in agents}
        if one_hot_obs:
            obs_spaces = {agent: spaces.Box(0.0, 1.0, (num_agents,), np.float32) for agent in agents}
        else:
            obs_spaces = {agent: spaces.Box(-1.0, 1.0, (obs_dim,), np.float32) for agent in agents}
        super().__init__(obs_spaces, action_spaces, render_mode)
        self.max_cycles = None if max_cycles is None else check_int("max_cycles", max_cycles, 1)
        self.one_hot_obs = bool(one_hot_obs)
        self._one_hots = np.eye(num_agents, dtype=np.float32)
        self._frequencies = 0.1 * np.arange(1, obs_dim + 1, dtype=np.float64)
        self.timestep = 0

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        self._reseed(seed)
        self.agents = self.possible_agents[:]
        self.timestep = 0
        return self._observations(), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        live = self._live_actions(actions)
        total = sum(self._action_total(agent, action) for agent, action in live.items())
        reward = total / 10.0
        self.timestep += 1
        truncated = self.max_cycles is not None and self.timestep >= self.max_cycles
        observations = self._observations()
        rewards = dict.fromkeys(self.agents, reward)
        terminations = dict.fromkeys(self.agents, False)
        truncations = dict.fromkeys(self.agents, truncated)
        infos: dict[str, dict] = {agent: {} for agent in self.agents}
        if truncated:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def _action_total(self, agent: str, action: Any) -> int:
        """The action's contribution to the shared reward: the action, or the sum of its components."""
        space = self.action_spaces[agent]
        if isinstance(space, spaces.Discrete):
            return check_discrete_action(agent, action, space)
        return int(check_multidiscrete_action(agent, action, space).sum())

    def _observations(self) -> dict[str, np.ndarray]:
        if self.one_hot_obs:
            return {agent: self._one_hots[i].copy() for i, agent in enumerate(self.agents)}
        signal = np.sin(self._frequencies * (self.timestep + 1)).astype(np.float32)
        return {agent: signal.copy() for agent in self.agents}

    def _render_text(self) -> str:
        return f"mock_v0 t={self.timestep} agents={self.agents}"


def parallel_env(**kwargs: Any) -> MockEnv:
    """Creates the mock ParallelEnv; the keyword arguments are those of :class:`MockEnv`."""
    return MockEnv(**kwargs)
