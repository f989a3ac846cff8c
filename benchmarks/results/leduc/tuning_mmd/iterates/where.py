"""Where the average policy of saved iterates (``dump.py``) is exploitable: its rows replaced by those of the
regularised equilibrium of α (``../qre/qre.py``) at the information states the opponent and chance reach with
probability below, or at least, a threshold.

    PYTHONPATH=.:envs python where.py ITERATES.npz 0.2

Like ``qre.py``, it reads OpenSpielGame's private tables (``_terminals``, ``_realisation``, ``_legal``,
``_previous``, ``_previous_action``, ``_levels``) to compute reach probabilities: a results script, not library code.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "qre"))
from qre import others_reach, regularised_equilibrium  # noqa: E402

from marljoint.run.registry import known_game  # noqa: E402

game, data, alpha = known_game("openspiel:leduc_poker"), np.load(sys.argv[1]), float(sys.argv[2])
players, count = game.num_players, len(np.load(sys.argv[1])["steps"])
tables = [data[f"p{p}"].astype(np.float64) for p in range(players)]
reach = [np.stack([game.reach([tables[p][t]], p)[0] for t in range(count)]) for p in range(players)]
weights = np.arange(1, count + 1, dtype=float)
average = []
for p in range(players):
    num, den = np.tensordot(weights, reach[p][..., None] * tables[p], 1), np.tensordot(weights, reach[p], 1)
    average.append(np.where(den[:, None] > 0, num / np.maximum(den[:, None], 1e-300), 1.0 / 3))


def exploitability(profile):
    return game.nash_conv(profile) / players


equilibrium = regularised_equilibrium(game, alpha, 0.05, 3000)
reached = [others_reach(game, average, p) for p in range(players)]
print(f"average {exploitability(average):.4f}, regularised equilibrium of {alpha}: {exploitability(equilibrium):.4f}")
for threshold in (1e-3, 3e-3, 1e-2, 3e-2):
    for below in (True, False):
        chosen = [(r < threshold) if below else (r >= threshold) for r in reached]
        patched = [np.where(chosen[p][:, None], equilibrium[p], average[p]) for p in range(players)]
        side = "<" if below else ">="
        states = sum(int(c.sum()) for c in chosen)
        print(f"replaced where reached {side} {threshold}: {states} states, {exploitability(patched):.4f}")
