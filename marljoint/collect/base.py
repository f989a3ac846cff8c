"""The Collector protocol: what every collection backend (in-process, subprocess, Ray) does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import torch

from marljoint.collect.rollout import JointRollout
from marljoint.env.spaces import JointSpec
from marljoint.policies.distributions import BehaviourPolicy
from marljoint.policies.joint import JointPolicy

__all__ = ["Collector", "WorkerCollector", "rollout_storage"]


@runtime_checkable
class Collector(Protocol):
    """Plays rollouts of E env copies with a :class:`~marljoint.policies.JointPolicy`.

    Every backend gives the same :class:`~marljoint.collect.JointRollout`, bit for bit, for the same seed and E:
    copy e is seeded and samples its actions by its global index, whichever process holds it.

    Attributes:
        num_envs: E, the env copies of every rollout.
    """

    num_envs: int

    def collect(self, policy: JointPolicy, steps: int, behaviour: BehaviourPolicy | None = None) -> JointRollout:
        """Plays ``steps`` joint steps in every env copy with ``policy``, continuing where the last rollout
        stopped (the copies are reset with the collector's seed before the first).

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
        policy: JointPolicy,
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
