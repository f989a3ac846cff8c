"""A two-move turn-based game with action masks whose forbidden moves would pay the most.

player_0 picks a0 in {0, 1} (2 is masked), then player_1 picks among the two actions legal after a0: {0, 2} after
a0 = 1, {1, 2} after a0 = 0. Both are paid on player_1's move, which ends the game: player_0 ``[a0 == 1]``,
player_1 ``[a1 == 1 − a0] + 0.25 · [a1 == 2]``. A forbidden move would pay its player :data:`TEMPTING`, so a learner
that ignored the masks would learn to play it; every move is checked against the mask the env gave and logged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv

AGENTS = ["player_0", "player_1"]
TEMPTING = 10.0


@dataclass
class MoveLog:
    """Every move played in the env copies that share this log: ``(agent, action, legal)``."""

    moves: list[tuple[str, int, bool]] = field(default_factory=list)

    @property
    def illegal(self) -> list[tuple[str, int, bool]]:
        return [move for move in self.moves if not move[2]]


def legal_actions(agent: str, first: int | None) -> np.ndarray:
    """The int8 mask of the agent to move (player_1's depends on player_0's move ``first``)."""
    if agent == AGENTS[0]:
        return np.array([1, 1, 0], np.int8)
    return np.array([1, 0, 1], np.int8) if first == 1 else np.array([0, 1, 1], np.int8)


def observation(turn: int, first: int | None) -> np.ndarray:
    """Who is to move (one-hot), player_0's move (one-hot, zeros before it), and a bias of 1."""
    return np.array([turn == 0, turn == 1, first == 0, first == 1, 1.0], np.float32)


class MaskedMoves(AECEnv):
    """The game as an AEC env whose observations carry ``action_mask`` (all zeros for the waiting player).

    Args:
        log: where every move and its legality is recorded.
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "masked_moves_v0", "render_modes": [], "is_parallelizable": False}

    def __init__(self, log: MoveLog) -> None:
        super().__init__()
        self.log = log
        self.possible_agents = AGENTS[:]
        space = spaces.Dict(
            {"observation": spaces.Box(0.0, 1.0, (5,), np.float32), "action_mask": spaces.Box(0, 1, (3,), np.int8)}
        )
        self.observation_spaces = {a: space for a in AGENTS}
        self.action_spaces = {a: spaces.Discrete(3) for a in AGENTS}
        self.first: int | None = None

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        turn = AGENTS.index(self.agent_selection)
        to_move = agent == self.agent_selection and not self.terminations[agent]
        mask = legal_actions(agent, self.first) if to_move else np.zeros(3, np.int8)
        return {"observation": observation(turn, self.first), "action_mask": mask}

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.agents = AGENTS[:]
        self.agent_selection = AGENTS[0]
        self.first = None
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
        action = int(action)
        legal = bool(legal_actions(agent, self.first)[action])
        self.log.moves.append((agent, action, legal))
        self._cumulative_rewards[agent] = 0.0
        self.rewards = {a: 0.0 for a in AGENTS}
        if agent == AGENTS[0]:
            self.first = action
            self.agent_selection = AGENTS[1]
        else:
            first_paid = TEMPTING if self.first == 2 else float(self.first == 1)
            second_paid = TEMPTING if not legal else float(action == 1 - self.first) + 0.25 * (action == 2)
            self.rewards = {AGENTS[0]: first_paid, AGENTS[1]: second_paid}
            self.terminations = {a: True for a in AGENTS}
        self._accumulate_rewards()
