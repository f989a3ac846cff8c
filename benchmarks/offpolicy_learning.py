"""The off-policy algorithms against PPO: VDN, QMIX, MASAC and MADDPG beside marljoint's PPO defaults at the same
env steps.

For every env (simple_spread from mpe2 with discrete or continuous actions, bucket_brigade bundled, multiwalker from
SISL), method (``vdn``, ``qmix``, ``masac``, ``maddpg``: the off-policy trainer with its defaults; ``ppo``:
``marljoint train``'s plain defaults; ``random``) and seed, it trains for the same budget
of env steps (one joint step of one env copy), then plays the same fresh episodes greedily (200 by default; the
random policy samples uniformly). Each finished run is one CSV row in ``--out`` (a run already there is not
trained again, so the benchmark resumes); ``--report`` prints the table (mean over seeds ± 95% CI).

``--select-every N`` also keeps, for each trained run (off-policy and PPO), the greedy policy that scored best on
``--select-episodes`` episodes of their own (seeds 2,000,000 + k, never the reported ones) every N env steps (for
PPO at the end of the first iteration past each mark) and after the last, and reports it on the same evaluation
episodes as a second row, ``METHOD@best`` (the selection is not counted in ``train_seconds`` and leaves the
training bits as they are without it).

Usage::

    python benchmarks/offpolicy_learning.py --out benchmarks/results/offpolicy/runs.csv            # everything
    python benchmarks/offpolicy_learning.py --envs bucket_brigade --methods vdn --seeds 0 --steps 50000 \
        --out benchmarks/results/offpolicy/runs.csv
    python benchmarks/offpolicy_learning.py --envs simple_spread_continuous --methods masac ppo random \
        --steps 30000 --episodes 100 --out benchmarks/results/offpolicy/masac.csv
    python benchmarks/offpolicy_learning.py --envs multiwalker --methods masac --steps 300000 --select-every 25000 \
        --out benchmarks/results/offpolicy/multiwalker_select.csv
    python benchmarks/offpolicy_learning.py --report --out benchmarks/results/offpolicy/runs.csv

VDN and QMIX need Discrete actions (simple_spread, bucket_brigade), MASAC and MADDPG one Discrete or Box space
(simple_spread either way, multiwalker; not bucket_brigade's MultiDiscrete)
"""

from __future__ import annotations

import argparse
import copy
import csv
import functools
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generalization as suite  # noqa: E402  (the suite's envs, evaluation and table helpers)

TASKS = {
    **{name: suite.SUITE[name] for name in ("simple_spread", "bucket_brigade", "multiwalker")},
    "simple_spread_continuous": suite.Task(
        functools.partial(suite._mpe, "simple_spread_v3", N=3, max_cycles=25, continuous_actions=True),
        1_000_000,
        "cooperative MPE, Box(0, 1, (5,)) actions",
    ),
}
ENVS = ("simple_spread", "bucket_brigade", "simple_spread_continuous", "multiwalker")
OFFPOLICY = ("vdn", "qmix", "masac", "maddpg")
METHODS = (*OFFPOLICY, "ppo", "random")
FIELDS = ("env", "method", "seed", "env_steps", "train_seconds", "episodes", "return_mean", "return_std")


SELECT_BASE_SEED = 2_000_000
"""Episodes ``SELECT_BASE_SEED + k`` choose the best policy of a run (``--select-every``); the reported returns use
episodes ``1_000_000 + k``, so the choice never sees the episodes it is scored on."""


