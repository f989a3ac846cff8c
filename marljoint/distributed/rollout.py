"""Rollout workers as Ray actors: each steps a contiguous slice of the env copies with a CPU copy of the policies.

The learner broadcasts its weights once per iteration (one ``ray.put``), every worker plays ``rollout_steps`` steps
in its copies, and the pieces are written side by side along the env axis of the learner's
:class:`~marljoint.collect.JointRollout`. Env seeds and action noise are addressed by each copy's global index
and every worker evaluates its copies at their rows of a batch of all E copies (matrix-product kernels choose their
summation order by shape), so the result is bit-identical to collecting all copies in one process.

A worker that dies is replaced: the new actor restores the dead one's last snapshot (its env copies mid-episode and
its per-copy noise generators, taken after every rollout) and collects the same piece again with the same weights.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from marljoint.collect.noise import generators_from_states
from marljoint.ppo.slices import assemble, blueprint, rollout_piece, slice_trainer

if TYPE_CHECKING:  # pragma: no cover
    from marljoint.collect.rollout import JointRollout
    from marljoint.ppo.trainer import JointMultiAgentTrainer

__all__ = ["RayRolloutWorkers", "WorkerLostError", "connect_ray", "require_ray", "worker_slices"]


class WorkerLostError(RuntimeError):
    """A rollout worker kept dying after the allowed number of restarts."""


def require_ray() -> Any:
    """Imports Ray, or raises ImportError saying how to install it."""
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - ray is installed wherever these tests run
        raise ImportError(
            'Ray rollout workers need Ray: pip install "marljoint[ray]" (or set num_workers=0 to collect in-process)'
        ) from exc
    return ray


def connect_ray(address: str | None = None, num_cpus: int | None = None) -> Any:
    """Starts or joins Ray once: ``address=None`` starts a local instance, ``"auto"`` or ``"ray://host:port"`` joins a
    running cluster. Does nothing if Ray already runs in this process.

    A local instance runs its workers at the driver's priority (``RAY_worker_niceness=0`` unless already set): Ray's
    default niceness of 15 lets any other busy process starve the rollout workers, which measured 100× slower on a
    2-core machine with one other job running, while the driver here mostly waits for its workers.

    Args:
        address: the cluster address (``None``: a new local instance).
        num_cpus: CPUs of a new local instance (``None``: all of this machine's).

    Returns:
        The ``ray`` module.

    Raises:
        ConnectionError: if no cluster answers at ``address``.
    """
    ray = require_ray()
    if ray.is_initialized():
        return ray
    if address is None:
        os.environ.setdefault("RAY_worker_niceness", "0")
    try:
        ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    except ConnectionError as exc:
        raise ConnectionError(
            f"no Ray cluster answers at {address!r} ({exc}); start one with `ray start --head`"
        ) from exc
    return ray


def worker_slices(num_envs: int, num_workers: int) -> list[tuple[int, int]]:
    """Contiguous ``[start, stop)`` env-copy ranges, one per worker, as equal as possible.

    Raises:
        ValueError: if there are fewer copies than workers.
    """
    if num_workers > num_envs:
        raise ValueError(
            f"num_workers={num_workers} Ray workers need at least as many env copies, got num_envs={num_envs}; "
            "raise num_envs or lower num_workers"
        )
    bounds = np.linspace(0, num_envs, num_workers + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


class _RolloutWorker:
    """Body of one rollout actor: a learner-less trainer over copies ``[start, stop)``."""

    def __init__(
        self, env_fn: Callable[[], Any], start: int, stop: int, total: int, config: dict[str, Any], blueprint: bytes
    ) -> None:
        from marljoint.env.pettingzoo import PettingZooJointEnv

        env = PettingZooJointEnv(env_fn, num_envs=stop - start, seed=config["seed"])
        env._copy_offset = start
        self.trainer = slice_trainer(env, start, total, config, blueprint)

    def pid(self) -> int:
        return os.getpid()

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Puts the copies and noise generators back where :meth:`collect` left them."""
        trainer = self.trainer
        trainer.load_env_state({"env": snapshot["env"]})
        trainer._copy_generators = generators_from_states(snapshot["copy_generators"])

    def collect(
        self, weights: dict[str, Any], restore: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Restores ``restore`` if given, loads the learner's weights and plays one rollout; returns the rollout's
        arrays and the snapshot after it."""
        if restore is not None:
            self.restore(restore)
        trainer = self.trainer
        trainer.joint_policy.load_weights(weights)
        piece = rollout_piece(trainer.collect_rollout())
        snapshot = {
            "env": trainer.env_state()["env"],
            "copy_generators": [g.get_state() for g in trainer._copy_generators],
        }
        return piece, snapshot


class RayRolloutWorkers:
    """K Ray actors that collect a trainer's rollouts, each over a contiguous slice of the env copies.

    Built by :class:`~marljoint.JointMultiAgentTrainer` when ``config.num_workers > 0``; Ray is started locally
    (``ray.init()``) unless it already runs (``ray.init(address=...)`` first to use a cluster).

    Args:
        trainer: the learner; its networks are copied to the workers once, its weights sent every iteration.
        env_fn: factory of one env copy (the learner env's ``env_fn``), pickled to the workers.
        num_envs: total env copies E, split over the workers.
        num_workers: K actors (each reserves one Ray CPU).
        max_restarts: how many times in a row one worker's piece is re-collected after its actor died.

    Raises:
        ValueError: if E < K, or the Ray cluster has fewer CPUs than K.
    """

    def __init__(
        self,
        trainer: JointMultiAgentTrainer,
        env_fn: Callable[[], Any],
        num_envs: int,
        num_workers: int,
        max_restarts: int = 3,
    ) -> None:
        self.slices = worker_slices(num_envs, num_workers)
        ray = connect_ray()
        cpus = ray.cluster_resources().get("CPU", 0)
        if cpus < num_workers:
            raise ValueError(
                f"num_workers={num_workers} Ray rollout workers need {num_workers} CPUs, but the Ray cluster has "
                f"{cpus:g}; lower num_workers or add CPUs to the cluster"
            )
        self._ray = ray
        self._env_fn = env_fn
        self._config = trainer.config.to_dict()
        self._blueprint = blueprint(trainer)
        self._actor_class = ray.remote(num_cpus=1, max_restarts=0)(_RolloutWorker)
        self.max_restarts = max_restarts
        self.restarts = 0
        self.snapshots: list[dict[str, Any] | None] = [None] * num_workers
        self._pending_restore: list[dict[str, Any] | None] = [None] * num_workers
        self.actors = [self._spawn(k) for k in range(num_workers)]

    @property
    def num_workers(self) -> int:
        """K."""
        return len(self.slices)

    def _spawn(self, k: int) -> Any:
        start, stop = self.slices[k]
        total = self.slices[-1][1]
        # A new actor starts from the last snapshot of the one it replaces (sent with its first collect call).
        self._pending_restore[k] = self.snapshots[k]
        return self._actor_class.remote(self._env_fn, start, stop, total, self._config, self._blueprint)

    def _submit(self, k: int, weights_ref: Any) -> Any:
        restore, self._pending_restore[k] = self._pending_restore[k], None
        return self.actors[k].collect.remote(weights_ref, restore)

    def collect(self, weights: dict[str, Any], rollout: JointRollout) -> None:
        """Collects one rollout into ``rollout`` (allocated for all E copies), replacing workers that die.

        Raises:
            WorkerLostError: if one worker's piece failed ``max_restarts + 1`` times in a row.
        """
        ray = self._ray
        ref = ray.put(weights)
        pending = {k: self._submit(k, ref) for k in range(self.num_workers)}
        failures = [0] * self.num_workers
        pieces: list[dict[str, Any] | None] = [None] * self.num_workers
        while pending:
            done, _ = ray.wait(list(pending.values()), num_returns=1)
            k = next(k for k, r in pending.items() if r == done[0])
            del pending[k]
            try:
                piece, snapshot = ray.get(done[0])
            except ray.exceptions.RayActorError as exc:
                failures[k] += 1
                self.restarts += 1
                if failures[k] > self.max_restarts:
                    raise WorkerLostError(
                        f"rollout worker {k} (env copies {self.slices[k][0]}..{self.slices[k][1] - 1}) died "
                        f"{failures[k]} times in one iteration; last error: {exc}"
                    ) from exc
                self.actors[k] = self._spawn(k)
                pending[k] = self._submit(k, ref)
                continue
            pieces[k] = piece
            self.snapshots[k] = snapshot
        assemble(rollout, pieces, self.slices)

    def states(self) -> list[dict[str, Any] | None]:
        """Every worker's snapshot after its last rollout (``None`` before the first)."""
        return list(self.snapshots)

    def load_states(self, states: Sequence[dict[str, Any] | None]) -> None:
        """Restores :meth:`states` output; ``None`` entries restart that worker from a fresh reset.

        Raises:
            ValueError: if the number of snapshots differs from the number of workers.
        """
        if len(states) != self.num_workers:
            raise ValueError(
                f"the saved env state holds {len(states)} Ray workers' snapshots, this trainer has "
                f"{self.num_workers} workers; resume with the same num_workers"
            )
        self.close()
        self.snapshots = list(states)
        self.actors = [self._spawn(k) for k in range(self.num_workers)]

    def pids(self) -> list[int]:
        """The process id of every worker actor."""
        return self._ray.get([a.pid.remote() for a in self.actors])

    def close(self) -> None:
        """Kills the worker actors."""
        for actor in self.actors:
            self._ray.kill(actor)
        self.actors = []
