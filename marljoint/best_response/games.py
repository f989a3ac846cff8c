"""Games whose tree is known, so that values, best responses and meta-game entries are computed exactly.

A :class:`KnownGame` turns each seat's policy into a **table** (its behaviour at every information set) by
querying the policy once, in one batch, on every information set's observation; everything else is arithmetic
on tables:

============ ============================== ============================================================
game         table of seat ``p``            exact machinery
============ ============================== ============================================================
Kuhn poker   ``[6, 2]`` (see ``kuhn.py``)   tree walk (values, best response), reach-weighted mixtures
matrix game  ``[n_p]`` mixed strategy       expected payoffs by ``einsum``, best pure reply
============ ============================== ============================================================

Games are passed in as objects; this package never looks a bundled env up. The product layer maps a bundled
env's name to its game (:func:`marljoint.run.registry.known_game`); names are resolved in one place,
:mod:`marljoint.best_response.resolve`.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

import numpy as np
import torch

from marljoint.best_response.kuhn import (
    KUHN_INFOSETS,
    kuhn_best_response,
    kuhn_infoset_observations,
    kuhn_mixture_table,
    kuhn_policy_value,
    kuhn_profile_values,
    kuhn_reach,
)
from marljoint.best_response.matrix import action_values, validate_payoffs, validate_strategies
from marljoint.best_response.population import (
    ConstantPolicy,
    FrozenPolicy,
    KuhnTablePolicy,
    PolicyMixture,
    normalised_weights,
    policy_device,
)

__all__ = ["KnownGame", "KuhnGame", "MatrixGame"]

PolicyLike = FrozenPolicy | PolicyMixture | np.ndarray


class KnownGame:
    """Base of the exactly solvable games; subclasses define the table of a policy and the game's arithmetic.

    Attributes:
        name: a short name for messages.
        num_players: P.
    """

    name: str = "game"
    num_players: int = 2

    # ------------------------------------------------------------------ per game
    def infoset_observations(self, player: int) -> np.ndarray:
        """``[S, *obs_shape]`` float32: the env's observation at each of ``player``'s information sets."""
        raise NotImplementedError

    def previous_infosets(self, player: int) -> np.ndarray | None:
        """``[S]`` int: for each of ``player``'s information sets, the row of the player's own previous one on
        the way there (-1 at its first decision), or ``None`` when the game does not say (a recurrent policy's
        table then cannot be built). A recurrent policy's state at an information set is the state its earlier
        decisions there left: its memory advances only on its own turns."""
        return None

    def check_table(self, table: np.ndarray, player: int) -> np.ndarray:
        """Validates ``player``'s table and returns it as float64 (rows renormalised)."""
        raise NotImplementedError

    def mixture_table(self, tables: Sequence[np.ndarray], weights: np.ndarray, player: int) -> np.ndarray:
        """The table of the behaviour policy equivalent to playing member ``k`` with ``weights[k]`` per episode."""
        raise NotImplementedError

    def reach(self, tables: Sequence[np.ndarray], player: int) -> np.ndarray:
        """``[K, S_p]``: for each of ``K`` tables of ``player``, the player's own probability of reaching each of
        its information sets (the product of its own action probabilities on the way there; chance and the other
        players left out). ``S_p`` is the number of rows of the player's table (1 for a matrix game)."""
        raise NotImplementedError

    def values(self, tables: Sequence[np.ndarray]) -> np.ndarray:
        """``[P]`` expected payoff of every player when each plays its table."""
        raise NotImplementedError

    def profile_values(self, member_tables: Sequence[Sequence[np.ndarray]], profiles: np.ndarray) -> np.ndarray:
        """``[K, P]`` payoffs of ``K`` pure meta-profiles (``profiles[k, p]`` indexes ``member_tables[p]``)."""
        raise NotImplementedError

    def best_response(self, tables: Sequence[np.ndarray], player: int) -> tuple[float, np.ndarray]:
        """``(value, table)``: a deterministic best response of ``player`` to the others' tables."""
        raise NotImplementedError

    def policy(self, table: np.ndarray, player: int) -> FrozenPolicy:
        """A frozen policy that plays ``table`` in the env."""
        raise NotImplementedError

    def is_symmetric(self) -> bool:
        """Whether the seats are interchangeable (a shared population is then valid)."""
        return False

    # ------------------------------------------------------------------ shared
    def table(self, policy: PolicyLike, player: int) -> np.ndarray:
        """``player``'s table of a frozen policy, a :class:`PolicyMixture`, or an array (checked).

        A policy is queried once, in one batch, on every information set (action masks allow both actions), on
        the device of its network; the table comes back to the CPU.
        """
        self._check_player(player)
        if isinstance(policy, PolicyMixture):
            members = [self.table(member, player) for member in policy.members]
            return self.mixture_table(members, policy.weights, player)
        if isinstance(policy, np.ndarray):
            return self.check_table(policy, player)
        if not hasattr(policy, "action_probs"):
            raise TypeError(
                f"got {type(policy).__name__} for player {player}; pass a frozen policy (with action_probs), a "
                "PolicyMixture, or a table as a numpy array"
            )
        observations = torch.as_tensor(self.infoset_observations(player)).to(policy_device(policy))
        with torch.no_grad():
            if getattr(policy, "recurrent", False):
                states = self._infoset_states(policy, observations, player)
                probs = policy.action_probs(observations, None, state=states)
            else:
                probs = policy.action_probs(observations, None)
        if len(probs) != 1:
            raise ValueError(f"{self.name} has one action head per seat, the policy returned {len(probs)} heads")
        return self.check_table(self._rows_to_table(probs[0].double().cpu().numpy()), player)

    def tables(self, policies: Sequence[PolicyLike]) -> list[np.ndarray]:
        """One table per player (see :meth:`table`)."""
        if len(policies) != self.num_players:
            raise ValueError(
                f"got {len(policies)} policies for {self.name}, which has {self.num_players} players; pass one "
                "policy (or PolicyMixture, or table) per player"
            )
        return [self.table(policy, player) for player, policy in enumerate(policies)]

    def nash_conv(self, tables: Sequence[np.ndarray]) -> float:
        """``sum_p (best-response value of p - value of p)`` for checked tables."""
        values = self.values(tables)
        return float(sum(self.best_response(tables, p)[0] - values[p] for p in range(self.num_players)))

    def _infoset_states(self, policy: PolicyLike, observations: torch.Tensor, player: int) -> torch.Tensor:
        """``[S, state_size]``: the state a recurrent policy acts from at each information set, built by stepping
        it through the player's own earlier information sets on the way there (which is all its memory holds)."""
        previous = self.previous_infosets(player)
        if previous is None:
            raise ValueError(
                f"policy for player {player} is recurrent, and {self.name} does not list each information set's "
                "earlier ones, so its exact table cannot be built; measure it with best_response_gain instead"
            )
        previous = np.asarray(previous, dtype=np.int64)
        states = policy.initial_state(len(observations))  # type: ignore[union-attr]
        done = previous < 0
        while not done.all():  # depth by depth: a set's state is its predecessor's state after deciding there
            ready = ~done & done[np.maximum(previous, 0)]
            if not ready.any():
                raise ValueError(f"{self.name}'s previous_infosets({player}) has a cycle: {previous.tolist()}")
            rows = np.flatnonzero(ready)
            before = previous[rows]
            states[rows] = policy.next_state(observations[before], states[before])  # type: ignore[union-attr]
            done[rows] = True
        return states

    def _rows_to_table(self, rows: np.ndarray) -> np.ndarray:
        return rows

    def _check_player(self, player: int) -> None:
        if not (isinstance(player, (int, np.integer)) and 0 <= player < self.num_players):
            raise ValueError(f"player={player!r}; {self.name} has players 0..{self.num_players - 1}")


