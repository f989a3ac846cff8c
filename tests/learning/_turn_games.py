"""Turn-based PettingZoo AEC games without action masks, in which player_0 is paid for its move while it waits.

Runs name them by factory path (``_turn_games:two_moves``, ``_turn_games:late_reward``), so they are built the way
``marljoint train --env package.module:function`` builds an env.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from offpolicy._two_moves import TwoMoves
from pettingzoo import AECEnv

LATE_AGENTS = ["player_0", "player_1", "player_2"]
LATE_ORDER = [0, 1, 2, 1, 2]
"""Who moves at each position of a late-reward game: player_0 once, then player_1 and player_2 twice each."""
DECOY_REWARD = 0.3
"""player_0's immediate reward for the decoy first move 0: a learner blind to the late payment picks it."""


def two_moves(first_reward: float = 1.0) -> TwoMoves:
    """Game (a): player_0 picks a0, player_1 picks a1; both are paid on player_1's move, player_0 ``[a0 == 2]``."""
    return TwoMoves(first_reward)


def late_reward(first_reward: float = 1.0) -> LateReward:
    """Game (b): player_0's first move is paid four moves later (:class:`LateReward`)."""
    return LateReward(first_reward)


class LateReward(AECEnv):
    """Three players move in the order of :data:`LATE_ORDER`; player_0 is paid ``first_reward · [a0 == 2]`` on the
    game's last move, four moves after its own, and :data:`DECOY_REWARD` at once for ``a0 == 0``.

    The best first move (2) is worth 1, the decoy (0) 0.3 paid at once, move 1 nothing: a learner that credits
    player_0 only with what it is paid on its own move picks 0. player_1 and player_2 are paid ``0.5 · [a == 1]``
    on each of their moves. Every player acts in Discrete(3) and observes the whole state (9 floats): the position
    in the game (one-hot of 5), player_0's choice (one-hot of 3, zero before it moves) and a bias of 1.

    Args:
        first_reward: player_0's late reward for a0 == 2 (1 in the game).
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "late_reward_v0", "render_modes": [], "is_parallelizable": False}

    def __init__(self, first_reward: float = 1.0) -> None:
        super().__init__()
        self.first_reward = first_reward
        self.possible_agents = LATE_AGENTS[:]
        self.observation_spaces = {a: spaces.Box(0.0, 1.0, (9,), np.float32) for a in LATE_AGENTS}
        self.action_spaces = {a: spaces.Discrete(3) for a in LATE_AGENTS}
        self.position = 0
        self.first = -1

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    def observe(self, agent: str) -> np.ndarray:
        obs = np.zeros(9, np.float32)
        obs[min(self.position, len(LATE_ORDER) - 1)] = 1.0
        if self.first >= 0:
            obs[5 + self.first] = 1.0
        obs[8] = 1.0
        return obs

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.agents = LATE_AGENTS[:]
        self.position = 0
        self.first = -1
        self.agent_selection = LATE_AGENTS[0]
        self.rewards = {a: 0.0 for a in LATE_AGENTS}
        self._cumulative_rewards = {a: 0.0 for a in LATE_AGENTS}
        self.terminations = {a: False for a in LATE_AGENTS}
        self.truncations = {a: False for a in LATE_AGENTS}
        self.infos = {a: {} for a in LATE_AGENTS}

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self.rewards = {a: 0.0 for a in LATE_AGENTS}
        if self.position == 0:
            self.first = int(action)
            self.rewards[agent] = DECOY_REWARD * (self.first == 0)
        else:
            self.rewards[agent] = 0.5 * (int(action) == 1)
        self.position += 1
        if self.position == len(LATE_ORDER):
            self.rewards[LATE_AGENTS[0]] = self.first_reward * (self.first == 2)
            self.terminations = {a: True for a in LATE_AGENTS}
        else:
            self.agent_selection = LATE_AGENTS[LATE_ORDER[self.position]]
        self._accumulate_rewards()
