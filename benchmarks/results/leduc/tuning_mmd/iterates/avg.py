"""Exploitability of averaging schemes over the iterates ``dump.py`` saved (sequence-form, reach-weighted averages).

    PYTHONPATH=.:envs python avg.py GAME ITERATES.npz

Rows: the last iterate; weights t (``lin``, what marljoint keeps), 1 (``uni``), t² (``sq``), t − 525 from update
525 on (``lin>525``: after α_t reaches 0.2 with the defaults), 1 over the second half (``uni_half``), and
exponential weights with time constants of 200 and 500 updates (``ema200``, ``ema500``).
"""

import sys

import numpy as np

from marljoint.run.registry import known_game

game, data = known_game(sys.argv[1]), np.load(sys.argv[2])
players, steps = game.num_players, data["steps"]
count = len(steps)
tables = [data[f"p{p}"].astype(np.float64) for p in range(players)]
reach = [np.stack([game.reach([tables[p][t]], p)[0] for t in range(count)]) for p in range(players)]  # [T, S]
numerators = [reach[p][..., None] * tables[p] for p in range(players)]  # [T, S, A]


def average(weights):
    out = []
    for p in range(players):
        num, den = np.tensordot(weights, numerators[p], 1), np.tensordot(weights, reach[p], 1)
        out.append(np.where(den[:, None] > 0, num / np.maximum(den[:, None], 1e-300), 1.0 / tables[p].shape[-1]))
    return out


def exploitability(profile):
    return game.nash_conv(profile) / players


SCHEMES = {
    "lin": lambda n: np.arange(1, n + 1, dtype=float),
    "uni": lambda n: np.ones(n),
    "sq": lambda n: np.arange(1, n + 1, dtype=float) ** 2,
    "lin>525": lambda n: np.maximum(np.arange(1, n + 1, dtype=float) - 525, 0) + (n <= 525),
    "uni_half": lambda n: (np.arange(n) >= n // 2).astype(float),
    "ema200": lambda n: 0.995 ** (n - 1 - np.arange(n)),
    "ema500": lambda n: 0.998 ** (n - 1 - np.arange(n)),
}
marks = [m for m in (2e6, 3e6, 3.5e6, 4e6, 5e6, 6e6, 7e6, 7.5e6) if m <= steps[-1]]
ends = [int(np.searchsorted(steps, m)) for m in marks]
print("steps      " + " ".join(f"{m / 1e6:6.2f}M" for m in marks))
print("last       " + " ".join(f"{exploitability([t[i] for t in tables]):7.3f}" for i in ends))
for name, weights in SCHEMES.items():
    cells = [exploitability(average(np.concatenate([weights(i + 1), np.zeros(count - i - 1)]))) for i in ends]
    print(f"{name:10s} " + " ".join(f"{c:7.3f}" for c in cells), flush=True)
