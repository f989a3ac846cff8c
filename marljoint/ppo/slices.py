"""Rollouts collected in slices: each slice's copies played by a learner-less trainer in another process.

Used by the Ray rollout workers (:mod:`marljoint.distributed.rollout`) and by the worker processes of
:class:`~marljoint.env.SubprocessJointEnv`. A slice trainer holds a CPU copy of the learner's networks and the per-copy
noise generators of its copies ``[start, stop)`` (addressed by global copy index), and evaluates its copies at their
rows of an E-row batch (:meth:`~marljoint.policies.JointPolicy.forward_rows`), so the pieces, written side by
side along the env axis, are bit-identical to a rollout of all E copies in one process.
"""

from __future__ import annotations

import copy
import pickle
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from marljoint.collect.rollout import PER_AGENT_FIELDS, JointRollout

if TYPE_CHECKING:  # pragma: no cover
    from marljoint.env.base import JointEnv
    from marljoint.ppo.trainer import JointMultiAgentTrainer

# Rollout fields of shape [E, N]: the state after the last step.
NEXT_STATE_FIELDS = ("bootstrap_values", "next_alive", "next_acting")


def blueprint(trainer: JointMultiAgentTrainer) -> bytes:
    """The trainer's networks (CPU copies) and how they map to agents, pickled for :func:`slice_trainer`.

    Raises:
        pickle.PicklingError, TypeError, AttributeError: if a policy cannot be pickled.
    """
    return pickle.dumps(
        [(u.group, copy.deepcopy(u.policy).cpu(), u.agent_indices, u.stacked) for u in trainer._units]
    )


def slice_trainer(
    env: JointEnv, start: int, total: int, config: dict[str, Any], plan: bytes
) -> JointMultiAgentTrainer:
    """A learner-less trainer collecting copies ``[start, start + env.num_envs)`` of ``total``.

    Args:
        env: the slice's copies (its ``_copy_offset`` must be ``start``, so env seeds follow global indices).
        start: global index of the slice's first copy.
        total: E, the copies of the whole rollout.
        config: the learner's ``JointTrainerConfig.to_dict()``.
        plan: :func:`blueprint` output.
    """
    from marljoint.ppo.config import JointTrainerConfig
    from marljoint.ppo.learner import _Unit
    from marljoint.ppo.trainer import JointMultiAgentTrainer

    cfg = JointTrainerConfig.from_dict(config).replace(
        num_workers=0, num_envs=env.num_envs, device="cpu", vector_mode="sync"
    )
    torch.set_num_threads(cfg.torch_threads or 1)
    units = [
        _Unit(g, policy, indices, None, None, stacked, agent_names=env.spec.agents)
        for g, policy, indices, stacked in pickle.loads(plan)
    ]
    trainer = JointMultiAgentTrainer.__new__(JointMultiAgentTrainer)
    trainer._setup(env, cfg, units)
    trainer.joint_policy.row_pad = (start, total)
    return trainer


def rollout_piece(rollout: JointRollout) -> dict[str, Any]:
    """A slice trainer's rollout as numpy arrays (copies), ready to pickle to the learner."""
    piece: dict[str, Any] = {
        name: getattr(rollout, name).numpy().copy() for name in (*PER_AGENT_FIELDS, *NEXT_STATE_FIELDS)
    }
    piece["obs"] = [o.numpy().copy() for o in rollout.obs]
    piece["actions"] = [a.numpy().copy() for a in rollout.actions]
    piece["action_masks"] = [None if m is None else m.numpy().copy() for m in rollout.action_masks]
    piece["episode_returns"] = rollout.episode_returns
    piece["episode_lengths"] = rollout.episode_lengths
    piece["episode_steps"] = rollout.episode_steps
    return piece


def assemble(rollout: JointRollout, pieces: Sequence[dict[str, Any]], slices: Sequence[tuple[int, int]]) -> None:
    """Writes every slice's piece into its env columns; merges episode records into single-process order."""
    with warnings.catch_warnings():
        # Arrays from Ray's object store are read-only; they are only read here.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        for piece, (a, b) in zip(pieces, slices):
            for name in PER_AGENT_FIELDS:
                getattr(rollout, name)[:, a:b].copy_(torch.from_numpy(piece[name]))
            for name in NEXT_STATE_FIELDS:
                getattr(rollout, name)[a:b].copy_(torch.from_numpy(piece[name]))
            for g in range(len(rollout.obs)):
                rollout.obs[g][:, a:b].copy_(torch.from_numpy(piece["obs"][g]))
                rollout.actions[g][:, a:b].copy_(torch.from_numpy(piece["actions"][g]))
                if rollout.action_masks[g] is not None:
                    rollout.action_masks[g][:, a:b].copy_(torch.from_numpy(piece["action_masks"][g]))
    steps = np.concatenate([p["episode_steps"] for p in pieces])
    # Within one step, one process lists finished episodes in copy order, i.e. slice by slice: a stable sort by
    # step of the slice-ordered concatenation restores exactly that order.
    order = np.argsort(steps, kind="stable")
    rollout.episode_returns = np.concatenate([p["episode_returns"] for p in pieces])[order]
    rollout.episode_lengths = np.concatenate([p["episode_lengths"] for p in pieces])[order]
    rollout.episode_steps = steps[order]
