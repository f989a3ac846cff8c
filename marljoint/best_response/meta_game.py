"""The empirical meta-game: one payoff array per player over the populations, NaN where not yet estimated."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from marljoint.best_response.exploitability import matrix_nash_conv
from marljoint.best_response.meta_solvers import MetaSolver

__all__ = ["MetaGame"]


class MetaGame:
    """Payoffs of every pure meta-profile of the populations, estimated entry by entry.

    ``payoffs[p][i_1, ..., i_P]`` is player ``p``'s expected return when seat ``q`` plays population member
    ``i_q``. Growing a population appends NaN rows/columns; only those (the NaN entries, listed by
    :meth:`missing_profiles`) need estimating, so each PSRO iteration simulates the new rows and columns only.

    With ``symmetric=True`` (two seats sharing one population) the two arrays are kept transposes of each other:
    each filled entry is averaged with its mirror, ``payoffs[0][i, j] = (u_0(i, j) + u_1(j, i)) / 2``.

    Args:
        num_players: P.
        symmetric: two seats with one shared population.

    Example:
        >>> game = MetaGame(2)
        >>> game.grow([1, 1])
        >>> game.missing_profiles().tolist()
        [[0, 0]]
        >>> game.fill([[0, 0]], [[1.0, -1.0]])
        >>> game.grow([2, 1])
        >>> game.missing_profiles().tolist()
        [[1, 0]]

    Raises:
        ValueError: ``num_players`` below 1, or ``symmetric`` with other than two players.
    """

    def __init__(self, num_players: int, symmetric: bool = False) -> None:
        if not isinstance(num_players, (int, np.integer)) or num_players < 1:
            raise ValueError(f"num_players={num_players!r}; pass a positive integer")
        if symmetric and num_players != 2:
            raise ValueError(
                f"a symmetric meta-game has two seats sharing one population, got num_players={num_players}; "
                "use one population per player (symmetric=False)"
            )
        self.num_players = int(num_players)
        self.symmetric = bool(symmetric)
        self.payoffs: list[np.ndarray] = [np.zeros((0,) * self.num_players) for _ in range(self.num_players)]

    @property
    def shape(self) -> tuple[int, ...]:
        """Population sizes ``(n_1, ..., n_P)``."""
        return tuple(self.payoffs[0].shape)

    @property
    def is_complete(self) -> bool:
        """True when no entry is NaN."""
        return all(not np.isnan(payoff).any() for payoff in self.payoffs)

    def grow(self, sizes: Sequence[int]) -> None:
        """Enlarges the populations to ``sizes`` (never shrinks); new entries are NaN.

        Raises:
            ValueError: the wrong number of sizes, a size below the current one, or unequal sizes when symmetric.
        """
        sizes = tuple(int(size) for size in sizes)
        if len(sizes) != self.num_players:
            raise ValueError(f"got {len(sizes)} sizes for {self.num_players} players; pass one population size each")
        if any(new < old for new, old in zip(sizes, self.shape)):
            raise ValueError(f"sizes {sizes} would shrink the meta-game of shape {self.shape}; populations only grow")
        if self.symmetric and sizes[0] != sizes[1]:
            raise ValueError(f"a symmetric meta-game has one population, got sizes {sizes}; pass equal sizes")
        grown = []
        for payoff in self.payoffs:
            array = np.full(sizes, np.nan)
            array[tuple(slice(0, n) for n in payoff.shape)] = payoff
            grown.append(array)
        self.payoffs = grown

    def missing_profiles(self) -> np.ndarray:
        """``[K, P]`` int64: the meta-profiles with a NaN entry for some player, in row-major order."""
        missing = np.zeros(self.shape, dtype=bool)
        for payoff in self.payoffs:
            missing |= np.isnan(payoff)
        return np.argwhere(missing).astype(np.int64).reshape(-1, self.num_players)

    def fill(
        self, profiles: np.ndarray | Sequence[Sequence[int]], values: np.ndarray | Sequence[Sequence[float]]
    ) -> None:
        """Writes estimated payoffs.

        Args:
            profiles: ``[K, P]`` member indices.
            values: ``[K, P]`` every player's payoff at each profile.

        Raises:
            ValueError: shapes that disagree, an index out of range, or a non-finite value.
        """
        index = np.asarray(profiles, dtype=np.int64).reshape(-1, self.num_players)
        estimates = np.asarray(values, dtype=np.float64).reshape(-1, self.num_players)
        if len(index) != len(estimates):
            raise ValueError(f"got {len(index)} profiles and {len(estimates)} rows of values; pass one row each")
        if len(index) and (np.any(index < 0) or np.any(index >= np.asarray(self.shape))):
            raise ValueError(f"a profile in {index.tolist()} lies outside the meta-game of shape {self.shape}")
        if not np.all(np.isfinite(estimates)):
            raise ValueError("meta-game payoffs must be finite; an episode returned NaN or inf")
        for player, payoff in enumerate(self.payoffs):
            payoff[tuple(index.T)] = estimates[:, player]
        if self.symmetric:
            self._symmetrise()

    def _symmetrise(self) -> None:
        row, column = self.payoffs
        mirrored = np.where(np.isnan(column.T), row, column.T)
        mean = np.where(np.isnan(row), mirrored, (row + mirrored) / 2)
        self.payoffs = [mean, mean.T.copy()]

    def solve(self, solver: MetaSolver) -> list[np.ndarray]:
        """The meta-strategies the solver returns; symmetric games give both seats the first seat's strategy.

        Raises:
            ValueError: from the solver, e.g. for a NaN entry.
        """
        strategies = solver(self.payoffs)
        if self.symmetric:
            strategies = [strategies[0], strategies[0].copy()]
        return strategies

    def nash_conv(self, strategies: Sequence[np.ndarray]) -> float:
        """NashConv of meta-strategies in this meta-game; shorter strategies are padded with zeros.

        Padding lets a past iteration's meta-strategy be measured in today's larger game: its NashConv there is
        the total gain the new policies offer against it.
        """
        padded = []
        for strategy, size in zip(strategies, self.shape):
            vector = np.zeros(size)
            vector[: len(strategy)] = strategy
            padded.append(vector)
        return matrix_nash_conv(self.payoffs, padded)

    def state_dict(self) -> dict[str, Any]:
        """Plain arrays and flags, for saving."""
        return {
            "num_players": self.num_players,
            "symmetric": self.symmetric,
            "payoffs": [p.copy() for p in self.payoffs],
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> MetaGame:
        """Rebuilds a meta-game saved by :meth:`state_dict`."""
        game = cls(int(state["num_players"]), bool(state["symmetric"]))
        game.payoffs = [np.asarray(p, dtype=np.float64).copy() for p in state["payoffs"]]
        return game

    def __repr__(self) -> str:
        return f"MetaGame(shape={self.shape}, missing={len(self.missing_profiles())}, symmetric={self.symmetric})"