@dataclass
class Selection:
    """The policy of a run that did best on the selection episodes (``--select-every``)."""

    every: int
    episodes: int
    env_steps: int = 0
    score: float = -math.inf
    state: dict[str, Any] | None = None
    curve: list[tuple[int, float]] = field(default_factory=list)
    seconds: float = 0.0

    def consider(self, trainer: Any, weights: Callable[[], dict[str, Any]], task: suite.Task) -> None:
        """Scores the trainer's greedy policy on the selection episodes and keeps a copy of ``weights()`` (every
        weight the policy acts with) if best so far. The trainer's generator is restored
        afterwards, so training goes on with the same bits as without selection; the time taken is added to
        :attr:`seconds`."""
        start = time.perf_counter()
        saved = trainer.generator.get_state()
        score = float(suite.evaluate_marljoint(trainer, task, True, self.episodes, SELECT_BASE_SEED).mean())
        trainer.generator.set_state(saved)
        self.curve.append((trainer.env_steps, score))
        if score > self.score:
            self.env_steps, self.score = trainer.env_steps, score
            self.state = copy.deepcopy(weights())
        self.seconds += time.perf_counter() - start
        print(f"{task_name(task)} env_steps={trainer.env_steps} select={score:.2f}", flush=True)


def task_name(task: suite.Task) -> str:
    """The name ``TASKS`` gives ``task``."""
    return next(name for name, known in TASKS.items() if known is task)


def train_value(
    name: str, algorithm: str, seed: int, env_steps: int, changes: dict[str, Any], selection: Selection | None = None
) -> tuple[Any, float]:
    """The off-policy trainer with its defaults (``changes`` applied); returns (the trainer, seconds). With
    ``selection``, the greedy policy is scored every ``selection.every`` env steps and after the last (not
    counted in the seconds)."""
    from marljoint import PettingZooJointEnv
    from marljoint.offpolicy import OffPolicyConfig, OffPolicyTrainer

    config = OffPolicyConfig(algorithm=algorithm, seed=seed, **changes)
    env = PettingZooJointEnv(TASKS[name].factory, num_envs=config.num_envs, seed=seed)
    trainer = OffPolicyTrainer(env, config)
    seconds = 0.0
    marks = [env_steps] if selection is None else [*range(selection.every, env_steps, selection.every), env_steps]
    for mark in marks:
        start = time.perf_counter()
        trainer.train(mark)
        seconds += time.perf_counter() - start
        if selection is not None:
            selection.consider(trainer, trainer.algorithm.state_dict, TASKS[name])
    env.close()
    return trainer, seconds


def run_one(
    name: str, method: str, seed: int, env_steps: int, episodes: int, changes: dict[str, Any], select: tuple[int, int]
) -> list[dict]:
    """Trains one (env, method, seed) and evaluates it greedily on the suite's fixed evaluation episodes: one row,
    and for a trained method with ``select = (every, episodes)`` a second (``@best``) for the policy that did best
    on the selection episodes."""
    task = TASKS[name]
    base_seed = 1_000_000
    seconds, trained = 0.0, env_steps
    label = method
    selection = Selection(*select) if select[0] > 0 and method != "random" else None
    if method in OFFPOLICY:
        trainer, seconds = train_value(name, method, seed, env_steps, changes, selection)
        load = trainer.algorithm.load_state_dict
        label = suite.variant_label(changes).replace("marljoint", method)
    elif method == "ppo":
        callback = ppo_selection(selection, task, env_steps)
        trainer, seconds = suite.train_marljoint(task, seed, env_steps, callback=callback)
        seconds -= 0.0 if selection is None else selection.seconds
        load = trainer.joint_policy.load_weights
    else:
        trained = 0
        returns = suite.evaluate(task, suite.random_actor(seed), episodes, base_seed)
        return [result_row(name, label, seed, trained, seconds, returns)]
    returns = suite.evaluate_marljoint(trainer, task, True, episodes, base_seed)
    rows = [result_row(name, label, seed, trained, seconds, returns)]
    if selection is not None and selection.state is not None:
        load(selection.state)
        best = suite.evaluate_marljoint(trainer, task, True, episodes, base_seed)
        rows.append(result_row(name, f"{label}@best", seed, trained, seconds, best))
        curve = " ".join(f"{steps}:{score:.1f}" for steps, score in selection.curve)
        print(f"selection ({select[1]} episodes per score; chose {selection.env_steps}): {curve}", flush=True)
    return rows


