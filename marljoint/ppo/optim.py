"""The optimiser group of the trainer's settings: learning rates, Adam's ε, the schedule and the gradient clip."""

from __future__ import annotations

from dataclasses import dataclass

from marljoint.ppo import checks

__all__ = ["OptimConfig"]


@dataclass(frozen=True)
class OptimConfig:
    """What the optimisers read. The fields mean what the :class:`~marljoint.JointTrainerConfig` fields of the
    same names mean, and have their defaults there (declared once): a group is built by the config,
    :attr:`JointTrainerConfig.optim <marljoint.JointTrainerConfig.optim>`, from its fields.

    Example:
        >>> from marljoint import JointTrainerConfig
        >>> JointTrainerConfig(learning_rate=1e-3).optim.critic_lr is None
        True
    """

    learning_rate: float | None
    critic_lr: float | None
    adam_eps: float
    max_grad_norm: float
    anneal_lr: bool | None

    def __post_init__(self) -> None:
        if self.anneal_lr is not None and not isinstance(self.anneal_lr, bool):
            raise ValueError(
                f"anneal_lr must be true, false or None (derived from the agent count), got {self.anneal_lr!r}"
                + (" (a string: write it without quotes in TOML)" if isinstance(self.anneal_lr, str) else "")
            )
        checks.positive("max_grad_norm", self.max_grad_norm, "use math.inf to disable clipping")
        if self.learning_rate is not None:
            checks.positive("learning_rate", self.learning_rate, "e.g. 3e-4, or None to derive it from the env")
            checks.finite("learning_rate", self.learning_rate, "e.g. 3e-4: an infinite step makes every parameter NaN")
        checks.positive("adam_eps", self.adam_eps, "e.g. 1e-5")
        if self.critic_lr is not None:
            checks.positive("critic_lr", self.critic_lr, "or None to train the critic with learning_rate")
            checks.finite("critic_lr", self.critic_lr, "e.g. 1e-3: an infinite step makes every parameter NaN")
