"""Exploitability of each run's average (weights t) and of the reach-weighted mixture of the runs' averages."""

import itertools
import sys

import numpy as np

from marljoint.run.registry import known_game

game = known_game("openspiel:leduc_poker")
P = 2
runs = []
for path in sys.argv[1:]:
    d = np.load(path)
    tables = [d[f"p{p}"].astype(np.float64) for p in range(P)]
    reach = [np.stack([game.reach([tables[p][t]], p)[0] for t in range(len(d["steps"]))]) for p in range(P)]
    runs.append((path, d["steps"], tables, reach))


def average(run, end, weights=None):
    _, steps, tables, reach = run
    w = np.arange(1, end + 1, dtype=float) if weights is None else weights
    out = []
    for p in range(P):
        num = np.tensordot(w, reach[p][:end, :, None] * tables[p][:end], 1)
        den = np.tensordot(w, reach[p][:end], 1)
        out.append(np.where(den[:, None] > 0, num / np.maximum(den[:, None], 1e-300), 1.0 / tables[p].shape[-1]))
    return out


def mix(profiles):
    out = []
    for p in range(P):
        r = [game.reach([prof[p]], p)[0] for prof in profiles]
        num = sum(ri[:, None] * prof[p] for ri, prof in zip(r, profiles))
        den = sum(r)
        out.append(np.where(den[:, None] > 0, num / np.maximum(den[:, None], 1e-300), 1.0 / profiles[0][p].shape[-1]))
    return out


def ex(prof):
    return game.nash_conv(prof) / P


for m in (2e6, 3e6, 4e6, 5e6, 6e6, 7e6, 7.5e6):
    ends = [int(np.searchsorted(r[1], m)) for r in runs]
    if any(e >= len(r[1]) for e, r in zip(ends, runs)):
        break
    avgs = [average(r, e) for r, e in zip(runs, ends)]
    each = [ex(a) for a in avgs]
    line = f"{m / 1e6:4.1f}M each " + " ".join(f"{x:.3f}" for x in each)
    line += f" | mix all {ex(mix(avgs)):.3f}"
    if len(avgs) > 2:
        pairs = [ex(mix([avgs[i], avgs[j]])) for i, j in itertools.combinations(range(len(avgs)), 2)]
        line += " | pairs " + " ".join(f"{x:.3f}" for x in pairs)
    print(line, flush=True)
