"""The PPO group of the trainer's settings: the rollout's shape, the returns, the loss and the update schedule."""

from __future__ import annotations

import math
from dataclasses import dataclass

from marljoint.ppo import checks

__all__ = ["PpoConfig"]


@dataclass(frozen=True)
class PpoConfig:
    """What the PPO update reads: rollout size, GAE, loss coefficients and minibatch schedule.

    The fields mean what the :class:`~marljoint.JointTrainerConfig` fields of the same names mean, and have
    their defaults there (declared once): a group is built by the config, :attr:`JointTrainerConfig.ppo
    <marljoint.JointTrainerConfig.ppo>`, from its fields.

    Example:
        >>> from marljoint import JointTrainerConfig
        >>> JointTrainerConfig(num_envs=4, rollout_steps=32, minibatch_size=64).ppo.minibatches_per_epoch
        2
    """

    num_envs: int
    rollout_steps: int
    gamma: float | None
    gae_lambda: float
    bootstrap_truncation: bool
    clip_range: float
    clip_range_vf: float
    vf_coef: float
    ent_coef: float | None
    normalize_advantages: bool
    value_normalization: bool
    n_epochs: int
    minibatch_size: int
    num_minibatches: int | None
    iterate_all_minibatches: bool
    max_minibatches_per_epoch: int | None
    target_kl: float | None
    uniform_mix: float
    bptt_length: int | None

    def __post_init__(self) -> None:
        checks.booleans(
            self, ("normalize_advantages", "iterate_all_minibatches", "value_normalization", "bootstrap_truncation")
        )
        self._check_schedule()
        if self.gamma is not None:
            checks.in_unit_interval("gamma", self.gamma)
        checks.in_unit_interval("gae_lambda", self.gae_lambda)
        checks.positive("clip_range", self.clip_range, "e.g. 0.2")
        checks.positive("clip_range_vf", self.clip_range_vf, "use math.inf for the plain squared error")
        checks.non_negative("vf_coef", self.vf_coef)
        if self.ent_coef is not None:
            checks.non_negative("ent_coef", self.ent_coef)
        if self.target_kl is not None:
            checks.positive("target_kl", self.target_kl, "or None to disable early stopping")
        if isinstance(self.uniform_mix, bool) or not isinstance(self.uniform_mix, (int, float)):
            raise ValueError(f"uniform_mix must be a number in [0, 1), got {self.uniform_mix!r}")
        if not 0.0 <= self.uniform_mix < 1.0:
            raise ValueError(
                f"uniform_mix must be in [0, 1) (the share of uniform play in the rollouts' behaviour policy), got "
                f"{self.uniform_mix!r}; 0 plays the policy itself"
            )

    def _check_schedule(self) -> None:
        """Refuses a rollout shape or a minibatch schedule that cannot be cut."""
        checks.positive_int("num_envs", self.num_envs)
        checks.positive_int("rollout_steps", self.rollout_steps)
        checks.positive_int("n_epochs", self.n_epochs)
        checks.positive_int("minibatch_size", self.minibatch_size)
        if self.num_minibatches is not None:
            checks.positive_int("num_minibatches", self.num_minibatches)
        if self.max_minibatches_per_epoch is not None and not checks.is_int(self.max_minibatches_per_epoch):
            raise ValueError(
                f"max_minibatches_per_epoch must be an integer or None, got {self.max_minibatches_per_epoch!r}"
            )
        if self.bptt_length is not None and (
            not checks.is_int(self.bptt_length) or not 1 <= self.bptt_length <= self.rollout_steps
        ):
            raise ValueError(
                f"bptt_length must be an integer from 1 to rollout_steps ({self.rollout_steps}), or None (the whole "
                f"rollout), got {self.bptt_length!r}; a chunk cannot be longer than the rollout it is cut from (lower "
                "bptt_length or raise rollout_steps)"
            )

    @property
    def chunk_length(self) -> int:
        """Steps per BPTT chunk: :attr:`bptt_length`, or the whole rollout."""
        return self.rollout_steps if self.bptt_length is None else self.bptt_length

    @property
    def batch_rows(self) -> int:
        """Rows per agent in one rollout: ``rollout_steps × num_envs``."""
        return self.rollout_steps * self.num_envs

    def minibatch_rows(self, rows: int) -> int:
        """Rows (or, for a recurrent rollout, whole chunks) per minibatch when an epoch holds ``rows`` of them:
        ``ceil(rows / num_minibatches)``, or :attr:`minibatch_size` when :attr:`num_minibatches` is ``None``."""
        if self.num_minibatches is None:
            return self.minibatch_size
        return max(1, math.ceil(rows / self.num_minibatches))

    @property
    def minibatches_per_epoch(self) -> int:
        """Minibatch steps per epoch for a rollout of :attr:`batch_rows` rows, after the single-minibatch mode and
        the cap (see :attr:`JointTrainerConfig.minibatches_per_epoch
        <marljoint.JointTrainerConfig.minibatches_per_epoch>`)."""
        if self.num_minibatches is None:
            full = math.ceil(self.batch_rows / self.minibatch_size)
        else:
            full = min(self.num_minibatches, self.batch_rows)
        count = full if self.iterate_all_minibatches else 1
        if self.max_minibatches_per_epoch is not None:
            count = min(count, max(1, self.max_minibatches_per_epoch))
        return count
