"""Adds the ``mmd-best`` rows to a results folder's ``runs.csv`` from its ``mmd_seed<k>_metrics.csv`` files: at
each checkpoint of the folder's ``mmd`` rows, the least exploitability of the current, the average and (where
scored) the magnet policy over every scoring so far (what ``benchmarks/leduc.py`` now reports as ``mmd-best`` and
``marljoint train`` keeps in ``openspiel_best_policy.json``). The runs of these folders were made before that row
existed; their metrics hold every scoring, so the rows are the ones the script would have written.

    python benchmarks/results/leduc/best_rows.py benchmarks/results/leduc/clip01_alpha_min
"""

import csv
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from leduc import at_checkpoints  # noqa: E402

here = Path(sys.argv[1])
KINDS = ("exploitability", "average_exploitability", "magnet_exploitability")

with (here / "runs.csv").open(newline="") as f:
    rows = list(csv.DictReader(f))
fields = list(rows[0])
rows = [r for r in rows if r["method"] != "mmd-best"]
checkpoints = sorted({float(r["checkpoint_s"]) for r in rows if r["method"] == "mmd"})
for path in sorted(here.glob("mmd_seed*_metrics.csv")):
    seed = int(path.name[len("mmd_seed") :].split("_")[0])
    with path.open(newline="") as f:
        history = [{k: float(v) if v else math.nan for k, v in r.items()} for r in csv.DictReader(f)]
    best = math.inf
    for row in history[1:]:  # row 0 scores the initial policies, before any iterate
        best = min(best, *(row[k] for k in KINDS if k in row and math.isfinite(row[k])))
        row["best_policy_exploitability"] = best
    history[0]["best_policy_exploitability"] = math.nan
    wall = next(r["wall_s"] for r in rows if r["method"] == "mmd" and int(r["seed"]) == seed)
    for t, value, iteration in at_checkpoints(history, checkpoints, "best_policy_exploitability"):
        rows.append(
            {"method": "mmd-best", "seed": seed, "checkpoint_s": t, "exploitability": value, "iterations": iteration,
             "wall_s": wall}
        )
with (here / "runs.csv").open("w", newline="") as f:
    writer = csv.DictWriter(f, fields)
    writer.writeheader()
    writer.writerows(rows)
