import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "qre"))
from qre import conditional_values, regularised_equilibrium  # noqa: E402

from marljoint.run.registry import known_game  # noqa: E402

game = known_game("openspiel:leduc_poker")
P = 2


def reg_eq(magnet, alpha, eta=0.05, iters=3000):
    legal = [game._legal[p] for p in range(P)]
    tables = [m.copy() for m in magnet]
    for _ in range(iters):
        up = []
        for p in range(P):
            q = conditional_values(game, tables, p)
            logits = (
                np.log(np.maximum(tables[p], 1e-300)) + eta * q + eta * alpha * np.log(np.maximum(magnet[p], 1e-300))
            ) / (1 + eta * alpha)
            logits = np.where(legal[p], logits, -np.inf)
            w = np.exp(logits - logits.max(1, keepdims=True))
            up.append(w / w.sum(1, keepdims=True))
        tables = up
    return tables


rho = regularised_equilibrium(game, 0.5, 0.05, 3000)
print("magnet (QRE 0.5)", game.nash_conv(rho) / P)
for k in range(4):
    rho = reg_eq(rho, 0.2)
    print("prox step", k + 1, game.nash_conv(rho) / P, flush=True)
