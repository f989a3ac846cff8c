"""Ray scale-out on this machine: rollout throughput with 1 and 2 Ray workers vs in-process, and the wall time of one
PSRO iteration on bucket_brigade_v0 with and without Ray.

Rollouts: mpe2 simple_spread_v3 (N=3), E env copies × T steps, parameter sharing, 64-64 networks; the workers are
started and warmed up by one rollout before timing; medians over the repetitions. Full iterations (collect +
update, 4 epochs × 4 minibatches) are timed too.

PSRO: one iteration (the first after the initial uniform population) on bucket_brigade_v0 (default scenario,
4 agents): 4 PPO best responses and the 16 new meta-game entries, in one process (``task_split=0``), as the same
split tasks run one after another (``engine="local"``) and as Ray tasks (``engine="ray"``).

Usage::

    python benchmarks/ray_scaling.py --repeats 3 --out results/ray_scaling.json
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch


def spread():
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(N=3, max_cycles=25, local_ratio=0.5)


def rollout_rates(num_workers: int, num_envs: int, steps: int, iterations: int, repeats: int) -> dict[str, Any]:
    """Agent-steps/s of collect_rollout alone and of collect + update."""
    from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
    from marljoint.collect import CollectionConfig

    config = JointTrainerConfig(
        num_envs=num_envs,
        rollout_steps=steps,
        n_epochs=4,
        minibatch_size=num_envs * steps // 4,
        collection=CollectionConfig("ray", num_workers) if num_workers else CollectionConfig(),
        torch_threads=1,
        seed=0,
    )
    trainer = JointMultiAgentTrainer.from_env(PettingZooJointEnv(spread, num_envs=num_envs), config)
    agents = trainer.spec.num_agents
    start = time.perf_counter()
    trainer.collect_rollout()  # starts the workers (and warms up everything)
    startup = time.perf_counter() - start
    collect, full = [], []
    for _ in range(repeats):
        tick = time.perf_counter()
        for _ in range(iterations):
            trainer.collect_rollout()
        collect.append(iterations * num_envs * steps * agents / (time.perf_counter() - tick))
        tick = time.perf_counter()
        for _ in range(iterations):
            trainer.update(trainer.collect_rollout())
        full.append(iterations * num_envs * steps * agents / (time.perf_counter() - tick))
    trainer.close()
    return {
        "engine": "in-process" if num_workers == 0 else f"Ray, {num_workers} worker{'s' * (num_workers > 1)}",
        "num_workers": num_workers,
        "first_rollout_s": round(startup, 2),
        "rollout_sps": round(statistics.median(collect)),
        "full_sps": round(statistics.median(full)),
    }


def bare_env_rate(seconds: float = 3.0) -> float:
    """Agent-steps/s of the bare env with random actions, one process."""
    env = spread()
    env.reset(seed=0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        actions = {a: env.action_space(a).sample() for a in env.agents}
        _, _, terms, truncs, _ = env.step(actions)
        steps += len(actions)
        if not env.agents or all(terms.values()) or all(truncs.values()):
            env.reset()
    return steps / (time.perf_counter() - start)


def psro_iteration(num_workers: int, engine: str, br_steps: int, episodes: int) -> dict[str, Any]:
    """Wall time of PSRO's first iteration on bucket_brigade_v0 (4 agents)."""
    from marljoint import JointTrainerConfig
    from marljoint.best_response import PSRO, PsroConfig
    from marljoint_envs import bucket_brigade_v0

    trainer = JointTrainerConfig(
        num_envs=16, rollout_steps=64, n_epochs=4, minibatch_size=256, share_parameters=False, torch_threads=1
    )
    config = PsroConfig(
        iterations=1,
        meta_solver="regret_matching",
        br_steps=br_steps,
        trainer=trainer,
        episodes_per_entry=episodes,
        eval_num_envs=16,
        task_split=num_workers,
        engine=engine,
        seed=0,
    )
    psro = PSRO(functools.partial(bucket_brigade_v0.parallel_env, scenario="default"), config)
    tick = time.perf_counter()
    row = psro.step()
    seconds = time.perf_counter() - tick
    label = "in-process" if num_workers == 0 else f"{num_workers} task chunks, engine={engine}"
    return {
        "psro": label,
        "iteration_s": round(seconds, 1),
        "br_s": round(row["br_seconds"], 1),
        "meta_game_entries": int(row["meta_game_entries"]),
        "eval_episodes": int(row["eval_episodes"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=5, help="rollouts per timed repetition")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--br-steps", type=int, default=16_384, help="PSRO best-response env steps per iteration")
    parser.add_argument("--episodes-per-entry", type=int, default=8)
    parser.add_argument("--skip-psro", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()

    from marljoint.distributed import connect_ray

    torch.set_num_threads(1)
    connect_ray(num_cpus=2)
    bare = bare_env_rate()
    rows = [rollout_rates(k, args.num_envs, args.steps, args.iterations, args.repeats) for k in (0, 1, 2)]
    print(f"bare env: {bare:,.0f} agent-steps/s (R)\n")
    print(
        "| collection | first rollout (s) | rollout agent-steps/s | ratio to R "
        "| collect + update agent-steps/s | ratio to R |"
    )
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['engine']} | {row['first_rollout_s']} | {row['rollout_sps']:,} "
            f"| {row['rollout_sps'] / bare:.2f} | {row['full_sps']:,} | {row['full_sps'] / bare:.2f} |"
        )
    psro_rows = []
    if not args.skip_psro:
        for num_workers, engine in ((0, "local"), (2, "local"), (2, "ray")):
            psro_rows.append(psro_iteration(num_workers, engine, args.br_steps, args.episodes_per_entry))
        print("\n| PSRO iteration (bucket_brigade_v0, 4 agents) | wall s | best responses s | entries | episodes |")
        print("|---|---|---|---|---|")
        for row in psro_rows:
            print(
                f"| {row['psro']} | {row['iteration_s']} | {row['br_s']} | {row['meta_game_entries']} | "
                f"{row['eval_episodes']} |"
            )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"bare_env_sps": bare, "rollouts": rows, "psro": psro_rows}, indent=2))


if __name__ == "__main__":
    main()
