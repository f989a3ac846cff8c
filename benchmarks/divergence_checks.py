"""What the divergence checks cost an update: the same update with and without them, and the checks alone.

The learner checks each minibatch's joint loss and gradient norms (one reduction, read on the host) before the
optimizers step, and every parameter once after the epochs. This times ``--rounds`` updates of one rollout with the
checks and as many without (replaced by no-ops), alternating so that the machine's load falls on both alike, and
then the checks alone on this network. Default: ``marljoint train``'s trainer settings (16 copies × 256 steps,
10 epochs × 16 minibatches) on mpe2's simple_spread, one thread.

Usage::

    python benchmarks/divergence_checks.py --rounds 6
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import marljoint.ppo.learner as learner_module
from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.run.defaults import DEFAULT_TRAINER


def _time_updates(trainer: JointMultiAgentTrainer, rounds: int) -> tuple[dict[str, list[float]], int]:
    rollout = trainer.collect_rollout()
    checks = (learner_module.all_finite, learner_module.non_finite_parameter)
    no_checks = (lambda values: True, lambda networks: None)
    times: dict[str, list[float]] = {"with checks": [], "without": []}
    trainer.update(rollout)  # warm-up
    steps = 0
    try:
        for r in range(rounds):
            order = [("with checks", checks), ("without", no_checks)]
            for name, (finite, parameter) in order if r % 2 else order[::-1]:
                learner_module.all_finite, learner_module.non_finite_parameter = finite, parameter
                tick = time.perf_counter()
                steps = trainer.update(rollout).num_mb_steps
                times[name].append(time.perf_counter() - tick)
    finally:
        learner_module.all_finite, learner_module.non_finite_parameter = checks
    return times, steps


def _time_checks(trainer: JointMultiAgentTrainer, repeats: int = 2000) -> tuple[float, float]:
    learner = trainer.learner
    norms = [torch.rand(1) for _ in range(2 * len(learner.units))]
    joint = torch.rand(())
    tick = time.perf_counter()
    for _ in range(repeats):
        learner_module.all_finite([joint.reshape(1), *norms])
    per_minibatch = (time.perf_counter() - tick) / repeats
    tick = time.perf_counter()
    for _ in range(repeats // 10):
        learner_module.non_finite_parameter(learner._networks())
    return per_minibatch, (time.perf_counter() - tick) / (repeats // 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="updates with and without the checks (default 6)")
    parser.add_argument("--env", default="mpe2.simple_spread_v3", help="a module with parallel_env()")
    args = parser.parse_args()
    import importlib

    torch.set_num_threads(1)
    env_fn = importlib.import_module(args.env).parallel_env
    config = JointTrainerConfig(**DEFAULT_TRAINER)
    trainer = JointMultiAgentTrainer.from_env(PettingZooJointEnv(env_fn, num_envs=config.num_envs, seed=0), config)
    times, steps = _time_updates(trainer, args.rounds)
    for name, values in times.items():
        runs = ", ".join(f"{v * 1e3:.0f}" for v in values)
        print(f"{name}: median update {statistics.median(values) * 1e3:.1f} ms ({steps} minibatch steps; {runs} ms)")
    per_minibatch, per_update = _time_checks(trainer)
    share = (per_minibatch * steps + per_update) / statistics.median(times["without"])
    print(
        f"the checks alone: {per_minibatch * 1e6:.1f} us per minibatch, {per_update * 1e6:.0f} us for the parameters "
        f"per update: {share:.2%} of the update without them"
    )
    trainer.close()


if __name__ == "__main__":
    main()
