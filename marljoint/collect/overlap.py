"""Overlapped collection (``policy_lag=1``): the workers collect the next rollout while the learner updates.

:class:`OverlappedCollector` wraps a multi-process collector (subprocess or Ray). Each :meth:`collect` returns the
rollout that was being collected in the background and, before returning, starts the next one with a snapshot of
the policy's current weights. The caller then updates the policy while the workers play: rollout k + 1 is
collected with the weights of update k − 1 (the first two rollouts both with the initial weights). The waiting for
the workers happens in one background thread of this process, which holds no lock while the workers run, so the
update proceeds at full speed meanwhile.

The schedule depends on nothing but the calls, so the rollouts are the same bits for every backend and every
speed; :meth:`state` finishes the rollout in flight and keeps it, so a resumed run continues exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from marljoint.collect.base import WorkerCollector
from marljoint.collect.rollout import JointRollout
from marljoint.policies.distributions import BehaviourPolicy
from marljoint.policies.joint import JointPolicy

__all__ = ["OverlappedCollector"]


class OverlappedCollector:
    """A :class:`~marljoint.collect.Collector` that collects one rollout ahead, one update behind.

    Args:
        inner: a :class:`~marljoint.collect.SubprocessCollector` or :class:`~marljoint.collect.RayCollector` (a
            :class:`~marljoint.collect.base.WorkerCollector`).

    Attributes:
        inner: the wrapped collector.

    Raises:
        TypeError: if ``inner`` is not a :class:`~marljoint.collect.base.WorkerCollector`.
    """

    def __init__(self, inner: WorkerCollector) -> None:
        if not isinstance(inner, WorkerCollector):
            raise TypeError(
                f"OverlappedCollector wraps a collector whose workers play the rollouts (a WorkerCollector: "
                f"SubprocessCollector or RayCollector), got {type(inner).__name__}; collect with policy_lag=0 instead"
            )
        self.inner = inner
        self.num_envs = inner.num_envs
        self._executor: ThreadPoolExecutor | None = None
        self._ahead: Future[JointRollout] | None = None
        self._ready: JointRollout | None = None
        # The rollout returned last: the caller trains on it until the next call, after which it is filled again.
        self._lent: JointRollout | None = None

    def collect(self, policy: JointPolicy, steps: int, behaviour: BehaviourPolicy | None = None) -> JointRollout:
        """The rollout collected since the last call (the first call collects one now), after starting the next
        with the policy's current weights, played by ``behaviour`` when given.

        Raises:
            ValueError: if the policy cannot run in the workers (then the workers only step the copies and the
                policy acts in this process, which cannot overlap an update of the same policy).
        """
        rollout = self._take()
        if rollout is not None and rollout.rewards.device != torch.device(policy.device):
            rollout = rollout.to(policy.device)  # collected ahead before a resume, kept on the CPU
        if rollout is None or rollout.steps != steps:
            rollout = self.inner.collect(policy, steps, behaviour=behaviour)
        if self.inner.in_workers is False:
            raise ValueError(
                "policy_lag=1 needs the policies to act in the worker processes, but they cannot be pickled there "
                "(see the warning above); use policy_lag=0"
            )
        # The caller trains on this rollout meanwhile, so the next one goes into the one it has finished with.
        free = self._lent if self._lent is not None and self._lent is not rollout else None
        if free is None:
            free = JointRollout.allocate(self.inner.spec, steps, self.num_envs, torch.device(policy.device))
        self._lent = rollout
        weights = policy.weights()  # numpy copies: the update may change the networks in place meanwhile
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="marljoint-collect")
        self._ahead = self._executor.submit(
            self.inner.collect, policy, steps, weights=weights, into=free, behaviour=behaviour
        )
        return rollout

    def _take(self) -> JointRollout | None:
        """The rollout collected ahead (waiting for it), or ``None``."""
        if self._ahead is not None:
            future, self._ahead = self._ahead, None
            self._ready = future.result()
        ready, self._ready = self._ready, None
        return ready

    def _settle(self) -> None:
        """Waits for the rollout in flight and keeps it for the next :meth:`collect`."""
        if self._ahead is not None:
            future, self._ahead = self._ahead, None
            self._ready = future.result()

    def state(self) -> dict[str, Any] | None:
        """The wrapped collector's state after the rollout collected ahead, and that rollout (``"ahead"``, its
        fields on the CPU), which the next :meth:`collect` returns; ``None`` before the first rollout."""
        self._settle()
        inner = self.inner.state()
        if inner is None:
            return None
        ahead = None
        if self._ready is not None:
            # What the trainer attaches after collection (moves carried in, deferred rows) is not the rollout's.
            ahead = {**self._ready.to("cpu").fields(), "carried": None, "deferred": None}
        return {"inner": inner, "ahead": ahead}

    def load_state(self, state: Mapping[str, Any] | None) -> None:
        """Restores :meth:`state` output (or a plain collector state, which then collects afresh at the next call);
        ``None`` resets.

        Raises:
            ValueError: for a state the wrapped collector cannot read.
        """
        self._settle()
        self._ready = None
        if state is None or "inner" not in state:
            self.inner.load_state(state)
            return
        self.inner.load_state(state["inner"])
        ahead = state.get("ahead")
        if ahead is not None:
            self._ready = JointRollout(**{**ahead, "spec": self.inner.spec})

    def close(self) -> None:
        """Waits for the rollout in flight, stops the thread and closes the wrapped collector."""
        if self._ahead is not None:
            try:
                self._ahead.result()
            except Exception:  # noqa: BLE001 - closing: the error was the rollout's, not the close's
                pass
            self._ahead = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self.inner.close()
