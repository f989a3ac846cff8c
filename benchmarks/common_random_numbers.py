"""How much common random numbers cut the noise of a simulated meta-game's comparisons.

PSRO's meta-solver compares entries of the meta-game: how much better member A does than member B against the
same opponent. Estimated from independent episodes, the difference carries the luck of both entries' deals; played
on the same env reset seeds (``simulate_profiles(..., episode_seeds=...)``, the same deals), that luck cancels.

This plays three first-seat policies (uniform over the legal actions, and two fixed call/raise mixes) against two
second-seat policies (uniform, and a fixed mix) of an OpenSpiel game (Leduc poker by default), ``--episodes`` per
entry, ``--repetitions`` times with fresh seeds each way, and prints the standard deviation over repetitions of
each entry and of three differences of entries, without and with common random numbers.

Usage::

    pip install -e ".[openspiel]"
    python benchmarks/common_random_numbers.py --episodes 32 --repetitions 20
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from marljoint import PettingZooJointEnv
from marljoint.best_response.opponents import simulate_profiles
from marljoint.best_response.population import ConstantPolicy, UniformPolicy
from marljoint.run.recipes import env_factory

PROFILES = np.array([[0, 0], [1, 0], [2, 0], [0, 1], [1, 1], [2, 1]])
"""Every (first-seat policy, second-seat policy) pair."""
DIFFERENCES = {"B-C vs uniform": (1, 2), "B-C vs mix": (4, 5), "B vs uniform - B vs mix": (1, 4)}
"""Compared entries: rows of :data:`PROFILES`."""


def spreads(game: str, episodes: int, repetitions: int, common: bool) -> tuple[np.ndarray, np.ndarray]:
    """Standard deviations over repetitions of the first seat's entries ``[6]`` and of the differences ``[3]``."""
    env = PettingZooJointEnv(env_factory(game, {}), num_envs=32, seed=0)
    layouts = env.spec.actions
    nvec = int(layouts[0].nvec[0])
    mixes = [np.eye(nvec)[min(1, nvec - 1)] * 0.6 + 0.4 / nvec, np.eye(nvec)[nvec - 1] * 0.6 + 0.4 / nvec]
    members = [
        [UniformPolicy(layouts[0]), ConstantPolicy([mixes[0]]), ConstantPolicy([mixes[1]])],
        [UniformPolicy(layouts[1]), ConstantPolicy([(mixes[0] + mixes[1]) / 2])],
    ]
    entries, differences = [], []
    for rep in range(repetitions):
        seeds = np.arange(episodes) + 100_000 * (rep + 1) if common else None
        means, _ = simulate_profiles(env, members, PROFILES, episodes, seed=rep, episode_seeds=seeds)
        entries.append(means[:, 0])
        differences.append([means[a, 0] - means[b, 0] for a, b in DIFFERENCES.values()])
    env.close()
    return np.std(entries, axis=0), np.std(differences, axis=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="openspiel:leduc_poker")
    parser.add_argument("--episodes", type=int, default=32, help="episodes per entry")
    parser.add_argument("--repetitions", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| seeds | entry spread (6 entries) | " + " | ".join(DIFFERENCES) + " |")
    print("|---|---|" + "---|" * len(DIFFERENCES))
    for common in (False, True):
        entries, differences = spreads(args.game, args.episodes, args.repetitions, common)
        print(f"| {'common' if common else 'independent'} | {' '.join(f'{x:.2f}' for x in entries)} | "
              + " | ".join(f"{x:.2f}" for x in differences) + " |", flush=True)


if __name__ == "__main__":
    main()
