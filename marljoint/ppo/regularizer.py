"""The interface of a policy regulariser: a term of the joint loss computed from the policy's own outputs.

An aux function (:mod:`marljoint.auxiliary`) sees only the agents' encoder features; a regulariser sees the
minibatch's observations, action masks and network outputs, so it can compare the current action distribution with
another policy's on the same rows (the KL to the magnet of magnetic mirror descent). It enters the same joint loss,
before the one backward.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import torch

from marljoint.policies.actor_critic import PolicyOutput
from marljoint.policies.joint import JointPolicy
from marljoint.ppo.config import JointTrainerConfig

__all__ = ["PolicyRegularizer", "RegularizerBatch", "RegularizerFactory"]


class RegularizerBatch(NamedTuple):
    """One minibatch as a regulariser sees it (``B`` rows).

    Attributes:
        policy: the joint policy being trained.
        outputs: its outputs on the rows, one :class:`~marljoint.policies.PolicyOutput` per network.
        obs: per group, ``[B, n_g, *obs_shape]``.
        alive: ``[B, N]`` bool, the agents present on each row.
        masks: per group, ``[B, n_g, sum(nvec)]`` bool action masks, or ``None``.
        valid: ``[B, N]`` bool, the rows each agent trains on (it moved there).
        advantages: ``[B, N]`` the advantages the surrogate of the minibatch uses (normalised where the trainer
            normalises them); meaningful on the ``valid`` rows only.
        weights: ``[B, N]`` the row weights the regulariser's ``row_weights`` gave the
            surrogate on these rows (a per-row term should carry them too), or ``None`` (every row weighs 1). On
            data-parallel ranks (:mod:`marljoint.ppo.sharded`) they also carry each agent's share ``c_r / c`` of the
            minibatch's valid rows, so that a mean over the rank's rows, weighted by them, sums over the ranks to
            the mean over the whole minibatch.
        minibatch_advantages: ``[M, N]`` the advantages of the whole minibatch when the batch is one rank's share of
            it (for statistics of the whole minibatch, e.g. its standard deviation), or ``None``: the batch is the
            whole minibatch.
        minibatch_valid: ``[M, N]`` the valid rows of the whole minibatch, with :attr:`minibatch_advantages`.
        sum_over_ranks: on data-parallel ranks, returns a tensor summed over the ranks (a collective: every rank's
            regulariser calls it at the same point, e.g. to report a metric of the whole minibatch from the ranks'
            shares); ``None`` in one process.
    """

    policy: JointPolicy
    outputs: Sequence[PolicyOutput]
    obs: Sequence[torch.Tensor]
    alive: torch.Tensor
    masks: Sequence[torch.Tensor | None]
    valid: torch.Tensor
    advantages: torch.Tensor
    weights: torch.Tensor | None = None
    minibatch_advantages: torch.Tensor | None = None
    minibatch_valid: torch.Tensor | None = None
    sum_over_ranks: Callable[[torch.Tensor], torch.Tensor] | None = None


class PolicyRegularizer(Protocol):
    """A term added to the joint loss of every minibatch (``Learner.regularizer``).

    A regulariser may also weight the rows of the surrogate: when it has a method
    ``row_weights(rollout: JointRollout, carried: int) -> torch.Tensor | None``, the learner calls it once per
    update on the extended rollout (its first ``carried`` rows are the moves carried in,
    :meth:`~marljoint.collect.JointRollout.extended`) and multiplies each row's clipped surrogate by the ``[T', E, N]``
    weights it returns (``None``: every row weighs 1); the minibatch's weights reach the term as
    :attr:`RegularizerBatch.weights`.
    """

    def begin_update(self, learner: Any) -> None:
        """Called once at the start of every update, before its first minibatch (schedules live here)."""

    def __call__(self, batch: RegularizerBatch) -> torch.Tensor:
        """The term on one minibatch: a scalar tensor with its graph, added to the joint loss."""

    def metrics(self) -> dict[str, float]:
        """Metrics of the term since the last call (logged with each iteration)."""

    def state_dict(self) -> dict[str, Any]:
        """Its state, saved in the trainer's checkpoints."""

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`."""


RegularizerFactory = Callable[[JointPolicy, JointTrainerConfig], PolicyRegularizer]
"""Builds a trainer's regulariser from the joint policy it trains and the trainer's resolved settings (it may
refuse settings it cannot work with, raising ``ValueError``): the ``regularizer`` argument of
:class:`~marljoint.JointMultiAgentTrainer`, e.g. :func:`marljoint.best_response.mmd_regularizer`."""
