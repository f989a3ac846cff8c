"""The network group of the trainer's settings: encoders, sharing, the critic's kind and the recurrent cores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from marljoint.ppo import checks

__all__ = ["NetworkConfig"]


@dataclass(frozen=True)
class NetworkConfig:
    """What building the networks reads. The fields mean what the :class:`~marljoint.JointTrainerConfig` fields of
    the same names mean, and have their defaults there (declared once): a group is built by the config,
    :attr:`JointTrainerConfig.network <marljoint.JointTrainerConfig.network>`, from its fields.

    Example:
        >>> from marljoint import JointTrainerConfig
        >>> JointTrainerConfig(hidden_sizes=[32]).network.hidden_sizes
        (32,)
    """

    hidden_sizes: tuple[int, ...]
    share_parameters: bool
    share_trunk: bool
    centralized_critic: bool
    critic_per_frame: bool
    normalize_observations: bool | None
    recurrent: str | None
    rnn_hidden_size: int
    recurrent_replay: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden_sizes", _widths(self.hidden_sizes))
        checks.booleans(self, ("share_parameters", "centralized_critic", "critic_per_frame", "share_trunk"))
        if self.normalize_observations is not None and not isinstance(self.normalize_observations, bool):
            raise ValueError(
                f"normalize_observations must be true, false or None (derived from the env), got "
                f"{self.normalize_observations!r}"
            )
        self._check_recurrent()
        self._check_critic_per_frame()

    @property
    def own_critic_trunk(self) -> bool:
        """Whether the critic has a trunk of its own (no :attr:`share_trunk`, or a centralised critic)."""
        return self.centralized_critic or not self.share_trunk

    def _check_critic_per_frame(self) -> None:
        """Refuses ``critic_per_frame`` where a per-frame critic does not exist: without a centralised critic (a
        local critic reads one agent's observation), with one network per agent (each has its own critic), or
        with recurrent cores (whose state is one agent's)."""
        if not self.critic_per_frame:
            return
        needs = (
            ("centralized_critic", not self.centralized_critic, "a local critic reads one agent's observation"),
            ("share_parameters", not self.share_parameters, "one network per agent has a critic per agent"),
            ("recurrent", self.recurrent is not None, "a recurrent critic keeps one state per agent"),
        )
        for name, broken, why in needs:
            if broken:
                fix = "recurrent = None" if name == "recurrent" else f"{name} = true"
                raise ValueError(f"critic_per_frame=True needs {fix} ({why}); set {fix}, or critic_per_frame = false")

    def _check_recurrent(self) -> None:
        from marljoint.policies.recurrent import RECURRENT_KINDS, RECURRENT_REPLAYS

        if self.recurrent_replay not in RECURRENT_REPLAYS:
            raise ValueError(
                f"recurrent_replay must be one of {list(RECURRENT_REPLAYS)}, got {self.recurrent_replay!r}; 'auto' "
                "picks the fused GRU/LSTM kernel on CUDA and the stacked cells elsewhere"
            )
        if self.recurrent is not None and self.recurrent not in RECURRENT_KINDS:
            raise ValueError(
                f"recurrent must be one of {list(RECURRENT_KINDS)} (the recurrent cell) or None (feed-forward), "
                f"got {self.recurrent!r}"
            )
        checks.positive_int("rnn_hidden_size", self.rnn_hidden_size)


def _widths(value: Any) -> tuple[int, ...]:
    """``hidden_sizes`` as a tuple of positive ints; a string, a number or a non-integer width is refused."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ValueError(f"hidden_sizes must be a list of positive integer widths such as [64, 64], got {value!r}")
    widths = tuple(value)
    if not widths or any(not checks.is_int(h) or h < 1 for h in widths):
        raise ValueError(f"hidden_sizes must be a non-empty list of positive integer widths, got {list(widths)!r}")
    return tuple(int(h) for h in widths)
