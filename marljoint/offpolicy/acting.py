"""How an off-policy algorithm acts while its rollouts are collected: a :class:`~marljoint.collect.StepActing`
that any collector (in this process, in env workers, in Ray actors) asks for every step's actions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from marljoint.collect.padded import RowPadding
from marljoint.env.base import JointObs
from marljoint.env.spaces import JointSpec
from marljoint.offpolicy.base import OffPolicyAlgorithm
from marljoint.offpolicy.centralised import CentralisedActorCritic

__all__ = ["ExplorationActing"]


class ExplorationActing:
    """An off-policy algorithm's exploring behaviour, as collectors call it (a
    :class:`~marljoint.collect.StepActing`): ε-greedy (or Boltzmann) on the utilities at the schedule's value for
    VDN and QMIX, the actors' samples for MASAC, the noisy deterministic actors for MADDPG.

    The schedule's clock is :attr:`env_steps` at the rollout's start plus E env steps per step played, as when
    the steps are counted one by one. Copy e's noise comes from the generator its collector holds for it
    (addressed by the copy's global index), and a worker holding copies ``[start, stop)`` evaluates the networks
    on them at their rows of a batch of all E copies: every backend gives the same actions, bit for bit.

    Args:
        algorithm: the algorithm (its :meth:`~marljoint.offpolicy.OffPolicyAlgorithm.act` draws copy e's noise
            from the e-th generator it is given).
        spec: the env's agents and layouts.
        num_envs: E, the copies of every rollout.

    Attributes:
        env_steps: the schedule's clock at the next rollout's start (set by the trainer before each rollout).
    """

    def __init__(self, algorithm: OffPolicyAlgorithm, spec: JointSpec, num_envs: int) -> None:
        self.algorithm = algorithm
        self.spec = spec
        self.num_envs = int(num_envs)
        self.env_steps = 0
        # Actors that act copy by copy (one network call per row) give the same bits in any batch.
        self.row_by_row = isinstance(algorithm, CentralisedActorCritic)
        self._spare = torch.Generator().manual_seed(0)  # the noise of padding rows, never used

    @property
    def device(self) -> torch.device:
        """The CPU: the off-policy algorithms act (and their rollouts are stored) there."""
        return torch.device("cpu")

    def weights(self) -> Mapping[str, Any]:
        """The algorithm's weights and the schedule's clock."""
        return {"algorithm": self.algorithm.state_dict(), "env_steps": self.env_steps}

    def load_weights(self, weights: Mapping[str, Any]) -> None:
        """Takes :meth:`weights` of the learner's acting."""
        self.algorithm.load_state_dict(weights["algorithm"])
        self.env_steps = int(weights["env_steps"])

    def act_step(
        self, obs: JointObs, step: int, generators: Sequence[torch.Generator], rows: RowPadding | None = None
    ) -> list[np.ndarray]:
        """The exploring actions of step ``step`` of a rollout (see :meth:`~marljoint.collect.StepActing.act_step`).

        Returns:
            Per group, ``[R, n_g]`` int64 (Discrete), ``[R, n_g, K]`` int64 (MultiDiscrete) or ``[R, n_g, D]``
            float32 (Box) actions.
        """
        clock = self.env_steps + step * self.num_envs
        if rows is None or self.row_by_row:
            return self.algorithm.act(obs, clock, generators)
        start, total = rows
        count = obs.alive.shape[0]

        def padded(x: np.ndarray, fill: bool = False) -> np.ndarray:
            out = np.full((total, *x.shape[1:]), fill, dtype=x.dtype)
            out[start : start + count] = x
            return out

        batch = JointObs(
            tuple(padded(o) for o in obs.obs),
            padded(obs.alive),
            padded(obs.acting),
            tuple(None if m is None else padded(m, fill=True) for m in obs.action_masks),
        )
        spare = [self._spare] * start
        noise = [*spare, *generators, *([self._spare] * (total - start - count))]
        return [a[start : start + count] for a in self.algorithm.act(batch, clock, noise)]
