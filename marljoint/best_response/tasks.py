"""PSRO's independent pieces of work, as pure functions that a :class:`~marljoint.distributed.TaskEngine` runs
in-process or as Ray tasks.

An iteration of PSRO with ``task_split > 0`` splits into:

* one best-response training per learning seat (:func:`train_best_response`), each on its own env copies and
  seeded by (seed, iteration, seat); and
* ``task_split`` chunks of the meta-game's missing entries (:func:`simulate_chunk`), each simulated on its own
  copies and seeded by (seed, iteration, chunk).

The tasks depend only on their arguments, so the result is the same whichever engine runs them (``"ray"`` or
``"local"``, which runs them one after another here) and however Ray schedules or retries them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from marljoint.threads import limit_threads

__all__ = ["chunk_envs", "simulate_chunk", "split_profiles", "train_best_response"]


def train_best_response(
    env_fn: Callable[[], Any],
    trainer_config: Any,
    steps: int,
    populations: Sequence[Sequence[Any]],
    strategies: Sequence[np.ndarray],
    seat: int,
    seed: int,
    policy_kwargs: dict[str, Any],
    warm_start: bool = False,
    policy_scale: float = 1.0,
) -> tuple[Any, dict[str, float]]:
    """Trains one seat's PPO best response to the other seats' meta-strategies.

    Args:
        env_fn: factory of one env copy.
        trainer_config: the oracle's :class:`~marljoint.JointTrainerConfig` (``num_envs`` copies are built).
        steps: env steps of training.
        populations: per seat, its frozen policies.
        strategies: per seat, its meta-strategy.
        seat: the learning seat.
        seed: seeds the trainer and the opponents' sampling.
        policy_kwargs: passed to the networks.
        warm_start: start from the seat's newest population member (see ``PPOOracle``).
        policy_scale: with ``warm_start``, the factor on the copied policy output layer (see ``PPOOracle``).

    Returns:
        ``(policy, metrics)``: the frozen best response and the oracle's diagnostics.
    """
    from marljoint.best_response.oracles import PPOOracle
    from marljoint.env.pettingzoo import PettingZooJointEnv

    limit_threads(1)  # a task collects its own rollouts on the one CPU Ray gives it (marljoint.threads)
    env = PettingZooJointEnv(env_fn, num_envs=trainer_config.num_envs, seed=seed)
    try:
        oracle = PPOOracle(
            env, trainer_config, steps, warm_start=warm_start, policy_scale=policy_scale, **policy_kwargs
        )
        responses = oracle(populations, strategies, [seat], seed)
    finally:
        env.close()
    return responses.policies[seat], dict(responses.metrics)


def simulate_chunk(
    env_fn: Callable[[], Any],
    num_envs: int,
    populations: Sequence[Sequence[Any]],
    profiles: np.ndarray,
    episodes_per_profile: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Estimates meta-game entries by simulation (:func:`~marljoint.best_response.opponents.simulate_profiles`).

    Returns:
        ``(means, standard_errors)``, each ``[K, N]``.
    """
    from marljoint.best_response.opponents import simulate_profiles
    from marljoint.env.pettingzoo import PettingZooJointEnv

    limit_threads(1)
    env = PettingZooJointEnv(env_fn, num_envs=num_envs, seed=seed)
    try:
        return simulate_profiles(env, populations, profiles, episodes_per_profile, seed)
    finally:
        env.close()


def split_profiles(profiles: np.ndarray, chunks: int) -> list[np.ndarray]:
    """``profiles`` cut into at most ``chunks`` contiguous, non-empty pieces of near-equal length."""
    count = min(int(chunks), len(profiles))
    if count == 0:
        return []
    bounds = np.linspace(0, len(profiles), count + 1).round().astype(int)
    return [profiles[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def chunk_envs(total: int, chunks: int) -> int:
    """Env copies per simulation chunk so that the chunks together use about ``total``."""
    return max(1, math.ceil(total / max(1, chunks)))
