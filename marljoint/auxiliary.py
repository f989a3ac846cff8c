"""The auxiliary-loss interface: a loss over every agent's encoder features on the same minibatch rows."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

import torch

__all__ = ["AuxFn", "AuxOutput", "features_only"]


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


def features_only(loss_fn: Callable[[Sequence[torch.Tensor]], AuxOutput | torch.Tensor]) -> AuxFn:
    """An :class:`AuxFn` from a loss of the features alone: ``loss_fn(features)``, called with the alive mask left
    out. The trainer calls every ``aux_fn`` as ``aux_fn(features, alive)``; wrap a one-argument loss with this once,
    where it is passed (``trainer.update(rollout, aux_fn=features_only(my_loss))``). Such a loss also sees the rows
    of absent agents (whose features are computed from what they last observed).

    Example:
        >>> loss = features_only(lambda features: (features[0] - features[1]).pow(2).mean())
        >>> float(loss([torch.zeros(2, 3), torch.ones(2, 3)], torch.ones(2, 2, dtype=torch.bool)))
        1.0
    """

    def aux_fn(features: Sequence[torch.Tensor], alive: torch.Tensor) -> AuxOutput | torch.Tensor:
        return loss_fn(features)

    return aux_fn
