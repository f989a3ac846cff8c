"""The flat metrics of one training iteration, as ``marljoint train`` logs them (see ``docs/metrics.md``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from marljoint.collect.rollout import JointRollout
from marljoint.ppo.learner import JointStats

__all__ = ["PER_AGENT_STATS", "MetricKeys", "iteration_metrics"]

PER_AGENT_STATS = (
    "policy_loss",
    "value_loss",
    "entropy",
    "clip_fraction",
    "approx_kl",
    "explained_var",
    "advantage_std",
)
"""The :class:`~marljoint.JointStats` fields logged once per agent, as ``"<field>/<agent>"``."""


class MetricKeys:
    """The ``"<name>/<agent>"`` keys, built once, so every metrics dict of a run shares the same key strings.

    Args:
        agents: the agents' names in ``possible_agents`` order.
    """

    def __init__(self, agents: Sequence[str]) -> None:
        names = ("episode_return", *PER_AGENT_STATS)
        self.keys = {n: [sys.intern(f"{n}/{agent}") for agent in agents] for n in names}


def iteration_metrics(
    keys: MetricKeys,
    rollout: JointRollout,
    stats: JointStats,
    seconds: float,
    iteration: int,
    env_steps: int,
    learning_rate: float,
) -> dict[str, Any]:
    """Flat metrics of one iteration: counters, episode returns and every :class:`JointStats` field per agent.

    Args:
        keys: the run's :class:`MetricKeys`.
        rollout: the iteration's rollout.
        stats: its update's statistics.
        seconds: wall time of the collection and the update.
        iteration: the trainer's iteration counter after it.
        env_steps: the trainer's env-step counter after it.
        learning_rate: the learning rate the update used.
    """
    agent_steps = int(rollout.valid.sum())
    out: dict[str, Any] = {
        "iteration": iteration,
        "env_steps": env_steps,
        "agent_steps": agent_steps,
        "sps": agent_steps / seconds if seconds > 0 else float("nan"),
        "episodes": int(len(rollout.episode_lengths)),
    }
    returns = rollout.episode_returns
    out["episode_return_mean"] = float(returns.mean()) if len(returns) else float("nan")
    for i, key in enumerate(keys.keys["episode_return"]):
        out[key] = float(returns[:, i].mean()) if len(returns) else float("nan")
    for name in PER_AGENT_STATS:
        for key, value in zip(keys.keys[name], getattr(stats, name)):
            out[key] = value
    for key, value in stats.grad_norm.items():
        out[f"grad_norm/{key}"] = value
    out["aux_loss"] = stats.aux_loss
    out["total_loss"] = stats.total_loss
    out["num_mb_steps"] = stats.num_mb_steps
    out["learning_rate"] = learning_rate
    out["env_steps_this_iteration"] = rollout.steps * rollout.num_envs
    out.update(stats.aux_metrics)
    return out
