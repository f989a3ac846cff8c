"""A two-move cooperative turn-based game: player_0 picks a0 in {0, 1, 2}, then player_1 picks a1 in {0, 1}; both
are paid on player_1's move (player_0 ``[a0 == 2]``, player_1 ``0.5 · [a1 == 1]``) and the game terminates."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv

AGENTS = ["player_0", "player_1"]


class TwoMoves(AECEnv):
    """The game as a bare AEC env without action masks (both players act in Discrete(3); player_1's 2 means 0).

    Observations are 4 floats: who is to move (one-hot), whether player_0 picked 2, and a bias of 1.

    Args:
        first_reward: player_0's reward for a0 == 2 (1 in the game; another value tells whether it is learned).
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "two_moves_v0", "render_modes": [], "is_parallelizable": False}

    def __init__(self, first_reward: float = 1.0) -> None:
        super().__init__()
        self.first_reward = first_reward
        self.possible_agents = AGENTS[:]
        self.observation_spaces = {a: spaces.Box(0.0, 1.0, (4,), np.float32) for a in AGENTS}
        self.action_spaces = {a: spaces.Discrete(3) for a in AGENTS}
        self.first = 0

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    def observe(self, agent: str) -> np.ndarray:
        turn = AGENTS.index(self.agent_selection)
        return np.array([turn == 0, turn == 1, self.first == 2, 1.0], np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.agents = AGENTS[:]
        self.agent_selection = AGENTS[0]
        self.first = 0
        self.rewards = {a: 0.0 for a in AGENTS}
        self._cumulative_rewards = {a: 0.0 for a in AGENTS}
        self.terminations = {a: False for a in AGENTS}
        self.truncations = {a: False for a in AGENTS}
        self.infos = {a: {} for a in AGENTS}

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self.rewards = {a: 0.0 for a in AGENTS}
        if agent == AGENTS[0]:
            self.first = int(action)
            self.agent_selection = AGENTS[1]
        else:
            self.rewards = {AGENTS[0]: self.first_reward * (self.first == 2), AGENTS[1]: 0.5 * (int(action) == 1)}
            self.terminations = {a: True for a in AGENTS}
        self._accumulate_rewards()
