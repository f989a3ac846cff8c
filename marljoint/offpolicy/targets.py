"""Target networks: Polyak averaging or periodic copies of the online networks."""

from __future__ import annotations

import copy

import torch
from torch import nn

__all__ = ["TargetNetworks", "polyak_update"]


def polyak_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """``target ← τ·online + (1 − τ)·target``, parameter by parameter, in place (``tau = 1`` copies).

    Example:
        >>> a, b = nn.Linear(1, 1), nn.Linear(1, 1)
        >>> polyak_update(a, b, 1.0)
        >>> bool(torch.equal(a.weight, b.weight))
        True
    """
    with torch.no_grad():
        for t, o in zip(target.parameters(), online.parameters()):
            if tau == 1.0:
                t.copy_(o)
            else:
                t.lerp_(o, tau)


class TargetNetworks:
    """Frozen copies of online networks, updated by :meth:`update` after every gradient step.

    Args:
        online: the online networks (their copies are the targets).
        mode: ``"polyak"`` (every step, coefficient ``tau``) or ``"periodic"`` (a full copy every ``interval``
            gradient steps).
        tau: Polyak coefficient.
        interval: gradient steps between periodic copies.

    Raises:
        ValueError: for an unknown ``mode``.
    """

    def __init__(self, online: list[nn.Module], mode: str, tau: float, interval: int) -> None:
        if mode not in ("polyak", "periodic"):
            raise ValueError(f"target_update must be 'polyak' or 'periodic', got {mode!r}")
        self.online = online
        self.targets = [copy.deepcopy(module).requires_grad_(False) for module in online]
        self.mode, self.tau, self.interval = mode, float(tau), int(interval)
        self.updates = 0

    def update(self) -> None:
        """Counts one gradient step and moves the targets towards the online networks as the mode says."""
        self.updates += 1
        if self.mode == "polyak":
            for target, online in zip(self.targets, self.online):
                polyak_update(target, online, self.tau)
        elif self.updates % self.interval == 0:
            for target, online in zip(self.targets, self.online):
                polyak_update(target, online, 1.0)

    def state_dict(self) -> dict:
        """The targets' weights and the step count."""
        return {"targets": [t.state_dict() for t in self.targets], "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict` output."""
        for target, saved in zip(self.targets, state["targets"]):
            target.load_state_dict(saved)
        self.updates = int(state["updates"])
