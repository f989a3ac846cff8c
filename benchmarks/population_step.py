"""Frozen members acting in a PSRO population: one stacked call (``PolicyStack``) against one call per member.

Steps a :class:`~marljoint.best_response.opponents.PopulationEnv` over 128 copies of an OpenSpiel game (Leduc poker
by default) whose second seat mixes ``K`` PPO members uniformly, while the first seat plays random legal actions,
and prints the milliseconds per joint step both ways, in alternating repetitions.

Usage::

    pip install -e ".[openspiel]"
    python benchmarks/population_step.py --members 3 80
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from unittest import mock

import numpy as np
import torch

from marljoint import JointMultiAgentTrainer, PettingZooJointEnv
from marljoint.best_response.opponents import MetaStrategyAssigner, PopulationEnv
from marljoint.cli.best_response import env_factory, recipe_for
from marljoint.policies import AgentPolicy, PolicyStack


def members_of(env: PettingZooJointEnv, game: str, count: int) -> list[AgentPolicy]:
    """``count`` freshly initialised members of seat 1, with the recipe's networks."""
    config = recipe_for(game).trainer.replace(num_envs=env.num_envs, share_parameters=False)
    out = []
    for seed in range(count):
        network, slot = JointMultiAgentTrainer.from_env(env, config.replace(seed=seed)).policy_for(1)
        out.append(AgentPolicy(network, slot))
    return out


def ms_per_step(env: PettingZooJointEnv, members: list[AgentPolicy], steps: int, stacked: bool) -> float:
    """Milliseconds per joint step with the members stacked or acting one by one."""
    assign = MetaStrategyAssigner([[1.0], np.ones(len(members)) / len(members)], [0])
    one_by_one = mock.patch.object(PolicyStack, "largest", lambda policies: (None, np.full(len(policies), -1)))
    with contextlib.nullcontext() if stacked else one_by_one:
        population = PopulationEnv(env, [[members[0]], members], assign, seed=0)
        state = population.reset(seed=0)
        rng = np.random.default_rng(0)
        actions = np.zeros((env.num_envs, 2), dtype=np.int64)
        start = time.perf_counter()
        for _ in range(steps):
            legal = state.action_masks[0][:, 0]
            actions[:, 0] = np.argmax(legal * rng.random(legal.shape), axis=1)
            state = population.step([actions])
        return (time.perf_counter() - start) / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--game", default="openspiel:leduc_poker")
    parser.add_argument("--members", type=int, nargs="+", default=[3, 80])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    env = PettingZooJointEnv(env_factory(args.game, {}), num_envs=128, seed=0)
    for count in args.members:
        members = members_of(env, args.game, count)
        for _ in range(args.repetitions):
            alone = ms_per_step(env, members, args.steps, stacked=False)
            stacked = ms_per_step(env, members, args.steps, stacked=True)
            print(f"{count} members: one call per member {alone:.2f} ms/step, stacked {stacked:.2f} ms/step")
    env.close()


if __name__ == "__main__":
    main()
