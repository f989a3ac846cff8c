"""OpenSpiel games as known games: exact tables, values, best responses and NashConv, as OpenSpiel computes them.

:class:`OpenSpielGame` enumerates an OpenSpiel game's information states once, per player, in the order a
depth-first walk of the game tree meets them, with its terminal histories (a process keeps the enumeration of the
games it built last). Games of simultaneous moves are walked as they are: at a simultaneous node every player with
legal actions decides at its own information state, and the children are the joint actions. A policy's table of
player ``p`` is ``[S_p, A]`` (``A`` the game's distinct actions; zero outside the legal ones). A torch policy is
tabulated by one batched query on the observations the env gives at those information states (the
information-state tensor, see :mod:`marljoint.env.openspiel`). Values and best-response values are sums over the
terminal histories (the sequence form: each player's realisation weight of its own last decision), which agree with
OpenSpiel's ``expected_returns`` and ``TabularBestResponse`` (so :meth:`OpenSpielGame.nash_conv` with
``pyspiel.nash_conv``, on :attr:`~OpenSpielGame.turn_based_game` where moves are simultaneous) to rounding, at a
cost proportional to the game and without a walk of the tree per measurement; best-response tables, and every score
of a game with more than :data:`MAX_TERMINALS` terminal histories, come from OpenSpiel's C++ code, on the policy as
OpenSpiel writes it, a mapping from ``state.information_state_string(player)`` to ``[(action, probability), ...]``
(:meth:`~OpenSpielGame.policy_dict`), which :meth:`~OpenSpielGame.export` also writes as JSON.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import time
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from marljoint.best_response.games import KnownGame
from marljoint.best_response.population import FrozenPolicy, _TabularBase, masked_head_probs
from marljoint.checkpoint import atomic_write_json
from marljoint.env.openspiel import OPENSPIEL_PREFIX, import_pyspiel, load_openspiel_game

__all__ = [
    "ENUMERATIONS_KEPT",
    "EnumerationTimeout",
    "MAX_INFORMATION_STATES",
    "MAX_TERMINALS",
    "OpenSpielGame",
    "OpenSpielTablePolicy",
]

MAX_INFORMATION_STATES = 300_000
"""Information states (all players together) above which a game is too large to tabulate (``goofspiel(num_cards=5,
imp_info=True)`` has 236,450; its tables, tensors and lookups take about 300 MB)."""

MAX_TERMINALS = 2_000_000
"""Terminal histories up to which :class:`OpenSpielGame` keeps them as arrays (56 bytes each in a two-player game;
``goofspiel(num_cards=5,imp_info=True)`` has 1,728,000) and computes exact values itself (one matrix product for a
whole meta-game row) and best-response values (one pass up each player's own decisions); a larger game's values
come from OpenSpiel's ``expected_returns`` and its best responses from OpenSpiel's ``TabularBestResponse`` (on its
turn-based form where moves are simultaneous)."""

ENUMERATIONS_KEPT = 4
"""The games whose enumeration (the walk of the tree and its arrays) a process keeps, the most recently used ones:
building the same game again (a run's classification, its tracker, ``exploitability("openspiel:...")`` called in a
loop) costs nothing then."""

_ENUMERATED: dict[tuple[str, int, int], dict[str, Any]] = {}
_TOO_LARGE: dict[tuple[str, int, int], str] = {}
"""The games a walk found to have too many information states, with the message: a run classifies its game twice
(its budget, then its tracker), and the second walk would take as long to fail again."""

# OpenSpiel's player ids of a node (``pyspiel.PlayerId``) and the action of a player who passes at a simultaneous
# node (``pyspiel.INVALID_ACTION``), as plain ints: the walk compares them at every node.
_TERMINAL, _CHANCE, _PASS = -4, -1, -1


@contextlib.contextmanager
def _without_cycle_collection() -> Iterator[None]:
    """Pauses Python's cycle collector while a game's many small lists and tuples (none in a cycle) are built: its
    full passes over every object then cost more than the building (half the walk of ``liars_dice``)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _WalkClock:
    """Counts the nodes of a walk of a game tree and stops it once it has taken longer than ``max_seconds``."""

    def __init__(self, name: str, max_seconds: float | None) -> None:
        self.name, self.max_seconds = name, max_seconds
        self.histories = 0
        self._next_check = 4096
        self._started = time.perf_counter()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self._started

    def tick(self, information_states: int) -> None:
        self.histories += 1
        if self.histories < self._next_check or self.max_seconds is None:
            return
        self._next_check += 4096
        if self.seconds > self.max_seconds:
            seen = f"stopped after {information_states:,} information states and {self.histories:,} histories"
            raise EnumerationTimeout(
                f"{self.name}: walking its game tree took over {self.max_seconds:g} s and was {seen}, too long to "
                "measure it exactly in that time; estimate its exploitability with best_response_gain instead",
                seen,
            )


class EnumerationTimeout(ValueError):
    """The walk of a game tree took longer than :class:`OpenSpielGame`'s ``max_seconds``.

    Attributes:
        seen: how far it got, in words (information states and histories).
    """

    def __init__(self, message: str, seen: str) -> None:
        super().__init__(message)
        self.seen = seen


class _TreeWalk:
    """One depth-first walk of a game tree, of sequential or simultaneous moves: every information state's key,
    the tensor the env shows there, its legal actions and the player's own previous decision (row, action), and the
    terminal histories with their chance probability, each player's last decision and the returns (see
    :meth:`OpenSpielGame._enumerate`).

    At a simultaneous node every player with legal actions decides at its own information state, and the children
    are the joint actions (a player without legal actions there passes); terminal children are kept as they are
    made. What the players decided last travels as one tuple ``(row_0, action_0, row_1, action_1, ...)`` (-1: not
    yet), which a terminal history keeps. Tensors and terminal histories accumulate in flat ``array`` buffers: lists
    of Python floats would take about 30 bytes a number (700 MB on ``goofspiel(num_cards=5,imp_info=True)``).
    """

    def __init__(self, game: Any, name: str, information_state: bool, limit: int, max_seconds: float | None) -> None:
        n = game.num_players()
        self.game, self.name, self.limit, self.num_players = game, name, limit, n
        self._information_state = information_state
        self.keys: list[list[str]] = [[] for _ in range(n)]
        self.row_of: list[dict[str, int]] = [{} for _ in range(n)]
        self.tensors = [array("f") for _ in range(n)]
        self.legal: list[list[list[int]]] = [[] for _ in range(n)]
        self.previous = [array("q") for _ in range(n)]  # (row, action) pairs, flat
        self.chance, self.returns, self.decided = array("d"), array("d"), array("q")
        self.count = self.terminals = 0
        self.clock = _WalkClock(name, max_seconds)

    def run(self) -> dict[str, Any]:
        """Walks the tree; returns the attributes :class:`OpenSpielGame` takes from it."""
        stack = [(self.game.new_initial_state(), (-1,) * (2 * self.num_players), 1.0)]
        pop, push, extend, tick = stack.pop, stack.append, stack.extend, self.clock.tick
        while stack:
            state, last, chance = pop()
            tick(self.count)
            player = state.current_player()
            if player >= 0:
                row, at = self._row(state, player, last), 2 * player
                for action in reversed(state.legal_actions(player)):
                    push((state.child(action), last[:at] + (row, action) + last[at + 2 :], chance))
            elif player == _TERMINAL:
                self._terminal(state, last, chance)
            elif player == _CHANCE:
                extend((state.child(a), last, chance * p) for a, p in state.chance_outcomes())
            else:
                extend(reversed(self._joint_children(state, last, chance)))
        return self._arrays()

    def _joint_children(self, state: Any, last: tuple[int, ...], chance: float) -> list[tuple[Any, tuple, float]]:
        """The children of a simultaneous node, one per joint action (``apply_actions``, which every OpenSpiel
        game implements, Python ones too), with the movers' decisions recorded."""
        choices = []
        for player in range(self.num_players):
            legal = state.legal_actions(player)
            row = self._row(state, player, last) if legal else -1
            choices.append([(player, row, action) for action in legal] or [(player, -1, _PASS)])
        children = []
        for joint in itertools.product(*choices):
            moved = list(last)
            for player, row, action in joint:
                if row >= 0:
                    moved[2 * player], moved[2 * player + 1] = row, action
            child = state.clone()
            child.apply_actions([action for _, _, action in joint])
            if child.is_terminal():  # most children of a simultaneous node are, in goofspiel: kept at once
                self.clock.tick(self.count)
                self._terminal(child, moved, chance)
            else:
                children.append((child, tuple(moved), chance))
        return children

    def _terminal(self, state: Any, last: Sequence[int], chance: float) -> None:
        self.terminals += 1
        if self.terminals <= MAX_TERMINALS:
            self.chance.append(chance)
            self.returns.extend(state.returns())
            self.decided.extend(last)

    def _row(self, state: Any, player: int, last: tuple[int, ...]) -> int:
        """``player``'s row of the information state it decides at in ``state``, added at its first visit."""
        key = state.information_state_string(player)
        row = self.row_of[player].get(key)
        if row is None:
            self.count += 1
            if self.count > self.limit:
                raise ValueError(
                    f"{self.name} has more than {self.limit:,} information states, too many to tabulate a policy "
                    "exactly; estimate its exploitability with best_response_gain instead"
                )
            row = self.row_of[player][key] = len(self.keys[player])
            self.keys[player].append(key)
            tensor = state.information_state_tensor if self._information_state else state.observation_tensor
            self.tensors[player].extend(tensor(player))  # what the env shows there
            self.legal[player].append(state.legal_actions(player))
            self.previous[player].extend(last[2 * player : 2 * player + 2])
        return row

    def _arrays(self) -> dict[str, Any]:
        """The attributes the walk sets, as arrays."""
        n, width = self.num_players, self.game.num_distinct_actions()
        game = self.game
        shape = game.information_state_tensor_shape() if self._information_state else game.observation_tensor_shape()
        observations, masks, before, before_action = [], [], [], []
        for player in range(n):
            size = len(self.keys[player])
            tensors = np.frombuffer(self.tensors[player], dtype=np.float32)
            observations.append(tensors.reshape(size, int(np.prod(shape))))
            mask = np.zeros((size, width), dtype=bool)
            for row, actions in enumerate(self.legal[player]):
                mask[row, actions] = True
            masks.append(mask)
            previous = np.frombuffer(self.previous[player], dtype=np.int64).reshape(size, 2)
            before.append(previous[:, 0].copy())
            before_action.append(previous[:, 1].copy())
        return {
            "keys": self.keys,
            "_row": self.row_of,
            "_observations": observations,
            "_legal": masks,
            "_previous": before,
            "_previous_action": before_action,
            "_levels": [_rows_by_depth(before[p]) for p in range(n)],
            "_lookup": [{obs.tobytes(): row for row, obs in enumerate(observations[p])} for p in range(n)],
            "_terminals": self._terminal_arrays() if self.terminals <= MAX_TERMINALS else None,
            "num_histories": self.clock.histories,
            "walk_seconds": self.clock.seconds,
        }

    def _terminal_arrays(self) -> dict[str, np.ndarray]:
        """The game's terminal histories as arrays: ``chance`` ``[Z]`` (the chance probability of reaching each),
        ``returns`` ``[Z, N]``, and ``sequences`` ``[N, Z]``: each player's last decision there as one index
        ``row * A + action`` into its table flattened, ``S_p * A`` where the player never decided."""
        z, n, width = self.terminals, self.num_players, self.game.num_distinct_actions()
        last = np.frombuffer(self.decided, dtype=np.int64).reshape(z, n, 2)
        rows, actions = last[:, :, 0].T, last[:, :, 1].T
        never = np.asarray([len(keys) * width for keys in self.keys], dtype=np.int64)[:, None]
        return {
            "chance": np.frombuffer(self.chance, dtype=np.float64),
            "returns": np.frombuffer(self.returns, dtype=np.float64).reshape(z, n),
            "sequences": np.where(rows >= 0, rows * width + actions, never),
        }


class OpenSpielGame(KnownGame):
    """An OpenSpiel game whose exploitability marljoint computes exactly, to OpenSpiel's figures.

    Args:
        game: an OpenSpiel game string (``"leduc_poker"``) or a loaded ``pyspiel.Game``.
        parameters: game parameters (with a game string).
        max_information_states: the most information states enumerated before the game is refused.
        max_seconds: the longest the walk of the game tree may take before the game is refused (``None``: no
            limit). A game walked once in this process is not walked again: its enumeration is kept (the
            :data:`ENUMERATIONS_KEPT` most recent games).

    Attributes:
        simultaneous: whether the game has simultaneous moves (OpenSpiel's own best responses then work on
            :attr:`turn_based_game`).
        num_histories: the nodes of the game tree (chance and terminal nodes included) the walk visited.
        walk_seconds: how long that walk took.

    Raises:
        ImportError: without the openspiel extra.
        ValueError: a game of neither sequential nor simultaneous moves (mean-field games), lacking
            information-state strings or tensors, with more than ``max_information_states`` information states
            (a game found so is refused at once when built again), or whose walk takes longer than ``max_seconds``
            (:class:`EnumerationTimeout`).
    """

    def __init__(
        self,
        game: Any,
        parameters: dict[str, Any] | None = None,
        max_information_states: int = MAX_INFORMATION_STATES,
        max_seconds: float | None = None,
    ) -> None:
        import pyspiel

        self.game = load_openspiel_game(game, **(parameters or {})) if isinstance(game, str) else game
        game_type = self.game.get_type()
        self.name = f"{OPENSPIEL_PREFIX}{game_type.short_name}"
        self.num_players = self.game.num_players()
        self.num_actions = self.game.num_distinct_actions()
        dynamics = pyspiel.GameType.Dynamics
        if game_type.dynamics not in (dynamics.SEQUENTIAL, dynamics.SIMULTANEOUS):
            raise ValueError(
                f"{self.name} has {game_type.dynamics.name.lower()} dynamics; exact tables need a game of sequential "
                "or simultaneous moves (estimate its exploitability with best_response_gain instead)"
            )
        self.simultaneous = game_type.dynamics == dynamics.SIMULTANEOUS
        if not game_type.provides_information_state_string:
            raise ValueError(f"{self.name} has no information-state strings, which OpenSpiel's best responses need")
        self._information_state = bool(game_type.provides_information_state_tensor)
        if not (self._information_state or game_type.provides_observation_tensor):
            raise ValueError(f"{self.name} gives no tensor to observe, so a network cannot play it")
        self._responders: dict[int, Any] = {}
        self._turn_based: Any = None
        self._enumerate(int(max_information_states), max_seconds)

    # ------------------------------------------------------------------ the information states
    def _enumerate(self, limit: int, max_seconds: float | None) -> None:
        key = (str(self.game), limit, MAX_TERMINALS)
        if key in _TOO_LARGE:
            raise ValueError(_TOO_LARGE[key])
        walked = _ENUMERATED.pop(key, None)
        if walked is None:
            try:
                with _without_cycle_collection():
                    walked = _TreeWalk(self.game, self.name, self._information_state, limit, max_seconds).run()
            except EnumerationTimeout:
                raise
            except ValueError as exc:  # too many information states: the next build of the game knows at once
                _TOO_LARGE[key] = str(exc)
                raise
        _ENUMERATED[key] = walked  # the newest last: the oldest is dropped first
        while len(_ENUMERATED) > ENUMERATIONS_KEPT:
            del _ENUMERATED[next(iter(_ENUMERATED))]
        for name, value in walked.items():
            setattr(self, name, value)

    def _realisation(self, tables: np.ndarray, player: int) -> np.ndarray:
        """``[K, Z]``: for each of ``K`` checked tables ``[K, S_p, A]`` of ``player``, the product of its own action
        probabilities along the way to every terminal history (its realisation weight there)."""
        terminals = self._terminals
        assert terminals is not None
        reach = self._reach(tables, player)  # [K, S]
        weights = np.ones((tables.shape[0], tables.shape[1] * tables.shape[2] + 1))  # the last: never decided
        weights[:, :-1] = (reach[:, :, None] * tables).reshape(tables.shape[0], -1)
        return np.take(weights, terminals["sequences"][player], axis=1)

    def reach(self, tables: Sequence[np.ndarray], player: int) -> np.ndarray:
        """``[K, S_p]``: for each of ``K`` tables ``[S_p, A]`` of ``player`` (checked here), the product of the
        player's own action probabilities on the way to each of its information states.

        One gather and multiply per depth of the player's own decisions: milliseconds on games of 100k
        information states."""
        self._check_player(player)
        return self._reach(np.stack([self.check_table(table, player) for table in tables]), player)

    def _reach(self, tables: np.ndarray, player: int) -> np.ndarray:
        """:meth:`reach` of checked tables ``[K, S_p, A]``."""
        previous, action = self._previous[player], self._previous_action[player]
        reach = np.ones(tables.shape[:2])
        for rows in self._levels[player]:  # a level's predecessors are all in the levels before it
            before = previous[rows]
            reach[:, rows] = reach[:, before] * tables[:, before, action[rows]]
        return reach

    def num_information_states(self, player: int) -> int:
        """``S_p``, the information states where ``player`` decides."""
        self._check_player(player)
        return len(self.keys[player])

    def legal_mask(self, player: int) -> np.ndarray:
        """``[S_p, A]`` bool: the legal actions at each of ``player``'s information states."""
        self._check_player(player)
        return self._legal[player].copy()

    def infoset_observations(self, player: int) -> np.ndarray:
        self._check_player(player)
        return self._observations[player]

    def previous_infosets(self, player: int) -> np.ndarray:
        self._check_player(player)
        return self._previous[player]

    # ------------------------------------------------------------------ tables
    def check_table(self, table: np.ndarray, player: int) -> np.ndarray:
        """``table`` restricted to the legal actions and renormalised; a row without legal mass becomes uniform
        over the legal actions.

        Raises:
            ValueError: the wrong shape, or negative or non-finite entries.
        """
        self._check_player(player)
        array = np.asarray(table, dtype=np.float64)
        expected = (len(self.keys[player]), self.num_actions)
        if array.shape != expected:
            raise ValueError(
                f"{self.name}: player {player}'s table has shape {array.shape}, expected {expected} (information "
                "states x distinct actions)"
            )
        if not np.all(np.isfinite(array)) or np.any(array < 0):
            raise ValueError(f"{self.name}: player {player}'s table has negative or non-finite entries")
        legal = self._legal[player]
        kept = np.where(legal, array, 0.0)
        total = kept.sum(1, keepdims=True)
        uniform = legal / legal.sum(1, keepdims=True)
        return np.where(total > 0, kept / np.where(total > 0, total, 1.0), uniform)

    def mixture_table(self, tables: Sequence[np.ndarray], weights: np.ndarray, player: int) -> np.ndarray:
        """The behaviour policy of playing member ``k`` with probability ``weights[k]`` for a whole episode: at
        each information state the members' rows weighted by ``weights[k]`` times the member's own probability of
        reaching it (a plain average is wrong wherever members reach it with different probabilities)."""
        checked = np.stack([self.check_table(t, player) for t in tables])  # [K, S, A]
        w = np.asarray(weights, dtype=np.float64).reshape(-1, 1)
        weight = w * self._reach(checked, player)
        total = weight.sum(0)
        mixed = (weight[:, :, None] * checked).sum(0)
        fallback = (w[:, :, None] * checked).sum(0)
        return self.check_table(np.where(total[:, None] > 0, mixed, fallback), player)

    def policy_dict(self, tables: Sequence[np.ndarray]) -> dict[str, list[tuple[int, float]]]:
        """The tables as OpenSpiel's tabular policy: information-state string → ``[(action, probability)]`` over
        the legal actions, for every player."""
        return self._pairs(tables, tuple)

    def _pairs(self, tables: Sequence[np.ndarray], pair: type, turn_based: bool = False) -> dict[str, list[Any]]:
        """:meth:`policy_dict` with each ``(action, probability)`` made a ``pair`` (``tuple`` or ``list``); with
        ``turn_based``, keyed by the information states of :attr:`turn_based_game`."""
        out: dict[str, list[Any]] = {}
        checked = [self.check_table(table, player) for player, table in enumerate(tables)]
        rename = turn_based and self.simultaneous
        with _without_cycle_collection():
            for player, table in enumerate(checked):
                rows, actions = np.nonzero(self._legal[player])  # row by row, actions ascending
                ends = np.cumsum(np.bincount(rows, minlength=len(self.keys[player]))).tolist()
                pairs = list(map(pair, zip(actions.tolist(), table[rows, actions].tolist())))
                keys = [_turn_based_key(player, key) for key in self.keys[player]] if rename else self.keys[player]
                start = 0
                for key, end in zip(keys, ends):
                    out[key] = pairs[start:end]
                    start = end
        return out

    @property
    def turn_based_game(self) -> Any:
        """The game as OpenSpiel's ``nash_conv`` and ``TabularBestResponse`` take it: the game itself, or for a
        game of simultaneous moves ``pyspiel.convert_to_turn_based(game)``, where the players of a simultaneous
        node move one after the other, player 0 first, none seeing the others' choices; player ``p``'s
        information state ``key`` there is ``f"Current player: {p}\\n{key}"``."""
        if not self.simultaneous:
            return self.game
        if self._turn_based is None:
            self._turn_based = import_pyspiel().convert_to_turn_based(self.game)
        return self._turn_based

    def export(self, tables: Sequence[np.ndarray], path: str | Path) -> Path:
        """Writes the tables as OpenSpiel's tabular policy of :attr:`turn_based_game` (:meth:`policy_dict`, with the
        turn-based keys where moves are simultaneous) to ``path`` as JSON (``{string: [[action, probability],
        ...]}``), atomically.

        Load it for OpenSpiel's own tools with ``{k: [tuple(p) for p in v] for k, v in json.load(f).items()}``,
        e.g. ``pyspiel.nash_conv(game, that)``, or ``pyspiel.nash_conv(pyspiel.convert_to_turn_based(game),
        that)`` for a game of simultaneous moves.
        """
        path = Path(path)
        atomic_write_json(self._pairs(tables, list, turn_based=True), path)
        return path

    # ------------------------------------------------------------------ scoring, by OpenSpiel
    def values(self, tables: Sequence[np.ndarray]) -> np.ndarray:
        """Each player's expected return when every player plays its table: a sum over the game's terminal
        histories (OpenSpiel's ``expected_returns`` for a game with more than :data:`MAX_TERMINALS` of them)."""
        if self._terminals is None:
            joint = import_pyspiel().TabularPolicy(self.policy_dict(tables))
            return np.asarray(import_pyspiel().expected_returns(self.game.new_initial_state(), joint, -1, True))
        return self.profile_values([[table] for table in tables], np.zeros((1, self.num_players), dtype=np.int64))[0]

    def return_sd(self, tables: Sequence[np.ndarray]) -> np.ndarray | None:
        """``[N]``: the standard deviation of each player's return when every player plays its table (exact, a
        sum over the game's terminal histories), or ``None`` for a game with more than :data:`MAX_TERMINALS` of
        them. With uniform tables it is the game's payoff scale, which ``--self-play mmd`` measures its
        regularisation in (:func:`marljoint.run.recipes.mmd_magnet_rule`).

        Example:
            >>> game = OpenSpielGame("kuhn_poker")
            >>> uniform = [game.check_table(np.ones((6, 2)), p) for p in range(2)]
            >>> [round(float(x), 3) for x in game.return_sd(uniform)]
            [1.452, 1.452]
        """
        if self._terminals is None:
            return None
        probability = self._terminals["chance"].copy()
        for player, table in enumerate(tables):
            probability *= self._realisation(self.check_table(table, player)[None], player)[0]
        returns = self._terminals["returns"]  # [Z, N]
        mean = probability @ returns
        return np.sqrt(np.maximum(probability @ (returns - mean) ** 2, 0.0))

    def profile_values(self, member_tables: Sequence[Sequence[np.ndarray]], profiles: np.ndarray) -> np.ndarray:
        """``[P, N]`` expected returns of ``P`` pure profiles of the players' members: every member's realisation
        weights over the terminal histories are computed once, and each profile's value is their product weighted
        by the chance probabilities and returns."""
        index = np.asarray(profiles, dtype=np.int64).reshape(-1, self.num_players)
        if len(index) == 0:
            return np.zeros((0, self.num_players))
        if self._terminals is None:
            rows = [self.values([member_tables[p][k] for p, k in enumerate(profile)]) for profile in index]
            return np.stack(rows)
        product = np.tile(self._terminals["chance"], (len(index), 1))  # [P, Z]
        for player in range(self.num_players):
            used = np.unique(index[:, player])
            checked = np.stack([self.check_table(member_tables[player][k], player) for k in used])
            weights = self._realisation(checked, player)  # [len(used), Z]
            product *= weights[np.searchsorted(used, index[:, player])]
        return product @ self._terminals["returns"]

    def best_response_values(self, tables: Sequence[np.ndarray]) -> np.ndarray:
        """``[N]``: each player's best-response value against the others' tables.

        From the terminal histories where the game keeps them: each player's counterfactual value of every
        (information state, action) is one weighted count over the terminal histories, and the best values follow
        in one pass up its own decisions, deepest first (exact with perfect recall, as OpenSpiel's best responses
        assume); a larger game asks OpenSpiel (:meth:`best_response`)."""
        checked = [self.check_table(table, player) for player, table in enumerate(tables)]
        if self._terminals is None:
            return np.asarray([self.best_response(checked, p)[0] for p in range(self.num_players)])
        realisation = [self._realisation(table[None], p)[0] for p, table in enumerate(checked)]
        out = np.empty(self.num_players)
        for player in range(self.num_players):
            weight = self._terminals["chance"] * self._terminals["returns"][:, player]
            for other in range(self.num_players):
                if other != player:
                    weight = weight * realisation[other]
            out[player] = self._best_value(weight, player)
        return out

    def _best_value(self, weight: np.ndarray, player: int) -> float:
        """The best value of ``player`` when terminal history ``z`` pays it ``weight[z]`` times its own
        realisation weight there."""
        sequences = self._terminals["sequences"][player]  # type: ignore[index]
        legal, previous, action = self._legal[player], self._previous[player], self._previous_action[player]
        size, width = legal.shape
        flat = np.bincount(sequences, weights=weight, minlength=size * width + 1)
        values = flat[:-1].reshape(size, width)
        for level in reversed(self._levels[player]):  # a level's successors are all in the levels after it
            best = np.where(legal[level], values[level], -np.inf).max(1)
            np.add.at(values, (previous[level], action[level]), best)
        first = previous < 0
        return float(flat[-1] + np.where(legal[first], values[first], -np.inf).max(1).sum())

    def best_response(self, tables: Sequence[np.ndarray], player: int) -> tuple[float, np.ndarray]:
        """``(value, table)``: OpenSpiel's best response of ``player`` (``TabularBestResponse`` on
        :attr:`turn_based_game`, built once per player and game, and given each new policy)."""
        self._check_player(player)
        policy = self._pairs(tables, tuple, turn_based=True)
        game = self.turn_based_game
        response = self._responders.get(player)
        if response is None:
            response = self._responders[player] = import_pyspiel().TabularBestResponse(game, player, policy)
        else:
            response.set_policy(policy)
        value = float(response.value(game.new_initial_state().history_str()))
        chosen = response.get_best_response_actions()
        table = np.zeros((len(self.keys[player]), self.num_actions))
        for row, key in enumerate(self.keys[player]):
            action = chosen.get(_turn_based_key(player, key) if self.simultaneous else key)
            table[row, action if action is not None else int(np.flatnonzero(self._legal[player][row])[0])] = 1.0
        return value, table

    def nash_conv(self, tables: Sequence[np.ndarray]) -> float:
        """The NashConv of the tables: :meth:`best_response_values` less :meth:`values`, summed over the players
        (``pyspiel.nash_conv`` of the same policy, to rounding)."""
        return float(np.sum(self.best_response_values(tables) - self.values(tables)))

    def policy(self, table: np.ndarray, player: int) -> FrozenPolicy:
        return OpenSpielTablePolicy(self.name, self._lookup[player], self.check_table(table, player), player)

    def is_symmetric(self) -> bool:
        return False

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_responders": {}, "_turn_based": None}  # OpenSpiel's objects do not pickle

    def __repr__(self) -> str:
        sizes = [len(k) for k in self.keys]
        return f"OpenSpielGame({self.name!r}, information_states={sizes})"


def _turn_based_key(player: int, key: str) -> str:
    """Player ``player``'s information state ``key`` of a game of simultaneous moves as OpenSpiel's turn-based form
    of it names it where the player moves (``TurnBasedSimultaneousState::InformationStateString``)."""
    return f"Current player: {player}\n{key}"


def _rows_by_depth(previous: np.ndarray) -> list[np.ndarray]:
    """The rows that have a predecessor (``previous >= 0``), grouped by the number of the player's own decisions
    before them (1, 2, ...): each group depends only on the groups before it. Predecessors come first in the
    enumeration, so one pass in row order gives every depth."""
    depth = np.zeros(len(previous), dtype=np.int64)
    for row in np.flatnonzero(previous >= 0):
        depth[row] = depth[previous[row]] + 1
    order = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(1, int(depth.max(initial=0)) + 2))
    return [order[start:stop] for start, stop in zip(bounds[:-1], bounds[1:])]


