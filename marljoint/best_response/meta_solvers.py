"""Meta-solvers: from an empirical meta-game to one mixed strategy per player.

Every meta-solver is a pure function with one signature::

    solver(payoffs: list[np.ndarray]) -> list[np.ndarray]

``payoffs`` holds one array per player, each of shape ``[n_1, ..., n_P]`` and indexed by every player's
population index (``payoffs[p][i_1, ..., i_P]`` is player ``p``'s expected return when player ``q`` plays its
policy ``i_q``). The result holds one mixed strategy per player, player ``p``'s of shape ``[n_p]``: float64,
non-negative, summing to 1. Every entry of the meta-game must be filled in: a NaN (an entry not simulated yet)
raises ``ValueError``.

Solvers with settings take them as keyword arguments with defaults; bind custom ones with
:func:`functools.partial`, e.g. ``functools.partial(prd, iterations=50_000)``. Solvers use no randomness.

================== ======= ==================================================================================
name               players what it returns
================== ======= ==================================================================================
``uniform``        any     uniform over each population
``fictitious_play`` any    the same as ``uniform`` (PSRO's name for it, see :func:`fictitious_play`)
``nash``           2       an exact Nash equilibrium (LP when constant-sum, Lemke–Howson otherwise)
``prd``            any     projected replicator dynamics, time-averaged
``regret_matching`` any    the average strategy of regret matching in self-play
================== ======= ==================================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from marljoint.best_response.matrix import (
    action_values,
    is_constant_sum,
    lemke_howson,
    validate_payoffs,
    zero_sum_nash,
)

__all__ = [
    "MetaSolver",
    "META_SOLVERS",
    "get_meta_solver",
    "uniform",
    "fictitious_play",
    "nash",
    "prd",
    "regret_matching",
    "project_to_simplex",
]

MetaSolver = Callable[[list[np.ndarray]], list[np.ndarray]]


def uniform(payoffs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Uniform distribution over every player's population.

    Args:
        payoffs: one array per player, each of shape ``[n_1, ..., n_P]``.

    Returns:
        ``P`` vectors, player ``p``'s of shape ``[n_p]`` with every entry ``1 / n_p``.

    Raises:
        ValueError: an ill-formed game, or a NaN/infinite entry.
    """
    arrays = validate_payoffs(payoffs)
    return [np.full(size, 1.0 / size) for size in arrays[0].shape]


