"""Shimmy's ``OpenSpielCompatibilityV0`` with the changes :mod:`marljoint.env.openspiel` lists.

Imported by :func:`marljoint.env.openspiel.openspiel_env` once the ``openspiel`` extra is known to be installed
(importing this module needs Shimmy and OpenSpiel).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from shimmy.openspiel_compatibility import OpenSpielCompatibilityV0

__all__ = ["CHANCE_BLOCK", "SEEDED_BY_PARAMETER", "InformationStateEnv"]

CHANCE_BLOCK = 64
"""Uniforms drawn for each episode's chance nodes at its reset (at most); a longer game draws the rest from a
generator of its own, seeded from the same reset."""

SEEDED_BY_PARAMETER = frozenset({"deep_sea", "hanabi", "mfg_garnet"})
"""Games Shimmy reloads with the reset's seed as a game parameter (their randomness is not chance nodes)."""


class InformationStateEnv(OpenSpielCompatibilityV0):  # type: ignore[misc]
    """Shimmy's env observing the information-state tensor, truncating by decisions only, with episodes
    seeded from the first reset."""

    metadata = {**OpenSpielCompatibilityV0.metadata, "name": "openspiel_information_state"}
    _observation_spaces_built = False
    _action_spaces_built = False
    # Cached on first use; class-level defaults keep env snapshots written before the caches existed resumable.
    _information_state: bool | None = None
    _tensor_shape: tuple[int, ...] | None = None

    def __init__(self, game: Any, render_mode: str | None = None) -> None:
        # Shimmy loads the game by short name and config (and reloads it so for games seeded by a parameter).
        name = game.get_type().short_name
        super().__init__(game_name=name, render_mode=render_mode, config=dict(game.get_parameters()) or None)
        self._episode_seeds: np.random.Generator | None = None
        self._no_action = np.zeros(self._env.num_distinct_actions(), dtype=np.int8)
        try:
            most = int(self._env.max_chance_nodes_in_history())
        except Exception:  # a game that does not say: the block's size, then the episode's own generator
            most = CHANCE_BLOCK
        self._chance_block = max(0, min(most, CHANCE_BLOCK))

    def _uses_information_state(self) -> bool:
        if self._information_state is None:
            self._information_state = bool(self.game_type.provides_information_state_tensor)
        return self._information_state

    # Built once: the spaces are fixed by the game (Shimmy rebuilds them at every step).
    def _update_observation_spaces(self) -> None:
        if self._observation_spaces_built:
            return
        if not self._uses_information_state():
            super()._update_observation_spaces()
        else:
            shape = tuple(self._env.information_state_tensor_shape())
            for agent in self.possible_agents:
                self.observation_spaces[agent] = spaces.Box(-np.inf, np.inf, shape=shape, dtype=np.float32)
        self._observation_spaces_built = True

    def _update_action_spaces(self) -> None:
        if self._action_spaces_built:
            return
        super()._update_action_spaces()
        self._action_spaces_built = True

    def _update_observations(self) -> None:
        if not self._uses_information_state():
            super()._update_observations()
            return
        state = self.game_state
        if state.is_terminal():
            return
        if self._tensor_shape is None:
            self._tensor_shape = tuple(self._env.information_state_tensor_shape())
        shape, agents = self._tensor_shape, self.agents
        self.observations = {
            agents[i]: np.asarray(state.information_state_tensor(i), np.float32).reshape(shape) for i in self.agent_ids
        }

    def _execute_action_node(self, action: Any) -> None:
        # Counts decisions (a simultaneous move is one, once every seat's action is in) for the truncation rule.
        simultaneous = self.game_state.is_simultaneous_node()
        super()._execute_action_node(action)
        if not simultaneous or not self.simultaneous_actions:
            self._decisions += 1

    def _update_termination_truncation(self) -> None:
        # Shimmy's rule (the state is terminal, or no seat has a legal action) without its per-step sums.
        ended = self.game_state.is_terminal() or not any(
            self.infos[agent]["action_mask"].any() for agent in self.agents
        )
        self.terminations = {agent: self.terminations[agent] or ended for agent in self.agents}
        over = self._decisions > self._env.max_game_length() and not self.game_state.is_terminal()
        self.truncations = {agent: over for agent in self.agents}

    def _execute_chance_node(self) -> None:
        # One uniform draw per chance node, from the episode's own draws (Shimmy's Generator.choice is slower).
        state = self.game_state
        while state.is_chance_node():
            self.game_length += 1
            outcomes = state.chance_outcomes()
            draw = self._next_chance_draw()
            action = outcomes[-1][0]
            for outcome, probability in outcomes:
                draw -= probability
                if draw < 0.0:
                    action = outcome
                    break
            state.apply_action(action)

    def _new_episode_draws(self) -> None:
        # A fixed count of uniforms per episode from the run's generator, so that an episode's chance outcomes
        # depend on the seed and the episode's number only, never on how earlier episodes were played.
        draws = self._episode_seeds.random(self._chance_block + 1)
        self._chance_draws = draws[:-1].tolist()
        self._chance_used = 0
        self._chance_key = int(draws[-1] * 2**53)
        self._chance_more: np.random.Generator | None = None

    def _next_chance_draw(self) -> float:
        if self._chance_used < len(self._chance_draws):
            self._chance_used += 1
            return self._chance_draws[self._chance_used - 1]
        if self._chance_more is None:  # a long game past its block (backgammon): a generator of the episode's
            self._chance_more = np.random.default_rng(self._chance_key)
        return float(self._chance_more.random())

    def _update_action_masks(self) -> None:
        # Away from simultaneous nodes only the player to move has legal actions: the others' masks stay zero.
        state = self.game_state
        everyone = state.is_simultaneous_node()
        mover = state.current_player()
        for agent_id, agent in zip(self.agent_ids, self.agents):
            mask = self._no_action.copy()
            if everyone or agent_id == mover:
                legal = state.legal_actions(agent_id)
                if legal:
                    mask[legal] = 1
            self.infos[agent] = {"action_mask": mask}

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        if seed is not None or self._episode_seeds is None:
            self._episode_seeds = np.random.default_rng(seed)
            self.np_random = self._episode_seeds
        self._decisions = 0
        self._new_episode_draws()
        if self.game_name in SEEDED_BY_PARAMETER:
            # The seed becomes a game parameter, a C++ int: it must fit in 31 bits.
            super().reset(seed=int(self._episode_seeds.integers(2**31 - 1)), options=options)
            return
        # Shimmy's reset, less the reload of the game and the new generator.
        self.agents = self.possible_agents[:]
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {agent: {} for agent in self.agents}
        self.game_length = 1
        self.game_state = self._env.new_initial_state()
        self.simultaneous_actions = {}
        self._execute_chance_node()
        self._update_action_masks()
        self._update_observations()
        self._choose_next_agent()
