"""Rollouts collected in slices: each worker plays its own contiguous env copies with a CPU copy of the policy.

Used by both multi-process backends (:class:`~marljoint.collect.SubprocessCollector` and
:class:`~marljoint.collect.RayCollector`). A :class:`SliceWorker` holds the copies ``[start, stop)`` of E, a CPU
copy of the learner's networks (:func:`blueprint`) and the per-copy noise generators of its copies (addressed by
global copy index), and evaluates its copies at their rows of an E-row batch
(:class:`~marljoint.collect.padded.PaddedPolicy`), so the pieces, written side by side along the env axis by
:func:`assemble`, are bit-identical to a rollout of all E copies in one process.
"""

from __future__ import annotations

import copy
import pickle
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from marljoint.collect.base import ActingPolicy
from marljoint.collect.local import LocalCollector
from marljoint.collect.rollout import PER_AGENT_FIELDS, JointRollout
from marljoint.env.base import split_copies
from marljoint.env.pettingzoo import PettingZooJointEnv
from marljoint.policies.distributions import BehaviourPolicy
from marljoint.policies.joint import JointPolicy
from marljoint.policies.normalizer import RunningNormalizer
from marljoint.threads import limit_threads

__all__ = ["NEXT_STATE_FIELDS", "SliceWorker", "assemble", "blueprint", "rollout_piece", "split_copies"]

# Rollout fields of shape [E, N]: the state after the last step.
NEXT_STATE_FIELDS = ("bootstrap_values", "next_alive", "next_acting")


def blueprint(policy: ActingPolicy) -> bytes:
    """The policy's networks (CPU copies), their slots and settings, pickled for :class:`SliceWorker` (a behaviour
    policy is no part of it: it comes with every rollout's request); a :class:`~marljoint.collect.StepActing`
    is pickled whole.

    Raises:
        pickle.PicklingError, TypeError, AttributeError: if a network cannot be pickled.
    """
    if not isinstance(policy, JointPolicy):
        return pickle.dumps({"acting": policy})
    return pickle.dumps(
        {
            "networks": [copy.deepcopy(network).cpu() for network in policy.networks],
            "slots": list(policy.slots),
            "centralized": policy.centralized,
            "value_normalization": policy.value_normalizer is not None,
        }
    )


class SliceWorker:
    """Plays the rollouts of one slice of the env copies, inside a worker process.

    Args:
        env: the slice's copies; its ``first_copy`` is the slice's global start.
        seed: the collection seed (env resets, noise generators).
        total: E, the copies of all slices together.
        plan: :func:`blueprint` of the learner's policy.
        torch_threads: compute threads of this process (default 1: a collecting process computes on one thread,
            :mod:`marljoint.threads`).

    Attributes:
        policy: the CPU copy of the policy (weights loaded before every rollout).
        collector: the :class:`~marljoint.collect.LocalCollector` over the slice.
    """

    def __init__(
        self, env: PettingZooJointEnv, seed: int, total: int, plan: bytes, torch_threads: int | None = None
    ) -> None:
        limit_threads(torch_threads or 1)
        parts = pickle.loads(plan)
        first = env.first_copy
        self.policy: ActingPolicy
        if "acting" in parts:
            self.policy = parts["acting"]
        else:
            normalizer = RunningNormalizer(env.spec.num_agents) if parts["value_normalization"] else None
            self.policy = JointPolicy(env.spec, parts["networks"], parts["slots"], parts["centralized"], normalizer)
        self.collector = LocalCollector(env, seed, first_copy=first, batch_rows=total)

    def collect(
        self, weights: Mapping[str, Any], steps: int, behaviour: BehaviourPolicy | None = None
    ) -> dict[str, Any]:
        """Loads the learner's ``weights`` and plays ``steps`` steps (played by ``behaviour`` when given); returns
        the piece for :func:`assemble`, with ``"busy_seconds"``: how long this took (what
        :class:`~marljoint.collect.balance.WorkBalancer` weighs)."""
        start = time.perf_counter()
        self.policy.load_weights(weights)
        piece = rollout_piece(self.collector.collect(self.policy, steps, behaviour))
        piece["busy_seconds"] = time.perf_counter() - start
        return piece


