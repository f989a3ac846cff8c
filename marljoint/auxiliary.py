"""The auxiliary-loss interface: a loss over every agent's encoder features on the same minibatch rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

import torch

__all__ = ["AuxFn", "AuxOutput"]


class AuxOutput(NamedTuple):
    """What an auxiliary loss returns.

    Attributes:
        loss: scalar tensor added to the joint loss (already scaled by its coefficient).
        metrics: plain floats to log (e.g. the raw, unscaled value per agent pair), keyed by metric name.
    """

    loss: torch.Tensor
    metrics: Mapping[str, float]


@runtime_checkable
class AuxFn(Protocol):
    """A cross-agent auxiliary loss, called once per minibatch inside the joint loss.

    Args:
        features: per agent in ``possible_agents`` order, ``[B, d_i]`` encoder features on the SAME B rows.
        alive: ``[B, N]`` bool, agent i is present on the row (in the episode, whether or not it moves there: in
            turn-based games the waiting players are present); rows where agent i is absent must not contribute to
            terms involving agent i.

    Returns:
        An :class:`AuxOutput`, or a bare scalar tensor.
    """

    def __call__(self, features: Sequence[torch.Tensor], alive: torch.Tensor) -> AuxOutput | torch.Tensor: ...
