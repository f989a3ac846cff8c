"""Identity environments: learning sanity checks where the optimal action is written in the observation.

Every step each agent observes its own freshly drawn random target and is rewarded for repeating it; the
optimal reward is 1 per step, so an optimal policy returns ``episode_length`` per episode.

Agents:
    ``agent_0 .. agent_{num_agents-1}``, all present for the whole episode.

``action_type="multidiscrete"`` (default):
    Observation ``Box(0, 1, (sum(nvec),), float32)``: the target of each head (uniform over ``nvec[k]``
    choices), one-hot per head and concatenated. Action ``MultiDiscrete(nvec)``. Reward: the fraction of the
    ``K = len(nvec)`` heads whose action equals the target, in ``[0, 1]``.

``action_type="box"``:
    Observation ``Box(-1, 1, (box_dim,), float32)``: the target, uniform in ``[-1, 1]^box_dim``. Action
    ``Box(-1, 1, (box_dim,), float32)``; actions outside the bounds are clipped to them. Reward:
    ``1 - mean((action - target) ** 2) / 4``, in ``[0, 1]`` since no coordinate can be off by more than 2; 1
    only for the exact target.

Termination and truncation:
    Agents never terminate; every agent is truncated after ``episode_length`` steps.

Options:
    ``reset`` takes no options (any given are ignored); ``reset(seed=...)`` seeds the targets.

Example:
    >>> from marljoint_envs import identity_v0
    >>> env = identity_v0.parallel_env(num_agents=1, nvec=(3, 2))
    >>> obs, _ = env.reset(seed=0)
    >>> first, second = obs["agent_0"][:3].argmax(), obs["agent_0"][3:].argmax()
    >>> env.step({"agent_0": [first, second]})[1]
    {'agent_0': 1.0}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from marljoint_envs._common import (
    RENDER_MODES,
    SimultaneousEnv,
    check_choice,
    check_int,
    check_multidiscrete_action,
    check_nvec,
)

__all__ = ["ACTION_TYPES", "IdentityEnv", "parallel_env"]

ACTION_TYPES = ("multidiscrete", "box")


class IdentityEnv(SimultaneousEnv):
    """The identity environment; see the module docstring for both variants.

    Args:
        num_agents: number of agents (>= 1).
        nvec: head sizes of the MultiDiscrete variant (each >= 1); unused for ``"box"``.
        action_type: ``"multidiscrete"`` or ``"box"``.
        episode_length: steps before every agent is truncated (>= 1).
        box_dim: dimension of the Box variant's target and action (>= 1); unused for ``"multidiscrete"``.
        render_mode: ``None`` or ``"ansi"`` (``render()`` then returns the state as text).

    Raises:
        ValueError: if an argument is out of range.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "name": "identity_v0",
        "render_modes": RENDER_MODES,
        "is_parallelizable": True,
    }

    def __init__(
        self,
        num_agents: int = 2,
        nvec: Sequence[int] = (3, 2),
        action_type: str = "multidiscrete",
        episode_length: int = 16,
        box_dim: int = 2,
        render_mode: str | None = None,
    ) -> None:
        num_agents = check_int("num_agents", num_agents, 1)
        self.action_type = check_choice("action_type", action_type, ACTION_TYPES)
        self.episode_length = check_int("episode_length", episode_length, 1)
        agents = [f"agent_{i}" for i in range(num_agents)]
        if self.action_type == "multidiscrete":
            self.nvec = check_nvec("nvec", nvec)
            self._head_offsets = np.concatenate([[0], np.cumsum(self.nvec)[:-1]])
            obs_spaces = {
                agent: spaces.Box(0.0, 1.0, (int(self.nvec.sum()),), np.float32) for agent in agents
            }
            action_spaces: dict[str, spaces.Space] = {
                agent: spaces.MultiDiscrete(self.nvec) for agent in agents
            }
        else:
            self.box_dim = check_int("box_dim", box_dim, 1)
            obs_spaces = {agent: spaces.Box(-1.0, 1.0, (self.box_dim,), np.float32) for agent in agents}
            action_spaces = {agent: spaces.Box(-1.0, 1.0, (self.box_dim,), np.float32) for agent in agents}
        super().__init__(obs_spaces, action_spaces, render_mode)
        self.timestep = 0
        self.targets = self._draw_targets()

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        self._reseed(seed)
        self.agents = self.possible_agents[:]
        self.timestep = 0
        self.targets = self._draw_targets()
        return self._observations(), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        live = self._live_actions(actions)
        rewards = {agent: self._reward(agent, i, action) for i, (agent, action) in enumerate(live.items())}
        self.timestep += 1
        self.targets = self._draw_targets()
        truncated = self.timestep >= self.episode_length
        observations = self._observations()
        terminations = dict.fromkeys(self.agents, False)
        truncations = dict.fromkeys(self.agents, truncated)
        infos: dict[str, dict] = {agent: {} for agent in self.agents}
        if truncated:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def _draw_targets(self) -> np.ndarray:
        """``[N, K]`` int targets (MultiDiscrete) or ``[N, box_dim]`` float32 targets (Box)."""
        num_agents = len(self.possible_agents)
        if self.action_type == "multidiscrete":
            return self.np_random.integers(self.nvec, size=(num_agents, self.nvec.size))
        return self.np_random.uniform(-1.0, 1.0, size=(num_agents, self.box_dim)).astype(np.float32)

    def _reward(self, agent: str, index: int, action: Any) -> float:
        if self.action_type == "multidiscrete":
            chosen = check_multidiscrete_action(agent, action, self.action_spaces[agent])
            return float(np.mean(chosen == self.targets[index]))
        chosen = np.asarray(action, dtype=np.float64)
        if chosen.shape != (self.box_dim,) or not np.all(np.isfinite(chosen)):
            raise ValueError(
                f"action {action!r} of agent {agent!r} must be {self.box_dim} finite numbers; pass an array "
                f"of shape ({self.box_dim},), e.g. env.action_space({agent!r}).sample()."
            )
        error = np.clip(chosen, -1.0, 1.0) - self.targets[index]
        return float(1.0 - np.mean(error**2) / 4.0)

    def _observations(self) -> dict[str, np.ndarray]:
        if self.action_type == "box":
            return {agent: self.targets[i].copy() for i, agent in enumerate(self.agents)}
        observations = {}
        for i, agent in enumerate(self.agents):
            one_hot = np.zeros(int(self.nvec.sum()), dtype=np.float32)
            one_hot[self._head_offsets + self.targets[i]] = 1.0
            observations[agent] = one_hot
        return observations

    def _render_text(self) -> str:
        return f"identity_v0 t={self.timestep} targets={self.targets.tolist()}"


def parallel_env(**kwargs: Any) -> IdentityEnv:
    """Creates the identity ParallelEnv; the keyword arguments are those of :class:`IdentityEnv`."""
    return IdentityEnv(**kwargs)
