"""NFSP on Kuhn poker: exact exploitability of the average policies against wall time.

Settings: the ``kuhn_poker_v0`` recipe of ``marljoint.run.recipes``: PPO best responses on 128 env
copies (lr 1e-3, entropy coefficient 0.1), η = 0.3, 8 supervised steps of the average policies per rollout on
reservoirs of the best responses' own actions. Each seed writes
``OUT/seed<k>/metrics.csv``; the summary gives, per seed, the wall time at which exploitability first fell
below 0.10, and the final and best values.

Usage::

    python benchmarks/nfsp_kuhn.py --seconds 300 --seeds 0 1 2 --out runs/nfsp_kuhn
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from marljoint.best_response import NFSP, KuhnGame, NfspConfig
from marljoint.run.recipes import env_factory, recipe_for
from marljoint.run.runlog import write_metrics_csv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="wall-time budget per seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--out", type=Path, default=Path("runs/nfsp_kuhn"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    recipe = recipe_for("kuhn_poker_v0")
    print("seed  iterations  t(<0.10) s  final    best     last-quarter mean  wall s")
    for seed in args.seeds:
        config = NfspConfig(trainer=recipe.nfsp_trainer_config(), seed=seed, **recipe.nfsp)
        nfsp = NFSP(env_factory("kuhn_poker_v0", {}), config, game=KuhnGame())
        out = args.out / f"seed{seed}"
        out.mkdir(parents=True, exist_ok=True)
        nfsp.run(
            max_seconds=args.seconds,
            callback=lambda _, run=nfsp, out=out: write_metrics_csv(
                run.history, out / "metrics.csv", ("iteration", "wall_time")
            ),
        )
        history = nfsp.history
        below = next((row["wall_time"] for row in history if row["exploitability"] < 0.10), math.nan)
        values = [row["exploitability"] for row in history]
        tail = values[-max(1, len(values) // 4) :]
        print(
            f"{seed:<5} {nfsp.iteration:<11} {below:<11.1f} {values[-1]:<8.4f} {min(values):<8.4f} "
            f"{sum(tail) / len(tail):<18.4f} {history[-1]['wall_time']:.1f}"
        )


if __name__ == "__main__":
    main()
