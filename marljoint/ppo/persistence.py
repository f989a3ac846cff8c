"""The persistence of a :class:`~marljoint.ppo.JointMultiAgentTrainer`: its state, checkpoint files and the
collector's env state, mixed into the trainer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from marljoint.collect.base import Collector
from marljoint.collect.rollout import JointRollout
from marljoint.collect.snapshots import trusted_state
from marljoint.env.spaces import JointSpec
from marljoint.policies.normalizer import RunningNormalizer
from marljoint.ppo.build import check_trunk_layout
from marljoint.ppo.config import JointTrainerConfig
from marljoint.ppo.learner import Learner

__all__ = ["TrainerPersistence"]


class TrainerPersistence:
    """:meth:`state_dict` / :meth:`load_state_dict`, :meth:`save` / :meth:`load` and :meth:`env_state` /
    :meth:`load_env_state` of the trainer, which sets the attributes below."""

    config: JointTrainerConfig
    spec: JointSpec
    learner: Learner
    collector: Collector
    value_normalizer: RunningNormalizer | None
    iteration: int
    env_steps: int
    _generator: torch.Generator
    _pending: JointRollout | None

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training: networks, optimizers, normaliser, generator, counters, config."""
        return {
            "config": self.config.to_dict(),
            "agents": list(self.spec.agents),
            "policies": [u.policy.state_dict() for u in self.learner.units],
            "optimizers": [[o.state_dict() for o in u.optimizers()] for u in self.learner.units],
            "value_normalizer": None if self.value_normalizer is None else self.value_normalizer.state_dict(),
            "generator": self._generator.get_state(),
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "lr_scale": self.learner.lr_scale,
            "pending_moves": None if self._pending is None else self._pending.to("cpu").fields(),
            **({} if self.learner.regularizer is None else {"regularizer": self.learner.regularizer.state_dict()}),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` output into a trainer built for the same env and config.

        Raises:
            ValueError: if the agents or the number of networks differ.
        """
        if list(state["agents"]) != list(self.spec.agents):
            raise ValueError(f"checkpoint agents {state['agents']} differ from this env's {list(self.spec.agents)}")
        if len(state["policies"]) != len(self.learner.units):
            raise ValueError(
                f"checkpoint holds {len(state['policies'])} networks, this trainer has {len(self.learner.units)}; "
                "build the trainer with the same share_parameters setting"
            )
        for unit, policy_state, optimizer_states in zip(self.learner.units, state["policies"], state["optimizers"]):
            check_trunk_layout(unit.policy, policy_state)
            unit.policy.load_state_dict(policy_state)
            for optimizer, optimizer_state in zip(unit.optimizers(), optimizer_states):
                optimizer.load_state_dict(optimizer_state)
        if self.value_normalizer is not None and state["value_normalizer"] is not None:
            self.value_normalizer.load_state_dict(state["value_normalizer"])
        self._generator.set_state(state["generator"])
        self.iteration = int(state["iteration"])
        self.env_steps = int(state["env_steps"])
        self.learner.lr_scale = float(state.get("lr_scale", 1.0))
        if self.learner.regularizer is not None and state.get("regularizer") is not None:
            self.learner.regularizer.load_state_dict(state["regularizer"])
        pending = state.get("pending_moves")
        self._pending = (
            None if pending is None else JointRollout(**{**pending, "spec": self.spec}).to(self.config.acting_device)
        )

    def save(self, path: str) -> None:
        """Writes :meth:`state_dict` to ``path`` atomically (temporary file, fsync, rename)."""
        from marljoint.checkpoint import atomic_torch_save

        atomic_torch_save(self.state_dict(), path)

    def load(self, path: str) -> None:
        """Loads a checkpoint written by :meth:`save`, or one of ``marljoint train``'s (``checkpoints/ckpt_*.pt``:
        its trainer part; :meth:`load_env_state` takes its ``"env"`` part).

        Raises:
            ValueError: if the file is not a readable marljoint checkpoint, or holds objects that could run code.
        """
        from marljoint.checkpoint import load_checkpoint

        state = load_checkpoint(path)
        self.load_state_dict(state["trainer"] if "trainer" in state and "policies" not in state else state)

    def env_state(self) -> dict[str, Any] | None:
        """Where the next rollout starts: the collector's :meth:`~marljoint.collect.Collector.state` (the env
        copies mid-episode and their noise generators).

        Saved beside :meth:`state_dict`, it makes a resumed run bit-identical to an uninterrupted one.

        Returns:
            ``None`` before the first rollout (the next one resets the env); else ``{"env": snapshot, ...}``, or
            with Ray workers ``{"workers": [snapshot per worker]}``.

        Raises:
            TypeError: if the env has no ``get_state()`` or cannot be pickled.
        """
        return self.collector.state()

    def load_env_state(self, state: Mapping[str, Any] | None, trust_snapshot: bool = False) -> None:
        """Restores :meth:`env_state` output; ``None`` makes the next rollout reset the env with ``config.seed``
        (and drops the moves pending from the last rollout, whose episodes then end unseen).

        The env snapshot is pickled env objects, unpickled only when signed with this user's key
        (:mod:`marljoint.trust`): a state someone else saved is refused unless ``trust_snapshot``.

        Args:
            state: :meth:`env_state` output, or ``None``.
            trust_snapshot: restore a snapshot signed by someone else (a run you received and trust), re-signing it
                with your key. Unpickling it runs whatever code it names: only for runs you trust.

        Raises:
            marljoint.trust.SnapshotTrustError: for a snapshot not signed with this user's key (without
                ``trust_snapshot``), before anything of it is unpickled.
            ValueError: for a state saved with another collection backend or number of workers (naming them).
        """
        if trust_snapshot:
            state = trusted_state(state)
        if state is None:
            self._pending = None
        self.collector.load_state(state)
