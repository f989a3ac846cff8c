"""A game of simultaneous moves where a player has no legal action at a simultaneous node (it passes): player 0
picks a stake alone, then both pick a side at once without player 1 seeing the stake. No registered OpenSpiel game
has such a node; importing this module registers this one as ``python_marljoint_pass_test``."""

import numpy as np
import pyspiel

_TYPE = pyspiel.GameType(
    short_name="python_marljoint_pass_test",
    long_name="one player passes at the first simultaneous node",
    dynamics=pyspiel.GameType.Dynamics.SIMULTANEOUS,
    chance_mode=pyspiel.GameType.ChanceMode.DETERMINISTIC,
    information=pyspiel.GameType.Information.IMPERFECT_INFORMATION,
    utility=pyspiel.GameType.Utility.ZERO_SUM,
    reward_model=pyspiel.GameType.RewardModel.TERMINAL,
    max_num_players=2,
    min_num_players=2,
    provides_information_state_string=True,
    provides_information_state_tensor=True,
    provides_observation_string=False,
    provides_observation_tensor=False,
    parameter_specification={},
)
_INFO = pyspiel.GameInfo(
    num_distinct_actions=2,
    max_chance_outcomes=0,
    num_players=2,
    min_utility=-2.0,
    max_utility=2.0,
    utility_sum=0.0,
    max_game_length=2,
)


class PassGame(pyspiel.Game):
    def __init__(self, params=None):
        super().__init__(_TYPE, _INFO, params or {})

    def new_initial_state(self):
        return PassState(self)

    def make_py_observer(self, iig_obs_type=None, params=None):
        return _Observer()


class PassState(pyspiel.State):
    """Player 0 picks a stake alone (player 1 passes), then both pick a side at once; player 1 never sees the
    stake. Player 0 wins the stake (1 or 2) when the sides match, else loses it."""

    def __init__(self, game):
        super().__init__(game)
        self.moves = []

    def current_player(self):
        return pyspiel.PlayerId.TERMINAL if len(self.moves) == 2 else pyspiel.PlayerId.SIMULTANEOUS

    def _legal_actions(self, player):
        return [] if not self.moves and player == 1 else [0, 1]

    def _apply_actions(self, actions):
        self.moves.append(tuple(actions))

    def _action_to_string(self, player, action):
        return str(action)

    def is_terminal(self):
        return len(self.moves) == 2

    def returns(self):
        if not self.is_terminal():
            return [0.0, 0.0]
        stake = 1 + self.moves[0][0]
        won = stake if self.moves[1][0] == self.moves[1][1] else -stake
        return [won, -won]

    def __str__(self):
        return str(self.moves)


class _Observer:
    def __init__(self):
        self.tensor = np.zeros(4, np.float32)
        self.dict = {"state": self.tensor}

    def set_from(self, state, player):
        self.tensor.fill(0)
        self.tensor[0 if player == 0 else 3] = 1
        self.tensor[1] = len(state.moves)
        if player == 0 and state.moves:
            self.tensor[2] = 1 + state.moves[0][0]

    def string_from(self, state, player):
        seen = [m[0] for m in state.moves] if player == 0 else []
        return f"p{player} round {len(state.moves)} saw {seen}"


pyspiel.register_game(_TYPE, PassGame)
