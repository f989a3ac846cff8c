"""The Collector protocol: what every collection backend (in-process, subprocess, Ray) does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from marljoint.collect.padded import RowPadding
from marljoint.collect.rollout import JointRollout
from marljoint.env.base import JointObs
from marljoint.env.spaces import JointSpec
from marljoint.policies.distributions import BehaviourPolicy
from marljoint.policies.joint import JointPolicy

__all__ = ["ActingPolicy", "Collector", "StepActing", "WorkerCollector", "rollout_storage"]


@runtime_checkable
class StepActing(Protocol):
    """A policy that a collector asks for every step's actions, one call per step: the off-policy learners'
    behaviour (ε-greedy on utilities at the schedule's value, sampling actors, noisy deterministic actors).

    A collector playing one stores, besides the steps, what a learner of ``(observation, next observation)``
    pairs needs (:meth:`~marljoint.collect.JointRollout.keep_successors`); values and log-probabilities stay 0.
    Multi-process collectors pickle it to their workers once (it must be picklable) and send :meth:`weights`
    with every rollout.

    Attributes:
        spec: the env's agents and layouts.
    """

    spec: JointSpec

    @property
    def device(self) -> torch.device:
        """Where the rollout storage lives (the CPU)."""
        ...

    def weights(self) -> Mapping[str, Any]:
        """Everything the acting depends on (network weights, the schedule's clock), for a worker's copy."""
        ...

    def load_weights(self, weights: Mapping[str, Any]) -> None:
        """Takes :meth:`weights` of the original."""
        ...

    def act_step(
        self, obs: JointObs, step: int, generators: Sequence[torch.Generator], rows: RowPadding | None = None
    ) -> list[np.ndarray]:
        """The actions of one step of a rollout.

        Args:
            obs: the copies' observations, alive and acting flags and action masks (``R`` rows).
            step: the step's index t in the rollout.
            generators: ``R`` noise generators, row e's from its copy's (:func:`~marljoint.collect.copy_generators`:
                addressed by global copy index, so every backend draws the same numbers for a copy).
            rows: where the R rows sit in the batch of all copies (``None``: they are all of them), for acting
                whose networks must see the rows at their places to give the same bits.

        Returns:
            Per group, ``[R, n_g, *action_shape]`` actions for ``env.step``.
        """
        ...


ActingPolicy = JointPolicy | StepActing
"""What every collector acts with: a :class:`~marljoint.policies.JointPolicy` (sampled through its fast paths,
with values and log-probabilities stored) or a :class:`StepActing`."""


@runtime_checkable
class Collector(Protocol):
    """Plays rollouts of E env copies with a :class:`~marljoint.policies.JointPolicy`.

    Every backend gives the same :class:`~marljoint.collect.JointRollout`, bit for bit, for the same seed and E:
    copy e is seeded and samples its actions by its global index, whichever process holds it.

    Attributes:
        num_envs: E, the env copies of every rollout.
    """

    num_envs: int

    def collect(self, policy: ActingPolicy, steps: int, behaviour: BehaviourPolicy | None = None) -> JointRollout:
        """Plays ``steps`` joint steps in every env copy with ``policy`` (a :class:`~marljoint.policies.JointPolicy`
        or a :class:`StepActing`), continuing where the last rollout stopped (the copies are reset with the
        collector's seed before the first).

        ``behaviour`` (a :class:`~marljoint.policies.BehaviourPolicy`, e.g. a
        :class:`~marljoint.policies.UniformMixture`) plays in the policy's place when given: the actions are drawn
        from it and the rollout stores its log-probabilities. Workers receive it with each rollout's request.

        Returns:
            The rollout ``[T, E, ...]`` on the policy's device; its storage is reused by the next call.
        """
        ...

    def state(self) -> dict[str, Any] | None:
        """Where the next rollout starts (the env copies mid-episode and the copies' noise generators), for a
        bit-identical resume; ``None`` before the first rollout."""
        ...

    def load_state(self, state: Mapping[str, Any] | None) -> None:
        """Restores :meth:`state` output; ``None`` makes the next rollout reset the copies."""
        ...

    def close(self) -> None:
        """Releases what the collector started (worker actors); an env it was given stays open."""
        ...


@runtime_checkable
class WorkerCollector(Protocol):
    """A :class:`Collector` whose rollouts worker processes play (subprocess or Ray): what
    :class:`~marljoint.collect.OverlappedCollector` needs to collect one rollout ahead in the background.

    Attributes:
        num_envs: E.
        spec: the env's agents and layouts (the rollouts' shapes).
        in_workers: whether the policy acts in the workers (``None`` before the first rollout); False when it acts in
            this process, which cannot overlap an update of the same policy.
    """

    num_envs: int
    spec: JointSpec
    in_workers: bool | None

    def collect(
        self,
        policy: ActingPolicy,
        steps: int,
        weights: Mapping[str, Any] | None = None,
        into: JointRollout | None = None,
        behaviour: BehaviourPolicy | None = None,
    ) -> JointRollout:
        """:meth:`Collector.collect` acting with ``weights`` (a :meth:`~marljoint.policies.JointPolicy.weights`
        snapshot; default the policy's current ones) into the storage ``into`` (default the collector's own), played
        by ``behaviour`` when given."""
        ...

    def state(self) -> dict[str, Any] | None:
        """As :meth:`Collector.state`."""
        ...

    def load_state(self, state: Mapping[str, Any] | None) -> None:
        """As :meth:`Collector.load_state`."""
        ...

    def close(self) -> None:
        """As :meth:`Collector.close`."""
        ...


def rollout_storage(
    storage: JointRollout | None, spec: JointSpec, steps: int, num_envs: int, device: torch.device
) -> JointRollout:
    """``storage`` if it has the given shape and device, else a newly allocated :class:`JointRollout`."""
    device = torch.device(device)
    if storage is not None and storage.steps == steps and storage.num_envs == num_envs:
        held = storage.rewards.device
        if held.type == device.type and (device.index is None or held.index == device.index):
            return storage
    return JointRollout.allocate(spec, steps, num_envs, device)
