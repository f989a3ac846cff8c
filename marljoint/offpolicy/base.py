"""The OffPolicyAlgorithm protocol: what the off-policy trainer needs of an algorithm (VDN, QMIX, and the
centralised-critic actor-critics)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from marljoint.auxiliary import AuxFn
from marljoint.env.base import JointObs
from marljoint.offpolicy.replay import JointTransitions
from marljoint.offpolicy.sharded import BatchShare

__all__ = ["OffPolicyAlgorithm"]


@runtime_checkable
class OffPolicyAlgorithm(Protocol):
    """An off-policy learner over joint transitions.

    The trainer collects with :meth:`act`, stores the transitions, and per gradient step calls :meth:`loss` once
    (one joint scalar over every agent, the auxiliary loss included), makes ONE backward, clips and steps each of
    :attr:`networks` with its own optimiser, then calls :meth:`update_targets`.

    Attributes:
        networks: the trained networks, one optimiser and one gradient-norm clip each.
    """

    networks: Sequence[nn.Module]

    def act(
        self, obs: JointObs, env_steps: int, generators: Sequence[torch.Generator], greedy: bool = False
    ) -> list[np.ndarray]:
        """Per group ``[E, n_g, *action_shape]`` actions; exploration noise of copy e comes from
        ``generators[e]``."""
        ...

    def loss(
        self, batch: JointTransitions, aux_fn: AuxFn | None = None, share: BatchShare | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The joint scalar loss of a sampled batch and its statistics (plain floats).

        ``share`` (given only on data-parallel ranks, :mod:`marljoint.offpolicy.sharded`) says how ``batch`` sits
        in the global batch: every mean is then the global batch's, so that the ranks' losses sum to the
        one-process loss, and the statistics named in :data:`~marljoint.offpolicy.sharded.ROW_STATS` are this
        rank's share of theirs. An algorithm that does not take it trains in one process only."""
        ...

    def update_targets(self) -> None:
        """Moves the target networks after a gradient step."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Online and target weights."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output."""
        ...
