"""A ParallelEnv whose agents see observations of different widths (and, optionally, action masks, which make
agents of one width separate agent groups)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

ACTIONS = 3


class WidthsEnv(ParallelEnv):
    """Agent i observes ``widths[i]`` numbers in ``[-1, 1]``, none of them ever 0 (each is at least 0.1 away from
    it), and is rewarded 1 for playing ``(t + i) % 3`` at step t; episodes of ``max_cycles`` steps. A masked agent's
    observation is PettingZoo's ``Dict(observation, action_mask)``, its action ``(t + i + 1) % 3`` illegal.

    Args:
        widths: each agent's observation width.
        masked: which agents' observations carry an action mask (agents of one width and one answer form a
            group); default none.
        num_actions: each agent's number of actions; default 3 each.
        max_cycles: the episode length.
    """

    metadata = {"name": "widths_v0", "is_parallelizable": True}

    def __init__(
        self,
        widths: Sequence[int] = (3, 7),
        masked: Sequence[bool] | None = None,
        num_actions: Sequence[int] | None = None,
        max_cycles: int = 5,
    ):
        masked = [False] * len(widths) if masked is None else list(masked)
        num_actions = [ACTIONS] * len(widths) if num_actions is None else list(num_actions)
        self.possible_agents = [f"agent_{i}" for i in range(len(widths))]
        self.agents = self.possible_agents[:]
        self.observation_spaces = {}
        for agent, width, has_mask in zip(self.possible_agents, widths, masked):
            box = spaces.Box(-1.0, 1.0, (width,), np.float32)
            mask = spaces.Dict({"observation": box, "action_mask": spaces.MultiBinary(ACTIONS)})
            self.observation_spaces[agent] = mask if has_mask else box
        self.action_spaces = {agent: spaces.Discrete(n) for agent, n in zip(self.possible_agents, num_actions)}
        self.widths, self.masked, self.max_cycles = list(widths), masked, max_cycles
        self.timestep, self.phase = 0, 0.0

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        self.phase = float(np.random.default_rng(seed).uniform(0.0, 1.0))
        self.agents = self.possible_agents[:]
        self.timestep = 0
        return self._observations(), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]):
        rewards = {
            agent: float(int(actions[agent]) == (self.timestep + i) % ACTIONS)
            for i, agent in enumerate(self.possible_agents)
        }
        self.timestep += 1
        truncated = self.timestep >= self.max_cycles
        observations = self._observations()
        terminations = dict.fromkeys(self.agents, False)
        truncations = dict.fromkeys(self.agents, truncated)
        infos: dict[str, dict] = {agent: {} for agent in self.agents}
        if truncated:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def _observations(self) -> dict[str, np.ndarray]:
        out = {}
        for i, agent in enumerate(self.possible_agents):
            angle = self.phase + 0.3 * (self.timestep + 1) * np.arange(1, self.widths[i] + 1) + i
            magnitude = 0.1 + 0.9 * np.abs(np.sin(angle))  # never 0: a padded zero cannot pass for an entry
            obs = (np.where(np.cos(angle) > -0.5, 1.0, -1.0) * magnitude).astype(np.float32)
            if self.masked[i]:
                mask = np.ones(ACTIONS, np.int8)
                mask[(self.timestep + i + 1) % ACTIONS] = 0
                obs = {"observation": obs, "action_mask": mask}
            out[agent] = obs
        return out


def parallel_env(**kwargs: Any) -> WidthsEnv:
    return WidthsEnv(**kwargs)
