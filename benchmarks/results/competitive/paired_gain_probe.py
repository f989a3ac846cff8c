"""Half-widths of best_response_gain's estimate, paired (shared env seeds) against unpaired, with the same BRs.

Usage::

    python benchmarks/results/competitive/paired_gain_probe.py mpe2.simple_tag_v3 '{"max_cycles": 25}'
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import torch

from marljoint import PettingZooJointEnv
from marljoint.best_response.opponents import mixture_profiles, simulate_profiles
from marljoint.best_response.oracles import PPOOracle
from marljoint.best_response.population import PolicyMixture, UniformPolicy
from marljoint.run.recipes import env_factory, recipe_for

EPISODES = 200
Z_95 = 1.959964
"""The two-sided 95% standard normal quantile."""


def returns(env: PettingZooJointEnv, members: list, profiles: np.ndarray, seed: int, seeds: np.ndarray | None):
    """``[episodes, N]`` returns, episode k reset with ``seeds[k]`` when given."""
    if seeds is None:
        return simulate_profiles(env, members, profiles, 1, seed)[0]
    single = PettingZooJointEnv(env.env_fn, num_envs=1, seed=0)
    out = np.empty((len(profiles), env.spec.num_agents))
    for k, row in enumerate(profiles):  # one episode per call, so that each gets its own seed
        out[k] = simulate_profiles(single, members, row[None], 1, seed + k, episode_seeds=seeds[k : k + 1])[0][0]
    return out


def main() -> None:
    game, kwargs = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    torch.set_num_threads(1)
    factory = env_factory(game, kwargs)
    config = recipe_for(game).trainer.replace(share_parameters=False)
    env = PettingZooJointEnv(factory, num_envs=config.num_envs, seed=0)
    seats = env.spec.num_agents
    profile = [PolicyMixture([UniformPolicy(env.spec.actions[s])]) for s in range(seats)]
    members, weights = [m.members for m in profile], [m.weights for m in profile]
    trained = PPOOracle(env, config, 20_000)(members, weights, list(range(seats)), 1).policies
    simulation = PettingZooJointEnv(factory, num_envs=32, seed=1)
    z = Z_95
    for rep in range(3):
        rng = np.random.default_rng(rep)
        drawn_members, profiles = mixture_profiles(profile, EPISODES, rng)
        seeds = rng.integers(2**31, size=EPISODES)
        base_paired = returns(simulation, drawn_members, profiles, 10 + rep, seeds)
        base_free = returns(simulation, drawn_members, profiles, 20 + rep, None)
        cells = []
        for seat in range(seats):
            deviation = [list(m) for m in drawn_members]
            deviation[seat] = [trained[seat]]
            deviated = profiles.copy()
            deviated[:, seat] = 0
            paired = returns(simulation, deviation, deviated, 30 + rep, seeds)[:, seat] - base_paired[:, seat]
            free = returns(simulation, deviation, deviated, 40 + rep, None)[:, seat]
            paired_hw = z * paired.std(ddof=1) / math.sqrt(EPISODES)
            free_hw = z * math.sqrt((free.var(ddof=1) + base_free[:, seat].var(ddof=1)) / EPISODES)
            cells.append(f"seat {seat}: ± {paired_hw:.2f} paired, ± {free_hw:.2f} unpaired")
        print(f"repetition {rep}: " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
