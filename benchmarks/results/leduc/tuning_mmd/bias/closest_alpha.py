"""Which alpha's regularised equilibrium is the run's average (and its iterates) closest to?"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "qre"))
from qre import others_reach, regularised_equilibrium  # noqa: E402

from marljoint.run.registry import known_game  # noqa: E402

game = known_game("openspiel:leduc_poker")
P = 2
d = np.load(sys.argv[1])
steps = d["steps"]
tables = [d[f"p{p}"].astype(np.float64) for p in range(P)]
end = int(np.searchsorted(steps, float(sys.argv[2]) * 1e6))
reach = [np.stack([game.reach([tables[p][t]], p)[0] for t in range(end)]) for p in range(P)]
w = np.arange(1, end + 1, dtype=float)
avg = []
for p in range(P):
    num = np.tensordot(w, reach[p][..., None] * tables[p][:end], 1)
    den = np.tensordot(w, reach[p], 1)
    avg.append(np.where(den[:, None] > 0, num / np.maximum(den[:, None], 1e-300), 1 / 3))
last = [tables[p][end - 1] for p in range(P)]


print("average exploitability %.4f" % (game.nash_conv(avg) / P))
for alpha in (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7):
    eq = regularised_equilibrium(game, alpha, 0.05, 3000 if alpha >= 0.2 else 6000)
    out = []
    for name, prof in (("avg", avg), ("last", last)):
        dist = 0.0
        for p in range(P):
            v = game.reach([eq[p]], p)[0] * others_reach(game, eq, p)  # visitation under the equilibrium
            ent = np.where(
                eq[p] > 0, eq[p] * (np.log(np.maximum(eq[p], 1e-300)) - np.log(np.maximum(prof[p], 1e-300))), 0
            ).sum(1)
            dist += (v * ent).sum() / v.sum()
        out.append(f"{name} KL(eq||.) {dist:.4f}")
    # entropy of eq vs avg (visitation-weighted)
    print(f"alpha {alpha}: eq exploitability {game.nash_conv(eq) / P:.4f} | " + " | ".join(out), flush=True)
