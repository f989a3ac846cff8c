"""The average policy of a sequence of tabulated policies: the sequence-form (reach-weighted) average.

Self-play algorithms with a no-regret guarantee (MMD, CFR, fictitious play) bound the exploitability of the
*average* of their iterates, not of the last one. In an extensive-form game the average of behaviour policies π_t
with weights w_t is the behaviour policy of playing π_t with probability ∝ w_t for a whole episode; by Kuhn's
theorem it plays, at information set I of player p,

    π̄(I, a) = Σ_t w_t · r_t(I) · π_t(I, a)  /  Σ_t w_t · r_t(I)

where r_t(I) is player p's own probability under π_t of reaching I (:meth:`KnownGame.reach
<marljoint.best_response.games.KnownGame.reach>`). A plain average of the tables is wrong wherever the iterates
reach I with different probabilities. :class:`PolicyAverage` accumulates the two sums one table at a time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from marljoint.best_response.games import KnownGame

__all__ = ["PolicyAverage"]


class PolicyAverage:
    """The running reach-weighted average of one table per player of a known game (see the module docstring).

    Example:
        >>> from marljoint.best_response import MatrixGame
        >>> game = MatrixGame([np.eye(2), -np.eye(2)])
        >>> average = PolicyAverage(game)
        >>> average.add([np.array([1.0, 0.0]), np.array([0.5, 0.5])], weight=1.0)
        >>> average.add([np.array([0.0, 1.0]), np.array([0.5, 0.5])], weight=3.0)
        >>> average.tables()[0].tolist()
        [0.25, 0.75]

    Args:
        game: the game whose tables are averaged (its :meth:`~KnownGame.check_table` and
            :meth:`~KnownGame.reach`).
    """

    def __init__(self, game: KnownGame) -> None:
        self.game = game
        self._numerators: list[np.ndarray] | None = None
        self._denominators: list[np.ndarray] | None = None
        self._last: list[np.ndarray] | None = None
        self.total_weight = 0.0
        """The sum of the weights added so far."""
        self.count = 0
        """The tables added so far (per player)."""

    def add(self, tables: Sequence[np.ndarray], weight: float) -> None:
        """Adds one table per player with ``weight``: Σ w·reach(I)·π(I, ·) and Σ w·reach(I) grow per player.

        Args:
            tables: one table per player (``[S_p, A]``; ``[n_p]`` for a matrix game), checked by the game.
            weight: w > 0, finite.

        Raises:
            ValueError: not one table per player, a table the game refuses (shape, entries), or a weight that
                is not a finite number > 0.
        """
        if len(tables) != self.game.num_players:
            raise ValueError(
                f"got {len(tables)} tables for {self.game.name}, which has {self.game.num_players} players; pass "
                "one table per player"
            )
        if isinstance(weight, bool) or not isinstance(weight, (int, float, np.number)) or not math.isfinite(weight):
            raise ValueError(f"weight must be a finite number > 0, got {weight!r}; e.g. weight=iteration")
        if weight <= 0:
            raise ValueError(f"weight must be a finite number > 0, got {weight!r}; e.g. weight=iteration")
        checked = [self.game.check_table(table, player) for player, table in enumerate(tables)]
        rows = [_rows(table) for table in checked]
        reach = [self.game.reach([table], player)[0] for player, table in enumerate(checked)]  # [S_p] each
        if self._numerators is None or self._denominators is None:
            self._numerators = [np.zeros_like(r) for r in rows]
            self._denominators = [np.zeros(len(r)) for r in rows]
        for player, (row, r) in enumerate(zip(rows, reach)):
            self._numerators[player] += float(weight) * r[:, None] * row
            self._denominators[player] += float(weight) * r
        self._last = checked
        self.total_weight += float(weight)
        self.count += 1

    def tables(self) -> list[np.ndarray]:
        """The average behaviour policy, one table per player in the game's table shape.

        An information set that no added table reaches (its summed reach is 0) plays the row of the last added
        table there: a row that is never played on the way to any outcome, so any choice gives the same values.

        Raises:
            ValueError: nothing added yet.
        """
        if self._numerators is None or self._denominators is None or self._last is None:
            raise ValueError("the average is empty; add() at least one table per player first")
        out = []
        for player, (numerator, denominator, last) in enumerate(zip(self._numerators, self._denominators, self._last)):
            reached = denominator > 0
            safe = np.where(reached, denominator, 1.0)[:, None]
            rows = np.where(reached[:, None], numerator / safe, _rows(last))
            out.append(self.game.check_table(rows.reshape(np.shape(last)), player))
        return out

    def state_dict(self) -> dict[str, Any]:
        """The sums, the last tables, the total weight and the count (numpy arrays and numbers: a checkpoint)."""
        return {
            "numerators": None if self._numerators is None else [a.copy() for a in self._numerators],
            "denominators": None if self._denominators is None else [a.copy() for a in self._denominators],
            "last": None if self._last is None else [a.copy() for a in self._last],
            "total_weight": self.total_weight,
            "count": self.count,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` exactly.

        Raises:
            ValueError: a state of another game (other players or table shapes).
        """
        parts = [state["numerators"], state["denominators"], state["last"]]
        if any(part is None for part in parts):
            self._numerators = self._denominators = self._last = None
        else:
            numerators, denominators, last = ([np.array(a, dtype=np.float64) for a in part] for part in parts)
            if not len(numerators) == len(denominators) == len(last) == self.game.num_players:
                raise ValueError(
                    f"the saved average has {len(numerators)} players, {self.game.name} has {self.game.num_players}"
                )
            for player, table in enumerate(last):
                self.game.check_table(table, player)
                if numerators[player].shape != _rows(table).shape:
                    raise ValueError(
                        f"the saved average of player {player} has shape {numerators[player].shape}, expected "
                        f"{_rows(table).shape} for {self.game.name}"
                    )
            self._numerators, self._denominators, self._last = numerators, denominators, last
        self.total_weight = float(state["total_weight"])
        self.count = int(state["count"])

    def __repr__(self) -> str:
        return f"PolicyAverage({self.game.name!r}, count={self.count}, total_weight={self.total_weight:g})"


def _rows(table: np.ndarray) -> np.ndarray:
    """``[S_p, A]``: a checked table as one row per information set (a matrix game's ``[n_p]`` is one row)."""
    return np.atleast_2d(np.asarray(table, dtype=np.float64))
