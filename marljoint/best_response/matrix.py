"""Normal-form (matrix) games: validation, expected action values, and exact two-player Nash solvers.

A game of ``P`` players is a list of ``P`` payoff arrays, one per player, each of shape ``[n_1, ..., n_P]``
and indexed by every player's pure-strategy index (in PSRO: the index of a policy in that player's
population). ``payoffs[p][i_1, ..., i_P]`` is what player ``p`` receives when player ``q`` plays its strategy
``i_q``. A mixed strategy of player ``p`` is a float64 vector of shape ``[n_p]``, non-negative, summing to 1.

The two exact solvers are :func:`zero_sum_nash` (a linear program, for constant-sum games) and
:func:`lemke_howson` (complementary pivoting with a lexicographic ratio test, for any bimatrix game,
degenerate ones included).
"""

from __future__ import annotations

import string
from collections.abc import Sequence

import numpy as np
from scipy.optimize import linprog

__all__ = [
    "validate_payoffs",
    "validate_strategies",
    "action_values",
    "is_constant_sum",
    "zero_sum_nash",
    "lemke_howson",
]

_PROBABILITY_ATOL = 1e-6


def validate_payoffs(payoffs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Check a normal-form game and return its payoff arrays as float64.

    Args:
        payoffs: one array per player, each of shape ``[n_1, ..., n_P]`` with ``P = len(payoffs)``.

    Returns:
        The ``P`` payoff arrays as float64 arrays (copies only where a conversion was needed).

    Raises:
        ValueError: no players; an array whose number of dimensions is not the number of players; arrays of
            different shapes; a player with no strategy; a NaN or infinite entry (an unfilled entry).
    """
    if isinstance(payoffs, np.ndarray):
        raise ValueError(
            f"payoffs must be a list of one array per player, got a single array of shape {payoffs.shape}; "
            "pass [payoffs_player_0, payoffs_player_1, ...]"
        )
    arrays = [np.asarray(payoff, dtype=np.float64) for payoff in payoffs]
    num_players = len(arrays)
    if num_players == 0:
        raise ValueError("payoffs is empty; pass one payoff array per player")
    shape = arrays[0].shape
    for player, payoff in enumerate(arrays):
        if payoff.ndim != num_players:
            raise ValueError(
                f"payoffs[{player}] has {payoff.ndim} dimensions (shape {payoff.shape}) but there are "
                f"{num_players} players; each payoff array needs one axis per player, shape [n_1, ..., n_P]"
            )
        if payoff.shape != shape:
            raise ValueError(
                f"payoffs[{player}] has shape {payoff.shape} but payoffs[0] has shape {shape}; every "
                "player's array must be indexed by the same strategy profiles"
            )
        if not np.all(np.isfinite(payoff)):
            bad = tuple(int(i) for i in np.argwhere(~np.isfinite(payoff))[0])
            raise ValueError(
                f"payoffs[{player}] holds {payoff[bad]} at index {bad}; every entry of the game must be a "
                "finite number: simulate (fill in) the missing meta-game entries before solving it"
            )
    if 0 in shape:
        raise ValueError(f"payoffs have shape {shape}; every player needs at least one strategy")
    return arrays


def validate_strategies(strategies: Sequence[np.ndarray], shape: tuple[int, ...]) -> list[np.ndarray]:
    """Check one mixed strategy per player against a game's shape and return them as float64.

    Args:
        strategies: one vector per player, player ``p``'s of shape ``[n_p]``.
        shape: the game's shape ``[n_1, ..., n_P]``.

    Returns:
        The strategies as float64 vectors.

    Raises:
        ValueError: the wrong number of strategies, a wrong length, a negative or non-finite entry, or a
            vector whose sum is not 1 (within 1e-6).
    """
    if len(strategies) != len(shape):
        raise ValueError(
            f"got {len(strategies)} strategies for a game of {len(shape)} players; pass one mixed strategy per player"
        )
    result = []
    for player, (strategy, size) in enumerate(zip(strategies, shape)):
        vector = np.asarray(strategy, dtype=np.float64)
        if vector.shape != (size,):
            raise ValueError(
                f"strategies[{player}] has shape {vector.shape}; player {player} has {size} strategies, so "
                f"pass a vector of shape ({size},)"
            )
        if not np.all(np.isfinite(vector)) or np.any(vector < 0):
            raise ValueError(
                f"strategies[{player}] = {vector} has a negative or non-finite entry; a mixed strategy holds "
                "probabilities"
            )
        if abs(vector.sum() - 1.0) > _PROBABILITY_ATOL:
            raise ValueError(
                f"strategies[{player}] sums to {vector.sum()}; a mixed strategy must sum to 1: divide it by its sum"
            )
        result.append(vector)
    return result


def action_values(payoff: np.ndarray, strategies: Sequence[np.ndarray], player: int) -> np.ndarray:
    """Expected payoff of each pure strategy of ``player`` when every other player mixes as given.

    Args:
        payoff: one payoff array of shape ``[n_1, ..., n_P]`` (usually ``payoffs[player]``).
        strategies: one mixed strategy per player, player ``q``'s of shape ``[n_q]``; ``strategies[player]``
            is ignored.
        player: whose pure strategies to evaluate.

    Returns:
        Array of shape ``[n_player]``.
    """
    payoff = np.asarray(payoff, dtype=np.float64)
    axes = string.ascii_letters[: payoff.ndim]
    others = [other for other in range(payoff.ndim) if other != player]
    subscripts = ",".join([axes, *(axes[other] for other in others)]) + "->" + axes[player]
    return np.einsum(subscripts, payoff, *(strategies[other] for other in others))


def is_constant_sum(payoff_row: np.ndarray, payoff_col: np.ndarray, rtol: float = 1e-9) -> bool:
    """Whether a two-player game is constant-sum (zero-sum included): ``payoff_row + payoff_col`` is constant.

    Args:
        payoff_row: the row player's payoffs, shape ``[n, m]``.
        payoff_col: the column player's payoffs, shape ``[n, m]``.
        rtol: tolerance relative to the largest absolute payoff (at least 1).

    Returns:
        True when every entry of the sum lies within ``rtol * scale`` of its first entry.
    """
    total = np.asarray(payoff_row, dtype=np.float64) + np.asarray(payoff_col, dtype=np.float64)
    scale = max(1.0, float(np.max(np.abs(payoff_row))), float(np.max(np.abs(payoff_col))))
    return bool(np.all(np.abs(total - total.flat[0]) <= rtol * scale))


def _maximin(payoff: np.ndarray) -> tuple[np.ndarray, float]:
    """The row player's maximin strategy and value of the zero-sum game ``payoff`` (shape ``[n, m]``)."""
    num_rows, num_cols = payoff.shape
    # Variables (x_1..x_n, v): maximise v subject to (x^T payoff)_j >= v for every column j,
    # sum(x) = 1 and x >= 0.
    objective = np.zeros(num_rows + 1)
    objective[-1] = -1.0
    upper_lhs = np.hstack([-payoff.T, np.ones((num_cols, 1))])
    equality_lhs = np.hstack([np.ones((1, num_rows)), np.zeros((1, 1))])
    result = linprog(
        objective,
        A_ub=upper_lhs,
        b_ub=np.zeros(num_cols),
        A_eq=equality_lhs,
        b_eq=np.ones(1),
        bounds=[(0.0, None)] * num_rows + [(None, None)],
        method="highs",
    )
    if result.status != 0:
        raise RuntimeError(f"the zero-sum linear program failed: {result.message}")
    strategy = np.clip(result.x[:num_rows], 0.0, None)
    return strategy / strategy.sum(), float(result.x[-1])


def zero_sum_nash(payoff_row: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Exact Nash equilibrium of a two-player zero-sum game by linear programming (scipy's HiGHS).

    Each player's equilibrium strategy is its maximin strategy; a constant-sum game is solved by passing the
    row player's payoffs, since adding a constant to the column player's payoffs changes no equilibrium.

    Args:
        payoff_row: the row player's payoffs, shape ``[n, m]``; the column player receives ``-payoff_row``.

    Returns:
        ``(row_strategy [n], col_strategy [m], value)``, ``value`` being the row player's equilibrium payoff.
    """
    payoff = np.asarray(payoff_row, dtype=np.float64)
    row_strategy, value = _maximin(payoff)
    col_strategy, _ = _maximin(-payoff.T)
    return row_strategy, col_strategy, value


def _lexicographic_min_ratio(tableau: np.ndarray, column: int, basis_columns: np.ndarray, tol: float) -> int:
    """Row leaving the basis as ``column`` enters: the lexicographic minimum of [rhs, B^-1] / pivot entry."""
    candidates = np.flatnonzero(tableau[:, column] > tol)
    if candidates.size == 0:
        raise RuntimeError("Lemke-Howson found an unbounded ray; the payoffs were not shifted to be positive")
    keys = np.hstack([tableau[candidates, -1:], tableau[candidates][:, basis_columns]])
    keys /= tableau[candidates, column][:, None]
    # Compare key columns one at a time; rows of B^-1 are independent, so exactly one candidate survives.
    for key_column in range(keys.shape[1]):
        key = keys[:, key_column]
        smallest = key.min()
        keep = key <= smallest + tol * max(1.0, abs(smallest))
        candidates, keys = candidates[keep], keys[keep]
        if candidates.size == 1:
            break
    return int(candidates[0])


def _pivot(tableau: np.ndarray, row: int, column: int) -> None:
    tableau[row] /= tableau[row, column]
    factors = tableau[:, column].copy()
    factors[row] = 0.0
    tableau -= np.outer(factors, tableau[row])


def _normalise_to_positive(payoff: np.ndarray) -> np.ndarray:
    """An affine, order-preserving rescaling into [1, 2]; it changes no equilibrium."""
    low, high = float(payoff.min()), float(payoff.max())
    if high - low == 0.0:
        return np.ones_like(payoff)
    return 1.0 + (payoff - low) / (high - low)


def _lemke_howson_path(
    payoff_row: np.ndarray, payoff_col: np.ndarray, initial_label: int
) -> tuple[np.ndarray, np.ndarray]:
    num_rows, num_cols = payoff_row.shape
    num_labels = num_rows + num_cols
    # Columns are indexed by label (label i < n: row strategy i; label n + j: column strategy j), then rhs.
    # Row tableau (polytope of y):  payoff_row y + r = 1, r_i carries label i, y_j carries label n + j.
    row_tableau = np.zeros((num_rows, num_labels + 1))
    row_tableau[:, :num_rows] = np.eye(num_rows)
    row_tableau[:, num_rows:num_labels] = _normalise_to_positive(payoff_row)
    row_tableau[:, -1] = 1.0
    # Column tableau (polytope of x):  payoff_col^T x + s = 1, x_i carries label i, s_j carries label n + j.
    col_tableau = np.zeros((num_cols, num_labels + 1))
    col_tableau[:, :num_rows] = _normalise_to_positive(payoff_col).T
    col_tableau[:, num_rows:num_labels] = np.eye(num_cols)
    col_tableau[:, -1] = 1.0
    row_basis = np.arange(num_rows)
    col_basis = np.arange(num_rows, num_labels)
    row_slacks = np.arange(num_rows)
    col_slacks = np.arange(num_rows, num_labels)
    tol = 1e-11

    entering = initial_label
    # x_k enters the column tableau for a row label, y_k enters the row tableau for a column label.
    in_col_tableau = initial_label < num_rows
    for _ in range(50 * num_labels * num_labels + 100):
        if in_col_tableau:
            leaving_row = _lexicographic_min_ratio(col_tableau, entering, col_slacks, tol)
            _pivot(col_tableau, leaving_row, entering)
            leaving = int(col_basis[leaving_row])
            col_basis[leaving_row] = entering
        else:
            leaving_row = _lexicographic_min_ratio(row_tableau, entering, row_slacks, tol)
            _pivot(row_tableau, leaving_row, entering)
            leaving = int(row_basis[leaving_row])
            row_basis[leaving_row] = entering
        if leaving == initial_label:
            break
        entering = leaving
        in_col_tableau = not in_col_tableau
    else:
        raise RuntimeError("Lemke-Howson did not terminate; this is a bug, please report the payoffs")

    row_strategy = np.zeros(num_rows)
    for position, label in enumerate(col_basis):
        if label < num_rows:
            row_strategy[label] = col_tableau[position, -1]
    col_strategy = np.zeros(num_cols)
    for position, label in enumerate(row_basis):
        if label >= num_rows:
            col_strategy[label - num_rows] = row_tableau[position, -1]
    row_strategy = np.clip(row_strategy, 0.0, None)
    col_strategy = np.clip(col_strategy, 0.0, None)
    return row_strategy / row_strategy.sum(), col_strategy / col_strategy.sum()


def _bimatrix_nash_conv(
    payoff_row: np.ndarray, payoff_col: np.ndarray, row_strategy: np.ndarray, col_strategy: np.ndarray
) -> float:
    row_values = payoff_row @ col_strategy
    col_values = row_strategy @ payoff_col
    return float(row_values.max() - row_strategy @ row_values + col_values.max() - col_values @ col_strategy)


def lemke_howson(
    payoff_row: np.ndarray, payoff_col: np.ndarray, initial_label: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """A Nash equilibrium of a two-player general-sum game by the Lemke–Howson algorithm.

    Complementary pivoting on the two best-response polytopes (von Stengel, "Computing equilibria for
    two-person games", 2002), with the lexicographic minimum-ratio test, so degenerate games (ties, repeated
    strategies) terminate at an equilibrium too. Payoffs are first rescaled into [1, 2], which changes no
    equilibrium. The path starts by dropping ``initial_label`` (``i < n``: row strategy ``i``; ``n + j``:
    column strategy ``j``); should floating-point error leave that path's end short of an equilibrium
    (NashConv above 1e-9 times the payoff range), the other labels are tried in turn and the most accurate end
    point is returned.

    Args:
        payoff_row: the row player's payoffs, shape ``[n, m]``.
        payoff_col: the column player's payoffs, shape ``[n, m]``.
        initial_label: the label dropped first, in ``[0, n + m)``.

    Returns:
        ``(row_strategy [n], col_strategy [m])``.

    Raises:
        ValueError: payoffs of different or non-matrix shapes, or ``initial_label`` out of range.
    """
    payoff_row = np.asarray(payoff_row, dtype=np.float64)
    payoff_col = np.asarray(payoff_col, dtype=np.float64)
    if payoff_row.ndim != 2 or payoff_row.shape != payoff_col.shape:
        raise ValueError(
            f"payoff_row has shape {payoff_row.shape} and payoff_col has shape {payoff_col.shape}; pass two "
            "matrices of the same shape [n, m]"
        )
    num_labels = sum(payoff_row.shape)
    if not 0 <= initial_label < num_labels:
        raise ValueError(f"initial_label={initial_label} is out of range; pass a label in [0, {num_labels})")
    scale = max(float(np.ptp(payoff_row)), float(np.ptp(payoff_col)), 1e-300)
    best, best_conv = None, np.inf
    for offset in range(num_labels):
        label = (initial_label + offset) % num_labels
        strategies = _lemke_howson_path(payoff_row, payoff_col, label)
        conv = _bimatrix_nash_conv(payoff_row, payoff_col, *strategies)
        if conv < best_conv:
            best, best_conv = strategies, conv
        if conv <= 1e-9 * scale:
            break
    return best