class KuhnGame(KnownGame):
    """Kuhn poker (the bundled ``kuhn_poker_v0`` env), exactly: tables ``[6, 2]`` per player."""

    name = "kuhn_poker"
    num_players = 2

    def infoset_observations(self, player: int) -> np.ndarray:
        return kuhn_infoset_observations(player)

    def previous_infosets(self, player: int) -> np.ndarray:
        # Player 0 decides at "" and, after pass-bet, at "pb" with the same card; player 1 decides once.
        infosets = KUHN_INFOSETS[player]
        return np.array(
            [infosets.index((card, "")) if history == "pb" else -1 for card, history in infosets], dtype=np.int64
        )

    def check_table(self, table: np.ndarray, player: int) -> np.ndarray:
        # kuhn_mixture_table validates a single table and returns it renormalised.
        return kuhn_mixture_table([table], np.ones(1), player)

    def mixture_table(self, tables: Sequence[np.ndarray], weights: np.ndarray, player: int) -> np.ndarray:
        return kuhn_mixture_table(tables, weights, player)

    def reach(self, tables: Sequence[np.ndarray], player: int) -> np.ndarray:
        self._check_player(player)
        return kuhn_reach(np.stack([self.check_table(table, player) for table in tables]), player)

    def values(self, tables: Sequence[np.ndarray]) -> np.ndarray:
        return np.asarray(kuhn_policy_value(tables))

    def profile_values(self, member_tables: Sequence[Sequence[np.ndarray]], profiles: np.ndarray) -> np.ndarray:
        index = np.asarray(profiles, dtype=np.int64).reshape(-1, 2)
        stack_0 = np.stack([member_tables[0][i] for i in index[:, 0]]) if len(index) else np.zeros((0, 6, 2))
        stack_1 = np.stack([member_tables[1][j] for j in index[:, 1]]) if len(index) else np.zeros((0, 6, 2))
        value = kuhn_profile_values(stack_0, stack_1)
        return np.stack([value, -value], axis=1)

    def best_response(self, tables: Sequence[np.ndarray], player: int) -> tuple[float, np.ndarray]:
        return kuhn_best_response(tables, player)

    def policy(self, table: np.ndarray, player: int) -> FrozenPolicy:
        return KuhnTablePolicy(table, player)

    def __repr__(self) -> str:
        return "KuhnGame()"