def fictitious_play(payoffs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """PSRO's "fictitious play" meta-solver: uniform over every player's population.

    In PSRO each new policy is a best response to the meta-strategy of the opponents; when that meta-strategy
    is uniform over the policies found so far, the opponent is exactly the empirical average of all past best
    responses, which is fictitious play (Lanctot et al., 2017; PSRO with this solver is also called fictitious
    self-play). As a function of the meta-game it is therefore :func:`uniform`; the name is kept because PSRO
    code and papers use it.

    Args:
        payoffs: one array per player, each of shape ``[n_1, ..., n_P]``.

    Returns:
        ``P`` vectors, player ``p``'s of shape ``[n_p]`` with every entry ``1 / n_p``.

    Raises:
        ValueError: an ill-formed game, or a NaN/infinite entry.
    """
    return uniform(payoffs)


def nash(payoffs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """An exact Nash equilibrium of a two-player meta-game.

    A constant-sum game (zero-sum included: ``payoffs[0] + payoffs[1]`` equal to one value everywhere, to 1e-9
    of the payoff scale) is solved by linear programming (each player's maximin strategy, scipy's HiGHS); any
    other two-player game by Lemke–Howson (:func:`~marljoint.best_response.matrix.lemke_howson`), which
    returns one equilibrium of possibly several.

    Args:
        payoffs: two arrays, each of shape ``[n_1, n_2]``.

    Returns:
        ``[strategy_0 [n_1], strategy_1 [n_2]]``.

    Raises:
        ValueError: not exactly two players (use :func:`prd` or :func:`regret_matching`), an ill-formed game,
            or a NaN/infinite entry.
    """
    arrays = validate_payoffs(payoffs)
    if len(arrays) != 2:
        raise ValueError(
            f"nash solves two-player meta-games exactly but got {len(arrays)} players; use 'prd' (projected "
            "replicator dynamics) or 'regret_matching' for games of any number of players"
        )
    payoff_row, payoff_col = arrays
    if is_constant_sum(payoff_row, payoff_col):
        row_strategy, col_strategy, _ = zero_sum_nash(payoff_row)
    else:
        row_strategy, col_strategy = lemke_howson(payoff_row, payoff_col)
    return [row_strategy, col_strategy]


def project_to_simplex(vector: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """Euclidean projection onto ``{x : x_i >= floor, sum(x) = 1}``.

    Args:
        vector: shape ``[n]``.
        floor: lower bound of every entry, with ``0 <= floor * n <= 1``.

    Returns:
        The nearest point of that set, shape ``[n]``.
    """
    size = vector.shape[0]
    radius = 1.0 - floor * size
    shifted = vector - floor
    # Sort-based projection onto {z >= 0, sum(z) = radius} (Held, Wolfe and Crowder, 1974).
    descending = np.sort(shifted)[::-1]
    cumulative = np.cumsum(descending) - radius
    positive = descending - cumulative / np.arange(1, size + 1) > 0
    count = int(np.flatnonzero(positive)[-1]) + 1
    threshold = cumulative[count - 1] / count
    return np.maximum(shifted - threshold, 0.0) + floor


def _normalise_ranges(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Each player's payoffs divided by its payoff range: equilibria unchanged, step sizes scale-free."""
    normalised = []
    for payoff in arrays:
        spread = float(np.ptp(payoff))
        normalised.append(payoff / spread if spread > 0 else np.zeros_like(payoff))
    return normalised


def _all_action_values(arrays: list[np.ndarray], strategies: list[np.ndarray]) -> list[np.ndarray]:
    """Every player's action values against the others' current strategies (a fast path for two players)."""
    if len(arrays) == 2:
        return [arrays[0] @ strategies[1], strategies[0] @ arrays[1]]
    return [action_values(payoff, strategies, player) for player, payoff in enumerate(arrays)]


def _replicator_step(strategy: np.ndarray, values: np.ndarray, step_size: float, floor: float) -> np.ndarray:
    stepped = strategy + step_size * strategy * (values - strategy @ values)
    # The replicator step keeps the sum at 1: projecting is only needed when an entry falls below the floor.
    if stepped.min() >= floor:
        return stepped / stepped.sum()
    return project_to_simplex(stepped, floor)


def _check_iterations(iterations: int) -> None:
    if not isinstance(iterations, (int, np.integer)) or isinstance(iterations, bool) or iterations < 1:
        raise ValueError(f"iterations={iterations!r}; pass a positive integer")


def prd(
    payoffs: Sequence[np.ndarray],
    *,
    iterations: int = 10_000,
    step_size: float = 0.05,
    gamma: float = 1e-6,
    average_over_last: int | None = None,
) -> list[np.ndarray]:
    """Projected replicator dynamics (Lanctot et al., 2017, "A Unified Game-Theoretic Approach to MARL").

    From uniform strategies, every player simultaneously takes Euler steps of the replicator dynamics,
    ``x_p <- Proj(x_p + step_size * x_p * (u_p - x_p . u_p))``, where ``u_p`` holds the expected payoff of
    each of ``p``'s strategies against the others' current strategies, and ``Proj`` is the Euclidean
    projection onto the simplex whose every entry is at least ``gamma / n_p`` (the exploration floor that
    keeps every strategy alive). Each player's payoffs are first divided by that player's payoff range, so
    ``step_size`` does not depend on the payoff scale. The result is the average of the last
    ``average_over_last`` iterates: the replicator dynamics cycle around interior equilibria of zero-sum
    games, and it is their time average that approaches the equilibrium.

    Args:
        payoffs: one array per player, each of shape ``[n_1, ..., n_P]``.
        iterations: number of Euler steps.
        step_size: Euler step, in units of the payoff range.
        gamma: exploration floor, in ``[0, 1)``; every returned probability is at least ``gamma / n_p``.
        average_over_last: how many final iterates to average; ``None`` averages all of them.

    Returns:
        ``P`` vectors, player ``p``'s of shape ``[n_p]``.

    Raises:
        ValueError: an ill-formed game, a NaN/infinite entry, or a setting out of range.
    """
    arrays = _normalise_ranges(validate_payoffs(payoffs))
    _check_iterations(iterations)
    if not step_size > 0:
        raise ValueError(f"step_size={step_size!r}; pass a positive step size (for example 0.05)")
    if not 0 <= gamma < 1:
        raise ValueError(f"gamma={gamma!r}; the exploration floor must lie in [0, 1) (for example 1e-6)")
    if average_over_last is None:
        average_over_last = iterations
    if not isinstance(average_over_last, (int, np.integer)) or not 1 <= average_over_last <= iterations:
        raise ValueError(
            f"average_over_last={average_over_last!r}; pass an integer in [1, iterations={iterations}] or None"
        )
    strategies = [np.full(size, 1.0 / size) for size in arrays[0].shape]
    floors = [gamma / size for size in arrays[0].shape]
    totals = [np.zeros(size) for size in arrays[0].shape]
    first_averaged = iterations - average_over_last
    for iteration in range(iterations):
        values = _all_action_values(arrays, strategies)
        strategies = [
            _replicator_step(strategy, value, step_size, floor)
            for strategy, value, floor in zip(strategies, values, floors)
        ]
        if iteration >= first_averaged:
            for total, strategy in zip(totals, strategies):
                total += strategy
    return [total / total.sum() for total in totals]


def regret_matching(
    payoffs: Sequence[np.ndarray], *, iterations: int = 10_000, refine: bool = True
) -> list[np.ndarray]:
    """The average strategy of regret matching in self-play (Hart and Mas-Colell, 2000), optionally refined.

    From uniform strategies, every player simultaneously accumulates, for each of its strategies, the regret
    ``u_p[i] - x_p . u_p`` against the others' current strategies, and next plays its positive regrets
    normalised (uniform when none is positive). The result is each player's uniform average over all iterates;
    in two-player zero-sum games it converges to a Nash equilibrium at rate ``O(1 / sqrt(iterations))``. In
    other games only the average joint play converges (to a coarse correlated equilibrium); the per-player
    averages need not form a Nash equilibrium.

    With ``refine`` (the default), three candidates are compared by their exact NashConv in ``payoffs`` and the
    smallest wins: the average strategy, the last iterate, and the pure profile reached by best-response dynamics
    (players in turn switch to a strictly better pure strategy, at most 100 rounds) from each player's most played
    strategy. In games with common or aligned interests, such as cooperative meta-games, best-response dynamics
    reach a pure Nash equilibrium, which the average of regret matching only approaches. The result is never
    worse than the average alone.

    Args:
        payoffs: one array per player, each of shape ``[n_1, ..., n_P]``.
        iterations: number of regret-matching steps.
        refine: compare the average with the last iterate and a best-response-dynamics profile (see above).

    Returns:
        ``P`` vectors, player ``p``'s of shape ``[n_p]``.

    Raises:
        ValueError: an ill-formed game, a NaN/infinite entry, or ``iterations`` not a positive integer.
    """
    arrays = validate_payoffs(payoffs)
    _check_iterations(iterations)
    strategies = [np.full(size, 1.0 / size) for size in arrays[0].shape]
    regrets = [np.zeros(size) for size in arrays[0].shape]
    totals = [np.zeros(size) for size in arrays[0].shape]
    for _ in range(iterations):
        for total, strategy in zip(totals, strategies):
            total += strategy
        values = _all_action_values(arrays, strategies)
        for regret, strategy, value in zip(regrets, strategies, values):
            regret += value - strategy @ value
        strategies = []
        for regret in regrets:
            positive = np.maximum(regret, 0.0)
            mass = positive.sum()
            strategies.append(positive / mass if mass > 0 else np.full(regret.shape[0], 1.0 / regret.shape[0]))
    average = [total / total.sum() for total in totals]
    if not refine:
        return average
    candidates = [average, strategies, _best_response_dynamics(arrays, [int(np.argmax(a)) for a in average])]
    return min(candidates, key=lambda profile: _nash_conv(arrays, profile))


def _nash_conv(arrays: list[np.ndarray], strategies: list[np.ndarray]) -> float:
    values = _all_action_values(arrays, strategies)
    return float(sum(value.max() - strategy @ value for value, strategy in zip(values, strategies)))


def _best_response_dynamics(arrays: list[np.ndarray], profile: list[int], rounds: int = 100) -> list[np.ndarray]:
    """Players in turn switch to a strictly better pure strategy until none can (or ``rounds`` pass)."""
    profile = list(profile)
    for _ in range(rounds):
        changed = False
        for player, payoff in enumerate(arrays):
            index = tuple(slice(None) if p == player else profile[p] for p in range(len(arrays)))
            values = payoff[index]
            best = int(np.argmax(values))
            if values[best] > values[profile[player]] + 1e-12 * max(1.0, abs(values[best])):
                profile[player] = best
                changed = True
        if not changed:
            break
    return [np.eye(size)[choice] for size, choice in zip(arrays[0].shape, profile)]


META_SOLVERS: dict[str, MetaSolver] = {
    "uniform": uniform,
    "fictitious_play": fictitious_play,
    "nash": nash,
    "prd": prd,
    "regret_matching": regret_matching,
}
"""Meta-solver name → pure function ``solver(payoffs) -> strategies``."""


def get_meta_solver(name: str) -> MetaSolver:
    """The meta-solver registered under ``name`` in :data:`META_SOLVERS`.

    Args:
        name: one of ``META_SOLVERS``' keys.

    Returns:
        The solver function.

    Raises:
        ValueError: an unknown name; the message lists the known ones.
    """
    if name not in META_SOLVERS:
        raise ValueError(f"unknown meta-solver {name!r}; choose one of {sorted(META_SOLVERS)}")
    return META_SOLVERS[name]
