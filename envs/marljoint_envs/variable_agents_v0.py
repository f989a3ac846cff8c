"""Environment whose agents leave at different times and where one agent joins late.

Agents (``t`` = steps taken so far in the episode, 0 after reset):
    - ``agent_0`` is present for the whole episode and terminates on the step at which ``t`` becomes
      ``episode_length``.
    - ``agent_1`` is present from reset and terminates on the step at which ``t`` becomes ``death_step``.
    - ``agent_2`` is absent from ``agents`` and from the observations until the step at which ``t`` becomes
      ``join_step``; that step returns its first observation (with reward 0 and both flags False). It is
      truncated on the step at which ``t`` becomes ``episode_length``.

Observations:
    ``Box(0, 1, (3,), float32)``: ``[t / episode_length, i / 2, present / 3]`` for agent ``agent_i``, where
    ``present`` is the number of agents in ``agents`` once the step's leavers have left and joiners have
    joined (0 in the observations returned by the final step).

Actions:
    ``Discrete(2)``.

Rewards:
    ``float(action)`` of the agent itself.

Options:
    ``reset`` takes no options (any given are ignored), and the env draws no random numbers.

Example:
    >>> from marljoint_envs import variable_agents_v0
    >>> env = variable_agents_v0.parallel_env(episode_length=4, death_step=2, join_step=1)
    >>> obs, _ = env.reset(seed=0)
    >>> sorted(obs)
    ['agent_0', 'agent_1']
    >>> obs, *_ = env.step({"agent_0": 1, "agent_1": 0})
    >>> sorted(obs)
    ['agent_0', 'agent_1', 'agent_2']
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from marljoint_envs._common import RENDER_MODES, SimultaneousEnv, check_discrete_action, check_int

__all__ = ["VariableAgentsEnv", "parallel_env"]

_AGENTS = ["agent_0", "agent_1", "agent_2"]


class VariableAgentsEnv(SimultaneousEnv):
    """Three agents with different lifetimes; see the module docstring for the schedule.

    Args:
        episode_length: number of steps in an episode (>= 2).
        death_step: ``agent_1`` terminates when ``t`` reaches this (``1 <= death_step <= episode_length``).
        join_step: ``agent_2`` joins when ``t`` reaches this (``1 <= join_step < episode_length``, so that it
            acts at least once).
        render_mode: ``None`` or ``"ansi"`` (``render()`` then returns the state as text).

    Raises:
        ValueError: if the schedule is out of range.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "name": "variable_agents_v0",
        "render_modes": RENDER_MODES,
        "is_parallelizable": True,
    }

    def __init__(
        self,
        episode_length: int = 10,
        death_step: int = 4,
        join_step: int = 3,
        render_mode: str | None = None,
    ) -> None:
        self.episode_length = check_int("episode_length", episode_length, 2)
        self.death_step = check_int("death_step", death_step, 1, self.episode_length)
        self.join_step = check_int("join_step", join_step, 1, self.episode_length - 1)
        super().__init__(
            {agent: spaces.Box(0.0, 1.0, (3,), np.float32) for agent in _AGENTS},
            {agent: spaces.Discrete(2) for agent in _AGENTS},
            render_mode,
        )
        self.timestep = 0

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        self._reseed(seed)
        self.timestep = 0
        self.agents = ["agent_0", "agent_1"]
        return self._observations(self.agents), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        live = self._live_actions(actions)
        rewards = {
            agent: float(check_discrete_action(agent, action, self.action_spaces[agent]))
            for agent, action in live.items()
        }
        self.timestep += 1
        t = self.timestep
        terminations = {
            "agent_0": t == self.episode_length,
            "agent_1": t == self.death_step,
            "agent_2": False,
        }
        truncations = {"agent_0": False, "agent_1": False, "agent_2": t == self.episode_length}
        reported = list(live)
        if t == self.join_step:
            reported.append("agent_2")
            rewards["agent_2"] = 0.0
        self.agents = [agent for agent in reported if not (terminations[agent] or truncations[agent])]
        observations = self._observations(reported)
        return (
            observations,
            rewards,
            {agent: terminations[agent] for agent in reported},
            {agent: truncations[agent] for agent in reported},
            {agent: {} for agent in reported},
        )

    def _observations(self, agents: list[str]) -> dict[str, np.ndarray]:
        progress = self.timestep / self.episode_length
        present = len(self.agents) / len(_AGENTS)
        return {
            agent: np.array([progress, _AGENTS.index(agent) / 2, present], dtype=np.float32)
            for agent in agents
        }

    def _render_text(self) -> str:
        return f"variable_agents_v0 t={self.timestep} agents={self.agents}"


def parallel_env(**kwargs: Any) -> VariableAgentsEnv:
    """Creates the ParallelEnv; the keyword arguments are those of :class:`VariableAgentsEnv`."""
    return VariableAgentsEnv(**kwargs)
