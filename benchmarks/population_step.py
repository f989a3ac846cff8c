"""Frozen members acting in a PSRO population: one stacked call (``PolicyStack``) against one call per member.

Steps a :class:`~marljoint.best_response.opponents.PopulationEnv` over 128 copies of an OpenSpiel game (Leduc poker
by default) whose second seat mixes ``K`` PPO members uniformly, while the first seat plays random legal actions,
and prints the milliseconds per joint step both ways, in alternating repetitions.

With ``--simulate-copies C ...`` it times instead what a PSRO iteration with a simulated meta-game spends
simulating: 200 profiles (a new member of each seat against every member of the other) × 32 episodes through
:func:`~marljoint.best_response.opponents.simulate_profiles`, on C env copies, with ``K`` members per seat.

Usage::

    pip install -e ".[openspiel]"
    python benchmarks/population_step.py --members 3 80
    python benchmarks/population_step.py --members 80 --simulate-copies 32 128 256
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
from marljoint.best_response.opponents import MetaStrategyAssigner, PopulationEnv, simulate_profiles
from marljoint.policies import AgentPolicy, PolicyStack
from marljoint.run.recipes import env_factory, recipe_for


def members_of(env: PettingZooJointEnv, game: str, count: int, seat: int = 1) -> list[AgentPolicy]:
    """``count`` freshly initialised members of ``seat``, with the recipe's networks."""
    config = recipe_for(game).trainer.replace(num_envs=env.num_envs, share_parameters=False)
    out = []
    for seed in range(count):
        network, slot = JointMultiAgentTrainer.from_env(env, config.replace(seed=seed + 1000 * seat)).policy_for(seat)
        out.append(AgentPolicy(network, slot))
    return out


def simulation_seconds(game: str, count: int, copies: int, seed: int) -> float:
    """Seconds to simulate a late PSRO iteration's new meta-game entries: each seat's newest member against the
    other seat's ``count`` members (the first 80 profiles one way, the next 120 the other), 32 episodes each."""
    env = PettingZooJointEnv(env_factory(game, {}), num_envs=copies, seed=0)
    members = [members_of(env, game, count, seat) for seat in (0, 1)]
    rng = np.random.default_rng(0)
    newest = count - 1
    seat0 = np.r_[np.full(80, newest), rng.integers(0, count, 120)]
    seat1 = np.r_[rng.integers(0, count, 80), np.full(120, newest)]
    start = time.perf_counter()
    simulate_profiles(env, members, np.stack([seat0, seat1], axis=1), 32, seed=seed)
    seconds = time.perf_counter() - start
    env.close()
    return seconds


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
    parser.add_argument(
        "--simulate-copies", type=int, nargs="+", metavar="C", help="time meta-game simulation on C copies instead"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    if args.simulate_copies:
        for count in args.members:
            for repetition in range(args.repetitions):
                for copies in args.simulate_copies:
                    seconds = simulation_seconds(args.game, count, copies, repetition)
                    print(f"{count} members, {copies} copies: {seconds:.2f} s to simulate 200 profiles x 32 episodes")
        return
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
