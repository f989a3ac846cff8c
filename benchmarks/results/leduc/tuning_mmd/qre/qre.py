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


def conditional_values(game: OpenSpielGame, tables: list[np.ndarray], player: int) -> np.ndarray:
    """``[S, A]``: each action's expected return for ``player`` given its information state is reached."""
    terminals = game._terminals
    others = terminals["chance"].copy()
    for other in range(game.num_players):
        if other != player:
            others *= game._realisation(tables[other][None], other)[0]
    rows, actions = terminals["rows"][player], terminals["actions"][player]
    decided = rows >= 0
    shape = game._legal[player].shape
    value, mass = np.zeros(shape), np.zeros(shape)
    np.add.at(value, (rows[decided], actions[decided]), (others * terminals["returns"][:, player])[decided])
    np.add.at(mass, (rows[decided], actions[decided]), others[decided])
    previous, previous_action, table = game._previous[player], game._previous_action[player], tables[player]
    for level in reversed(game._levels[player]):  # a state's value flows into the action that led to it
        np.add.at(value, (previous[level], previous_action[level]), (table[level] * value[level]).sum(1))
        np.add.at(mass, (previous[level], previous_action[level]), (table[level] * mass[level]).sum(1))
    reached = mass.max(1, keepdims=True)  # the others' and chance's probability of reaching the state
    return np.where(reached > 0, value / np.maximum(reached, 1e-300), 0.0)


def others_reach(game: OpenSpielGame, profile: list[np.ndarray], player: int) -> np.ndarray:
    """``[S]``: the probability that chance and the other players bring the game to each of ``player``'s states."""
    terminals = game._terminals
    others = terminals["chance"].copy()
    for other in range(game.num_players):
        if other != player:
            others *= game._realisation(profile[other][None], other)[0]
    rows, actions = terminals["rows"][player], terminals["actions"][player]
    decided = rows >= 0
    mass = np.zeros(game._legal[player].shape)
    np.add.at(mass, (rows[decided], actions[decided]), others[decided])
    previous, previous_action, table = game._previous[player], game._previous_action[player], profile[player]
    for level in reversed(game._levels[player]):
        np.add.at(mass, (previous[level], previous_action[level]), (table[level] * mass[level]).sum(1))
    return mass.max(1)


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