def ppo_selection(selection: Selection | None, task: suite.Task, env_steps: int) -> Callable[..., None] | None:
    """A :func:`generalization.train_marljoint` callback that scores PPO's greedy policy at the end of the first
    iteration at or past every ``selection.every`` env steps and at the end (the schedule ``train_value`` follows
    for the off-policy trainer, whose calls stop at the marks themselves); ``None`` without a selection."""
    if selection is None:
        return None
    marks = [*range(selection.every, env_steps, selection.every), env_steps]

    def callback(trainer: Any, metrics: dict[str, Any]) -> None:
        if marks and trainer.env_steps >= marks[0]:
            while marks and trainer.env_steps >= marks[0]:
                marks.pop(0)
            selection.consider(trainer, trainer.joint_policy.weights, task)

    return callback


def result_row(name: str, label: str, seed: int, env_steps: int, seconds: float, returns: np.ndarray) -> dict:
    """One CSV row: the run and its greedy returns' mean and standard deviation over the evaluation episodes."""
    return {
        "env": name,
        "method": label,
        "seed": seed,
        "env_steps": env_steps,
        "train_seconds": round(seconds, 1),
        "episodes": len(returns),
        "return_mean": float(returns.mean()),
        "return_std": float(returns.std()),
    }


def done_runs(path: Path) -> set[tuple[str, str, int, int]]:
    if not path.is_file():
        return set()
    with path.open(newline="") as f:
        return {(r["env"], r["method"], int(r["seed"]), int(r["env_steps"])) for r in csv.DictReader(f)}


def append(path: Path, row: dict[str, Any]) -> None:
    new = not path.is_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        if new:
            writer.writeheader()
        writer.writerow(row)


def report(path: Path) -> str:
    """The markdown table: per env and budget, each method's greedy return (mean ± 95% CI over seeds)."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    present = {r["method"] for r in rows} - {"ppo", "random"}
    methods = [m for m in OFFPOLICY if m in present] + sorted(present - set(OFFPOLICY)) + ["ppo"]
    lines = ["| env | env steps | " + " | ".join(methods) + " | random |", "|---" * (len(methods) + 3) + "|"]
    budgets = sorted({(r["env"], int(r["env_steps"])) for r in rows if r["method"] != "random"})
    for name, steps in budgets:
        cells = []
        for method in methods:
            key = (name, method, steps)
            values = [float(r["return_mean"]) for r in rows if (r["env"], r["method"], int(r["env_steps"])) == key]
            cells.append(suite.seeds_cell(values, suite._number))
        randoms = [float(r["return_mean"]) for r in rows if (r["env"], r["method"]) == (name, "random")]
        cells.append(suite._number(float(np.mean(randoms))) if randoms else "–")
        lines.append(f"| {name} | {steps:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=200_000, help="env steps of every training run")
    parser.add_argument("--episodes", type=int, default=200, help="greedy evaluation episodes")
    parser.add_argument("--set", nargs="*", default=[], help="OffPolicyConfig changes, key=value (TOML values)")
    parser.add_argument(
        "--select-every",
        type=int,
        default=0,
        help="trained runs: score the greedy policy every N env steps on --select-episodes other episodes and "
        "also report the best one (a second row, method@best); 0: off",
    )
    parser.add_argument("--select-episodes", type=int, default=20, help="episodes per selection score")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/offpolicy/runs.csv"))
    parser.add_argument("--report", action="store_true", help="print the table of --out and stop")
    args = parser.parse_args()
    if args.report:
        print(report(args.out))
        return
    from marljoint.threads import limit_threads

    limit_threads(1)
    changes = suite.parse_changes(args.set)
    done = done_runs(args.out)
    # Seed-major: every (env, method) gets its first seed before any gets its second.
    for seed in args.seeds:
        for name in args.envs:
            for method in args.methods:
                steps = 0 if method == "random" else args.steps
                label = suite.variant_label(changes).replace("marljoint", method) if method in OFFPOLICY else method
                if (name, label, seed, steps) in done:
                    continue
                select = (args.select_every, args.select_episodes)
                for row in run_one(name, method, seed, steps, args.episodes, changes, select):
                    append(args.out, row)
                    print(functools.reduce(lambda a, b: f"{a} {b}", (f"{k}={v}" for k, v in row.items())), flush=True)


if __name__ == "__main__":
    main()