def rollout_piece(rollout: JointRollout) -> dict[str, Any]:
    """A slice's rollout as numpy arrays (copies), ready to pickle to the learner."""
    piece: dict[str, Any] = {
        name: getattr(rollout, name).numpy().copy() for name in (*PER_AGENT_FIELDS, *NEXT_STATE_FIELDS)
    }
    piece["obs"] = [o.numpy().copy() for o in rollout.obs]
    piece["actions"] = [a.numpy().copy() for a in rollout.actions]
    piece["action_masks"] = [None if m is None else m.numpy().copy() for m in rollout.action_masks]
    piece["episode_returns"] = rollout.episode_returns
    piece["episode_lengths"] = rollout.episode_lengths
    piece["episode_steps"] = rollout.episode_steps
    if rollout.states is not None and rollout.starts is not None:
        piece["states"] = [x.numpy().copy() for x in rollout.states]
        piece["starts"] = rollout.starts.numpy().copy()
    if rollout.final_obs is not None:
        piece["successors"] = {
            "final_obs": [x.numpy().copy() for x in rollout.final_obs],
            "resets": rollout.resets.numpy().copy(),
            "next_obs": [x.numpy().copy() for x in rollout.next_obs],
            "next_action_masks": [None if m is None else m.numpy().copy() for m in rollout.next_action_masks],
        }
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
    _assemble_states(rollout, pieces, slices)
    _assemble_successors(rollout, pieces, slices)
    steps = np.concatenate([p["episode_steps"] for p in pieces])
    # Within one step, one process lists finished episodes in copy order, i.e. slice by slice: a stable sort by
    # step of the slice-ordered concatenation restores exactly that order.
    order = np.argsort(steps, kind="stable")
    rollout.episode_returns = np.concatenate([p["episode_returns"] for p in pieces])[order]
    rollout.episode_lengths = np.concatenate([p["episode_lengths"] for p in pieces])[order]
    rollout.episode_steps = steps[order]


def _assemble_states(
    rollout: JointRollout, pieces: Sequence[dict[str, Any]], slices: Sequence[tuple[int, int]]
) -> None:
    """A recurrent rollout's states and resets from its slices (storage allocated on the first one)."""
    if "states" not in pieces[0]:
        rollout.states = rollout.starts = None
        return
    shapes = [(x.shape[0], rollout.num_envs, *x.shape[2:]) for x in pieces[0]["states"]]
    if rollout.states is None or [tuple(x.shape) for x in rollout.states] != shapes:
        rollout.states = tuple(torch.zeros(shape, device=rollout.alive.device) for shape in shapes)
        rollout.starts = torch.zeros_like(rollout.alive)
    assert rollout.starts is not None
    for piece, (a, b) in zip(pieces, slices):
        for g, x in enumerate(piece["states"]):
            rollout.states[g][:, a:b].copy_(torch.from_numpy(x))
        rollout.starts[:, a:b].copy_(torch.from_numpy(piece["starts"]))


def _assemble_successors(
    rollout: JointRollout, pieces: Sequence[dict[str, Any]], slices: Sequence[tuple[int, int]]
) -> None:
    """The successors of the slices' steps (:meth:`~marljoint.collect.JointRollout.keep_successors`), when kept."""
    if "successors" not in pieces[0]:
        return
    rollout.keep_successors()
    for piece, (a, b) in zip(pieces, slices):
        kept = piece["successors"]
        rollout.resets[:, a:b].copy_(torch.from_numpy(kept["resets"]))
        for g in range(len(rollout.obs)):
            rollout.final_obs[g][:, a:b].copy_(torch.from_numpy(kept["final_obs"][g]))
            rollout.next_obs[g][a:b].copy_(torch.from_numpy(kept["next_obs"][g]))
            mask = rollout.next_action_masks[g]
            if mask is not None:
                mask[a:b].copy_(torch.from_numpy(kept["next_action_masks"][g]))
