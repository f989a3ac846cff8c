"""The runtime group of the trainer's settings: the seed, the devices and the compute threads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from marljoint.ppo import checks

__all__ = ["RuntimeConfig"]


@dataclass(frozen=True)
class RuntimeConfig:
    """Where and how reproducibly the trainer computes. The fields mean what the
    :class:`~marljoint.JointTrainerConfig` fields of the same names mean, and have their defaults there (declared
    once): a group is built by the config, :attr:`JointTrainerConfig.runtime
    <marljoint.JointTrainerConfig.runtime>`, from its fields.

    Example:
        >>> from marljoint import JointTrainerConfig
        >>> JointTrainerConfig(seed=3, device="cpu").runtime.acting_device
        'auto'
    """

    seed: int
    device: str
    acting_device: str
    torch_threads: int | str | None

    def __post_init__(self) -> None:
        _check_device(self.device)
        _check_acting_device(self.acting_device, self.device)
        if (
            self.torch_threads is not None
            and self.torch_threads != "auto"
            and (not checks.is_int(self.torch_threads) or self.torch_threads < 1)
        ):
            raise ValueError(
                f"torch_threads must be a positive integer, 'auto' (the cores the env workers leave free) or None "
                f"(torch's own setting), got {self.torch_threads!r}"
            )
        if not checks.is_int(self.seed) or not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be an integer in [0, 2**63 - 1], got {self.seed!r}")


def _check_device(value: Any, name: str = "device") -> None:
    """Refuses what is not a torch device string (whether the device exists is checked when a trainer is built)."""
    import torch

    try:
        if not isinstance(value, str):
            raise TypeError
        torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(
            f"{name} must {'be auto or ' if name == 'acting_device' else ''}name a torch device such as 'cpu', "
            f"'cuda' or 'cuda:1', got {value!r}"
        ) from None


def _check_acting_device(value: Any, device: str) -> None:
    """Refuses an acting device other than ``"auto"``, ``"cpu"`` or the learner's ``device``."""
    import torch

    if value == "auto":
        return
    _check_device(value, name="acting_device")
    if torch.device(value) not in (torch.device("cpu"), torch.device(device)):
        raise ValueError(
            f"acting_device must be 'auto', 'cpu' or the learner's device {device!r}, got {value!r}; the policy "
            "acts either on a CPU copy of the networks or with the networks themselves"
        )