class OpenSpielTablePolicy(_TabularBase):
    """Plays a table of an :class:`OpenSpielGame` from the env's observations (looked up exactly).

    Args:
        name: the game's name, for messages.
        lookup: observation bytes (float32) → row of the table.
        table: ``[S_p, A]`` checked table.
        player: the seat.

    Raises:
        ValueError: in :meth:`action_probs`, an observation that is none of the player's information states.
    """

    def __init__(self, name: str, lookup: dict[bytes, int], table: np.ndarray, player: int) -> None:
        self.name = name
        self.lookup = dict(lookup)
        self.player = int(player)
        self.table = np.asarray(table, dtype=np.float64)
        self._table = torch.as_tensor(self.table, dtype=torch.float32)

    def action_probs(self, obs: torch.Tensor, mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """``[[B, A]]``: the rows of the observed information states."""
        rows = []
        for x in np.asarray(obs.detach().cpu(), dtype=np.float32).reshape(obs.shape[0], -1):
            row = self.lookup.get(x.tobytes())
            if row is None:
                raise ValueError(
                    f"{self.name}: an observation of player {self.player} that is none of its information states"
                )
            rows.append(row)
        return masked_head_probs([self._table[torch.as_tensor(rows, dtype=torch.long)]], mask)

    def __repr__(self) -> str:
        return f"OpenSpielTablePolicy({self.name!r}, player={self.player})"