class MatrixGame(KnownGame):
    """A normal-form game (as the bundled ``matrix_game_v0`` env plays it): a seat's table is its mixed strategy
    ``[n_p]``.

    Args:
        payoffs: one array per player, each of shape ``[n_1, ..., n_P]``.
        name: a label for messages.

    Raises:
        ValueError: an ill-formed game (see :func:`~marljoint.best_response.matrix.validate_payoffs`).
    """

    def __init__(self, payoffs: Sequence[np.ndarray], name: str = "matrix_game") -> None:
        self.payoffs = validate_payoffs(payoffs)
        self.num_players = len(self.payoffs)
        self.shape = self.payoffs[0].shape
        self.name = name

    def infoset_observations(self, player: int) -> np.ndarray:
        return np.ones((1, 1), dtype=np.float32)

    def previous_infosets(self, player: int) -> np.ndarray:
        return np.array([-1], dtype=np.int64)  # one simultaneous decision

    def _rows_to_table(self, rows: np.ndarray) -> np.ndarray:
        return rows[0]

    def check_table(self, table: np.ndarray, player: int) -> np.ndarray:
        self._check_player(player)
        vector = np.asarray(table, dtype=np.float64).reshape(-1)
        strategies = [np.full(size, 1.0 / size) for size in self.shape]
        strategies[player] = vector
        return validate_strategies(strategies, self.shape)[player] / vector.sum()

    def mixture_table(self, tables: Sequence[np.ndarray], weights: np.ndarray, player: int) -> np.ndarray:
        stacked = np.stack([self.check_table(t, player) for t in tables])
        return normalised_weights(weights, len(tables)) @ stacked

    def reach(self, tables: Sequence[np.ndarray], player: int) -> np.ndarray:
        for table in tables:
            self.check_table(table, player)
        return np.ones((len(tables), 1))  # one decision, always reached

    def values(self, tables: Sequence[np.ndarray]) -> np.ndarray:
        strategies = validate_strategies(tables, self.shape)
        return np.array([strategies[p] @ action_values(payoff, strategies, p) for p, payoff in enumerate(self.payoffs)])

    def profile_values(self, member_tables: Sequence[Sequence[np.ndarray]], profiles: np.ndarray) -> np.ndarray:
        index = np.asarray(profiles, dtype=np.int64).reshape(-1, self.num_players)
        axes = string.ascii_lowercase[: self.num_players]
        subscripts = axes + "," + ",".join(f"z{a}" for a in axes) + "->z"
        stacks = [
            np.stack([member_tables[p][i] for i in index[:, p]]) if len(index) else np.zeros((0, self.shape[p]))
            for p in range(self.num_players)
        ]
        return np.stack([np.einsum(subscripts, payoff, *stacks) for payoff in self.payoffs], axis=1)

    def best_response(self, tables: Sequence[np.ndarray], player: int) -> tuple[float, np.ndarray]:
        self._check_player(player)
        strategies = validate_strategies(tables, self.shape)
        values = action_values(self.payoffs[player], strategies, player)
        # The lowest-index maximiser, so the best response is deterministic.
        best = int(np.flatnonzero(values >= values.max() - 1e-12)[0])
        return float(values[best]), np.eye(self.shape[player])[best]

    def policy(self, table: np.ndarray, player: int) -> FrozenPolicy:
        return ConstantPolicy([self.check_table(table, player)])

    def is_symmetric(self) -> bool:
        if self.num_players != 2 or self.shape[0] != self.shape[1]:
            return False
        return bool(np.allclose(self.payoffs[1], self.payoffs[0].T, atol=1e-12))

    def __repr__(self) -> str:
        return f"MatrixGame({self.name!r}, shape={self.shape})"
