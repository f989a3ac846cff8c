"""Padded batches: a slice of the env copies evaluated at its rows of a batch of all of them.

Matrix-product kernels pick their summation order from the batch shape, so the same row gives other bits in a batch
of another size. A worker that holds copies ``[start, start + rows)`` of E therefore evaluates them as rows
``start..`` of an E-row batch (the other rows zero): at the same shape and position each row gets exactly the bits
it gets when one process evaluates all E copies. This exists only for bit-identity across collection backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from marljoint.policies.actor_critic import PolicyOutput
from marljoint.policies.joint import JointPolicy

__all__ = ["PaddedPolicy", "RowPadding"]


class RowPadding(NamedTuple):
    """Where a slice's rows sit in the batch it is evaluated in.

    Attributes:
        start: the batch row of the slice's first row (its first copy's global index).
        total: the rows of the whole batch (E, the copies of all slices).
    """

    start: int
    total: int


class PaddedPolicy:
    """A :class:`~marljoint.policies.JointPolicy` whose :meth:`forward` evaluates its rows inside a padded batch.

    Args:
        policy: the policy.
        rows: where the rows sit (:class:`RowPadding`), or ``None``: the rows are the whole batch (no padding).

    Raises:
        TypeError: if ``policy`` is not a :class:`~marljoint.policies.JointPolicy`.
        ValueError: if ``rows`` is not ``0 <= start < total``.

    Example:
        >>> from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
        >>> from marljoint_envs import mock_v0
        >>> env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=2, seed=0)
        >>> policy = JointMultiAgentTrainer.from_env(env, JointTrainerConfig(num_envs=2)).joint_policy
        >>> PaddedPolicy(policy, RowPadding(start=1, total=4)).rows
        RowPadding(start=1, total=4)
    """

    def __init__(self, policy: JointPolicy, rows: RowPadding | tuple[int, int] | None = None) -> None:
        if not isinstance(policy, JointPolicy):
            raise TypeError(f"PaddedPolicy wraps a JointPolicy, got {type(policy).__name__}; pass trainer.joint_policy")
        if rows is not None:
            rows = RowPadding(int(rows[0]), int(rows[1]))
            if not 0 <= rows.start < rows.total:
                raise ValueError(
                    f"rows must place the slice inside the batch (0 <= start < total), got start={rows.start}, "
                    f"total={rows.total}; pass the slice's first global copy index and the number of all copies"
                )
        self.policy = policy
        self.rows = rows

    def forward(
        self,
        group_obs: Sequence[torch.Tensor],
        alive: torch.Tensor,
        states: Sequence[torch.Tensor] | None = None,
    ) -> list[PolicyOutput]:
        """:meth:`~marljoint.policies.JointPolicy.forward` of ``R`` rows evaluated as rows ``start .. start + R``
        of a ``total``-row batch; outputs of the ``R`` rows only.

        Args:
            group_obs: per group, ``[R, n_g, *obs_shape]``.
            alive: ``[R, N]`` bool.
            states: per group, ``[R, n_g, S_g]`` recurrent states, or ``None``.

        Raises:
            ValueError: if the rows do not fit in the batch (``start + R > total``).
        """
        if self.rows is None:
            return self.policy.forward(group_obs, alive, states)
        start, total = self.rows
        count = alive.shape[0]
        if start + count > total:
            raise ValueError(
                f"{count} rows from row {start} do not fit in a batch of {total} rows; the slice's copies must lie "
                "inside the batch"
            )

        def padded(x: torch.Tensor) -> torch.Tensor:
            out = x.new_zeros((total, *x.shape[1:]))
            out[start : start + count] = x
            return out

        padded_states = None if states is None else [padded(s) for s in states]
        outputs = self.policy.forward([padded(o) for o in group_obs], padded(alive), padded_states)
        return [type(o)(*(None if f is None else f[start : start + count] for f in o)) for o in outputs]
