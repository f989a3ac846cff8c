"""Small ParallelEnvs with chosen spaces and scripted outputs, for the adapter's space handling and error paths."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv

Observation = Callable[[str, int], Any]
"""(agent, t) -> raw observation, where t counts the steps taken in the episode (0 after reset)."""

Info = Callable[[str, int], dict]


def _per_agent(value: gymnasium.Space | Mapping[str, gymnasium.Space], agents: list[str]) -> dict:
    if isinstance(value, gymnasium.Space):
        return dict.fromkeys(agents, value)
    return {agent: value[agent] for agent in agents}


class ScriptedEnv(ParallelEnv):
    """Agents ``agent_0 ..`` with given spaces, scripted observations and infos, and a fixed episode length.

    Every agent gets reward 1 per step and is truncated when ``t`` reaches ``episode_length``. The actions the env
    received are kept in ``received`` (one dict per step), so tests can see exactly what the adapter sent.

    Args:
        observation_space: one space for every agent, or a dict agent -> space.
        action_space: one space for every agent, or a dict agent -> space.
        num_agents: number of agents.
        episode_length: steps per episode.
        observation: (agent, t) -> raw observation; by default a sample of the agent's space, seeded by reset.
        info: (agent, t) -> info dict; empty by default.
        check_actions: raise if an action is not in its space (as a strict env would).
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "scripted_v0"}

    def __init__(
        self,
        observation_space: gymnasium.Space | Mapping[str, gymnasium.Space],
        action_space: gymnasium.Space | Mapping[str, gymnasium.Space],
        *,
        num_agents: int = 2,
        episode_length: int = 3,
        observation: Observation | None = None,
        info: Info | None = None,
        check_actions: bool = True,
    ) -> None:
        self.possible_agents = [f"agent_{i}" for i in range(num_agents)]
        self.agents: list[str] = []
        self.observation_spaces = _per_agent(observation_space, self.possible_agents)
        self.action_spaces = _per_agent(action_space, self.possible_agents)
        self.episode_length = episode_length
        self._observation = observation or (lambda agent, t: self.observation_spaces[agent].sample())
        self._info = info or (lambda agent, t: {})
        self.check_actions = check_actions
        self.received: list[dict[str, Any]] = []
        self.t = 0

    def observation_space(self, agent: str) -> gymnasium.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.Space:
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            for k, agent in enumerate(self.possible_agents):
                self.observation_spaces[agent].seed(seed + k)
        self.agents = list(self.possible_agents)
        self.t = 0
        return self._outputs()

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if self.check_actions:
            for agent, action in actions.items():
                if not self.action_spaces[agent].contains(action):
                    raise ValueError(f"{agent}: action {action!r} is not in {self.action_spaces[agent]}")
        self.received.append(dict(actions))
        self.t += 1
        done = self.t >= self.episode_length
        observations, infos = self._outputs()
        rewards = dict.fromkeys(self.agents, 1.0)
        terminations = dict.fromkeys(self.agents, False)
        truncations = dict.fromkeys(self.agents, done)
        if done:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def _outputs(self) -> tuple[dict, dict]:
        observations = {agent: self._observation(agent, self.t) for agent in self.agents}
        infos = {agent: self._info(agent, self.t) for agent in self.agents}
        return observations, infos


class LeaverEnv(ScriptedEnv):
    """Two agents with Box(3) observations; ``agent_1`` vanishes from ``agents`` after step 1 without any flag."""

    def __init__(self) -> None:
        super().__init__(
            spaces.Box(-1.0, 1.0, (3,), np.float32),
            spaces.Discrete(2),
            episode_length=3,
            observation=lambda agent, t: np.full(3, 0.1 * t, np.float32),
        )

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        observations, rewards, terminations, truncations, infos = super().step(actions)
        if self.t == 1:
            self.agents = ["agent_0"]
            for out in (observations, rewards, terminations, truncations, infos):
                out.pop("agent_1")
        return observations, rewards, terminations, truncations, infos


class OldApiEnv(ScriptedEnv):
    """A ParallelEnv whose reset returns only the observations (the PettingZoo API before 1.22)."""

    def __init__(self) -> None:
        super().__init__(spaces.Box(-1.0, 1.0, (2,), np.float32), spaces.Discrete(2))

    def reset(self, seed: int | None = None, options: dict | None = None) -> dict:  # type: ignore[override]
        return super().reset(seed=seed, options=options)[0]


def box_obs(size: int = 3) -> spaces.Box:
    """A small bounded float observation space."""
    return spaces.Box(-1.0, 1.0, (size,), np.float32)


def constant_obs(value: float = 0.5, size: int = 3) -> Observation:
    """Every agent always observes ``[value] * size``."""
    return lambda agent, t: np.full(size, value, np.float32)
