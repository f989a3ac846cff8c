"""Exploitability of the uniform magnet's regularised equilibrium (an agent quantal response equilibrium), tabular.

MMD self-play with a uniform magnet and a fixed α converges (at best) to the profile where every information state
plays ``π(a) ∝ exp(Q(a) / α)``, with ``Q`` the expected return of each action given the state is reached (the
fixed point of the surrogate plus α·KL(π ‖ uniform), both weighted by how often the state is visited). This script
finds that profile by tabular MMD with exact values (step ``η``, ``iters`` updates; the same run with half the
updates is printed beside it, to show it has converged) and prints OpenSpiel's NashConv / 2 of it:

    python benchmarks/results/leduc/tuning_mmd/qre/qre.py leduc_poker 0.05 6000 1.0 0.5 0.3 0.2
    python benchmarks/results/leduc/tuning_mmd/qre/qre.py kuhn_poker 0.5 3000 1.0 0.5 0.2 0.1
"""

import sys

import numpy as np

from marljoint.best_response.openspiel_game import OpenSpielGame


def _others(game: OpenSpielGame, tables: list[np.ndarray], player: int) -> np.ndarray:
    """``[Z]``: chance's and the other players' probability of every terminal history."""
    others = game._terminals["chance"].copy()
    for other in range(game.num_players):
        if other != player:
            others *= game._realisation(tables[other][None], other)[0]
    return others


def _up(game: OpenSpielGame, tables: list[np.ndarray], player: int, weight: np.ndarray) -> np.ndarray:
    """``[S, A]``: ``weight`` summed over the terminal histories below each (state, action) of ``player``, its own
    later moves weighted by its table."""
    legal = game._legal[player]
    size, width = legal.shape
    sequences = game._terminals["sequences"][player]
    out = np.bincount(sequences, weights=weight, minlength=size * width + 1)[:-1].reshape(size, width)
    previous, previous_action, table = game._previous[player], game._previous_action[player], tables[player]
    for level in reversed(game._levels[player]):  # a state's sum flows into the action that led to it
        np.add.at(out, (previous[level], previous_action[level]), (table[level] * out[level]).sum(1))
    return out


def conditional_values(game: OpenSpielGame, tables: list[np.ndarray], player: int) -> np.ndarray:
    """``[S, A]``: each action's expected return for ``player`` given its information state is reached."""
    others = _others(game, tables, player)
    value = _up(game, tables, player, others * game._terminals["returns"][:, player])
    reached = _up(game, tables, player, others).max(1, keepdims=True)  # the others' and chance's reach
    return np.where(reached > 0, value / np.maximum(reached, 1e-300), 0.0)


def regularised_equilibrium(game: OpenSpielGame, alpha: float, eta: float, iters: int) -> list[np.ndarray]:
    """Tabular MMD with a uniform magnet: ``π ← softmax((log π + η·Q) / (1 + η·α))`` for both players at once."""
    legal = [game._legal[p] for p in range(game.num_players)]
    tables = [mask / mask.sum(1, keepdims=True) for mask in (m.astype(float) for m in legal)]
    for _ in range(iters):
        updated = []
        for player in range(game.num_players):
            q = conditional_values(game, tables, player)
            logits = (np.log(np.maximum(tables[player], 1e-300)) + eta * q) / (1 + eta * alpha)
            logits = np.where(legal[player], logits, -np.inf)
            weights = np.exp(logits - logits.max(1, keepdims=True))
            updated.append(weights / weights.sum(1, keepdims=True))
        tables = updated
    return tables


def main() -> None:
    name, eta, iters = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    game = OpenSpielGame(name)
    for alpha in map(float, sys.argv[4:]):
        full = game.nash_conv(regularised_equilibrium(game, alpha, eta, iters)) / game.num_players
        half = game.nash_conv(regularised_equilibrium(game, alpha, eta, iters // 2)) / game.num_players
        print(f"{name} alpha={alpha} eta={eta} exploitability={full:.4f} (after {iters // 2} updates: {half:.4f})")


if __name__ == "__main__":
    main()
