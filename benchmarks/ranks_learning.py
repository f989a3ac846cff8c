"""Learning per env step with data-parallel ranks: ``marljoint train --ranks K`` against one process, same seeds.

Each (env, seed, K) trains ``marljoint train``'s defaults for ``--steps`` env steps (the command a user runs), then
``marljoint eval`` plays ``--episodes`` greedy episodes of the final policy. Each row: env, K, seed, env steps,
wall seconds, the mean per-agent evaluation return, and the final training return (``episode_return_mean`` of the
last metrics row). The summary gives, per env and K, the mean over seeds with its 95% interval (Student t), and the
largest difference between K and one process on the same seed: ranks equal one process to float rounding, so the
two columns of a seed differ only where rounding has grown into another trajectory.

Usage::

    python benchmarks/ranks_learning.py --out benchmarks/results/ranks-learning            # 2 envs x 3 seeds x K 1, 2
    python benchmarks/ranks_learning.py --envs bucket_brigade_v0 --seeds 0 --steps 20000 --out /tmp/x   # a look
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

from marljoint.run.stats import confidence_interval

ENVS = {"simple_spread_v3": "mpe2.simple_spread_v3", "bucket_brigade_v0": "bucket_brigade_v0"}
"""The envs of the comparison, as ``marljoint train --env`` names them."""


def run_one(env: str, seed: int, ranks: int, steps: int, episodes: int, out: Path) -> dict[str, object]:
    """Trains and evaluates one (env, seed, K); returns its row."""
    run_dir = out / "runs" / f"{env}_seed{seed}_ranks{ranks}"
    train = [sys.executable, "-m", "marljoint", "train", "--env", ENVS[env], "--seed", str(seed)]
    train += ["--total-steps", str(steps), "--out", str(run_dir), "--force", "--quiet"]
    if ranks > 1:
        train += ["--ranks", str(ranks)]
    tick = time.perf_counter()
    subprocess.run(train, check=True)
    seconds = time.perf_counter() - tick
    evaluation = subprocess.run(
        [sys.executable, "-m", "marljoint", "eval", str(run_dir), "--episodes", str(episodes), "--json"],
        capture_output=True,
        text=True,
    )
    if evaluation.returncode != 0:
        raise SystemExit(f"marljoint eval {run_dir} failed: {evaluation.stderr.strip()}")
    result = json.loads(evaluation.stdout)
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    return {
        "env": env,
        "ranks": ranks,
        "seed": seed,
        "env_steps": int(rows[-1]["env_steps"]),
        "seconds": round(seconds, 1),
        "eval_return": _mean_return(result),
        "train_return": float(rows[-1]["episode_return_mean"]),
    }


def _mean_return(result: dict[str, object]) -> float:
    """The mean per-agent evaluation return of ``marljoint eval --json``'s result."""
    return float(result["returns"]["mean"]["mean"])  # type: ignore[index]


def summary(rows: list[dict[str, object]]) -> str:
    """The markdown table: per env and K, the seeds' mean evaluation return with its 95% interval, and the largest
    gap to one process on the same seed."""
    lines = [
        "| env | K ranks | seeds | eval return (95% CI) | train return (95% CI) | largest gap to K = 1, same seed |"
    ]
    lines.append("|---|---|---|---|---|---|")
    for env in dict.fromkeys(r["env"] for r in rows):
        base = {r["seed"]: r for r in rows if r["env"] == env and r["ranks"] == 1}
        for ranks in sorted({int(r["ranks"]) for r in rows if r["env"] == env}):
            mine = [r for r in rows if r["env"] == env and r["ranks"] == ranks]
            ev = [float(r["eval_return"]) for r in mine]
            tr = [float(r["train_return"]) for r in mine]
            gaps = [
                abs(float(r["eval_return"]) - float(base[r["seed"]]["eval_return"])) for r in mine if r["seed"] in base
            ]
            lines.append(
                f"| {env} | {ranks} | {len(mine)} | {_interval(ev)} | {_interval(tr)} | "
                f"{max(gaps) if gaps else float('nan'):.3g} |"
            )
    return "\n".join(lines)


def _interval(values: list[float]) -> str:
    mean, half = confidence_interval(values)
    return f"{mean:.3f} ± {half:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", choices=sorted(ENVS), default=list(ENVS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2], help="the K to compare (1 always)")
    parser.add_argument("--steps", type=int, default=200_000, help="env steps per run (marljoint train's default)")
    parser.add_argument("--episodes", type=int, default=200, help="greedy evaluation episodes of the final policy")
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for env in args.envs:
        for seed in args.seeds:
            for ranks in sorted(set(args.ranks) | {1}):
                rows.append(run_one(env, seed, ranks, args.steps, args.episodes, args.out))
                print(rows[-1], flush=True)
    with open(args.out / "ranks_learning.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    table = summary(rows)
    (args.out / "summary.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
