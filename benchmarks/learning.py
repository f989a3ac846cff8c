"""Learning results: train a preset for a budget, evaluate the final policy, write one row per seed.

Each row: task, preset, seed, env steps, wall time, per-agent return mean with its 95% confidence interval over the
evaluation episodes (mean per-agent episode return, the scale the docs use), and the critic's final explained
variance, and the process's peak resident memory. Learning curves (with the resident memory after every iteration) go
to ``OUT/curves/<preset>_seed<k>.csv``.

Usage::

    python benchmarks/learning.py --preset spread --seeds 0 1 2 --steps 2000000 --episodes 200 --out results/
    python benchmarks/learning.py --preset bucket_brigade --no-value-normalization   # an ablation
    python benchmarks/learning.py --preset bucket_brigade --defaults   # marljoint train's defaults on its env
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

from marljoint import JointMultiAgentTrainer, make_joint_env
from marljoint.run.episodes import play_episodes
from marljoint.run.presets import PRESETS, get_preset
from marljoint.run.stats import confidence_interval


def run(
    preset_name: str,
    seed: int,
    steps: int,
    episodes: int,
    out: Path,
    overrides: dict[str, Any],
    defaults: bool = False,
) -> dict[str, Any]:
    """Trains one seed and evaluates it; returns the result row. ``defaults``: ``marljoint train``'s plain defaults
    on the preset's env instead of the preset's settings (the row's preset reads ``<preset>:defaults``)."""
    preset = get_preset(preset_name)
    if defaults:
        from marljoint.run.train import RunSpec

        config = RunSpec().trainer.replace(seed=seed, **overrides)
    else:
        config = preset.config(seed=seed, **overrides)
    label = preset_name + (":defaults" if defaults else "") + _suffix(overrides)
    env_fn = preset.env_fn()
    env = config.collection.make_env(env_fn, config.num_envs, seed)
    trainer = JointMultiAgentTrainer.from_env(env, config)
    curve_path = out / "curves" / f"{label}_seed{seed}.csv"
    curve_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with curve_path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["iteration", "env_steps", "wall_time", "episode_return_mean", "explained_var_mean", "rss_mib"])

        def log(metrics: dict[str, Any]) -> None:
            evs = [v for k, v in metrics.items() if k.startswith("explained_var/") and np.isfinite(v)]
            writer.writerow([
                metrics["iteration"],
                metrics["env_steps"],
                round(time.perf_counter() - start, 2),
                metrics["episode_return_mean"],
                float(np.mean(evs)) if evs else float("nan"),
                resident_mib(),
            ])
            f.flush()

        history = trainer.train(steps, callback=log, keep_history=False)
    wall = time.perf_counter() - start
    env.close()
    eval_env = make_joint_env(env_fn, min(episodes, 25), seed + 10_000)
    returns, _ = play_episodes(trainer, eval_env, episodes, deterministic=True, seed=seed + 10_000)
    eval_env.close()
    per_episode = returns.mean(axis=1)  # mean over agents: the per-agent return of each episode
    mean, half = confidence_interval(per_episode)
    last = history[-1]
    evs = [v for k, v in last.items() if k.startswith("explained_var/")]
    baselines = scripted_baselines(preset, episodes, seed + 10_000)
    return {
        "task": preset.env_name,
        "preset": label,
        "seed": seed,
        "env_steps": trainer.env_steps,
        "wall_time_s": round(wall, 1),
        "return_mean": round(float(mean), 3),
        "return_ci95": round(float(half), 3),
        "episodes": int(len(per_episode)),
        "explained_var": round(float(np.nanmean(evs)), 3) if evs else float("nan"),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "overrides": json.dumps(overrides, sort_keys=True),
        **baselines,
        **(
            {
                "gap_closed": round(
                    (float(mean) - baselines["random_return"])
                    / (baselines["specialist_return"] - baselines["random_return"]),
                    3,
                )
            }
            if baselines
            else {}
        ),
    }


FIELDS = [
    "task",
    "preset",
    "seed",
    "env_steps",
    "wall_time_s",
    "return_mean",
    "return_ci95",
    "episodes",
    "explained_var",
    "overrides",
    "peak_rss_mib",
    "random_return",
    "specialist_return",
    "gap_closed",
]
"""Columns of ``learning.csv`` (the last three for bucket brigade only)."""


def scripted_baselines(preset: Any, episodes: int, seed: int) -> dict[str, float]:
    """Bucket brigade only: the mean per-agent return of the scripted random and specialist teams."""
    if not preset.env_name.endswith("bucket_brigade_v0"):
        return {}
    from marljoint_envs.bucket_brigade_v0 import evaluate_scripted

    kwargs = dict(preset.env_kwargs)
    scenario = kwargs.pop("scenario", "default")
    return {
        f"{name}_return": round(evaluate_scripted(name, scenario, episodes, seed, **kwargs), 1)
        for name in ("random", "specialist")
    }


def resident_mib() -> float:
    """This process's resident memory now, in MiB (Linux ``/proc``; NaN elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return float("nan")
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def _suffix(overrides: dict[str, Any]) -> str:
    return "".join(f"+{k}={v}" for k, v in sorted(overrides.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", required=True, choices=sorted(PRESETS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=None, help="env steps per seed (default: the preset's)")
    parser.add_argument("--episodes", type=int, default=200, help="evaluation episodes of the final policy")
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--no-value-normalization", action="store_true", help="ablation: raw critic targets")
    parser.add_argument("--no-centralized-critic", action="store_true", help="ablation: local critic")
    parser.add_argument("--no-truncation-bootstrap", action="store_true", help="ablation: truncation = termination")
    parser.add_argument(
        "--set", metavar="FIELD=JSON", action="append", default=[], help="any other JointTrainerConfig override"
    )
    parser.add_argument(
        "--defaults", action="store_true", help="marljoint train's plain defaults on the preset's env and budget"
    )
    args = parser.parse_args()
    overrides: dict[str, Any] = {}
    for item in args.set:
        name, _, value = item.partition("=")
        overrides[name] = json.loads(value)
    if args.no_value_normalization:
        overrides["value_normalization"] = False
    if args.no_centralized_critic:
        overrides["centralized_critic"] = False
    if args.no_truncation_bootstrap:
        overrides["bootstrap_truncation"] = False
    steps = args.steps or get_preset(args.preset).total_steps
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "learning.csv"
    new = not results.exists()
    with results.open("a", newline="") as f:
        writer = None
        for seed in args.seeds:
            row = run(args.preset, seed, steps, args.episodes, args.out, overrides, args.defaults)
            if writer is None:
                writer = csv.DictWriter(f, fieldnames=FIELDS, restval="")
                if new:
                    writer.writeheader()
            writer.writerow(row)
            f.flush()
            print(
                f"{row['preset']} seed {seed}: {row['return_mean']:.2f} ± {row['return_ci95']:.2f} per agent "
                f"after {row['env_steps']:,} env steps in {row['wall_time_s']:.0f} s "
                f"(explained var {row['explained_var']})",
                flush=True,
            )


if __name__ == "__main__":
    main()
