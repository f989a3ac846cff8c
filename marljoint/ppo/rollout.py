"""Preallocated rollout storage, ``[T, E, N, ...]``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from marljoint.env.spaces import JointSpec

__all__ = ["JointRollout"]


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype)).dtype


@dataclass
class JointRollout:
    """One rollout of T steps in E env copies for N agents.

    Per-agent scalars are ``[T, E, N]``; observations, actions and masks are held per agent group ``g`` as
    ``[T, E, n_g, ...]`` (agents of a group share shapes; ``spec.groups[g].agent_indices`` maps them to N).

    Attributes:
        spec: the env's agents, layouts and groups.
        obs: per group, ``[T, E, n_g, *obs_shape]``, the observations acted on.
        actions: per group, ``[T, E, n_g, *action_shape]`` (int64 heads, or float32 unclipped Gaussian samples).
        action_masks: per group, ``[T, E, n_g, sum(nvec)]`` bool, or ``None`` for Box actions.
        log_probs: ``[T, E, N]`` log-probability of the taken action (joint over heads).
        values: ``[T, E, N]`` value estimates (in return units, i.e. denormalised).
        rewards: ``[T, E, N]``.
        terminated: ``[T, E, N]`` bool.
        truncated: ``[T, E, N]`` bool.
        alive: ``[T, E, N]`` bool, the agent was present at step t.
        acting: ``[T, E, N]`` bool, its action was used at step t (equals ``alive`` in simultaneous-move envs).
        final_values: ``[T, E, N]`` value of the final state of truncated rows (0 elsewhere).
        bootstrap_values: ``[E, N]`` value of the state after the last step (0 for absent agents).
        episode_returns: ``[k, N]`` float64 returns of the episodes that finished during the rollout.
        episode_lengths: ``[k]`` their lengths.
        episode_steps: ``[k]`` the step t at which each of them finished (episodes finishing at the same step are
            listed in env-copy order).
    """

    spec: JointSpec
    obs: tuple[torch.Tensor, ...]
    actions: tuple[torch.Tensor, ...]
    action_masks: tuple[torch.Tensor | None, ...]
    log_probs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    alive: torch.Tensor
    acting: torch.Tensor
    final_values: torch.Tensor
    bootstrap_values: torch.Tensor
    episode_returns: np.ndarray
    episode_lengths: np.ndarray
    episode_steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @classmethod
    def allocate(cls, spec: JointSpec, steps: int, num_envs: int, device: torch.device | str = "cpu") -> JointRollout:
        """Preallocates zeroed storage for ``steps`` steps of ``num_envs`` copies."""
        T, E, N = steps, num_envs, spec.num_agents
        groups = spec.groups

        def per_agent(dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros((T, E, N), dtype=dtype, device=device)

        return cls(
            spec=spec,
            obs=tuple(
                torch.zeros(
                    (T, E, g.size, *g.observation.shape), dtype=_torch_dtype(g.observation.dtype), device=device
                )
                for g in groups
            ),
            actions=tuple(
                torch.zeros((T, E, g.size, *g.action.shape), dtype=_torch_dtype(g.action.dtype), device=device)
                for g in groups
            ),
            action_masks=tuple(
                torch.ones((T, E, g.size, g.action.mask_size), dtype=torch.bool, device=device)
                if g.action.kind != "box"
                else None
                for g in groups
            ),
            log_probs=per_agent(torch.float32),
            values=per_agent(torch.float32),
            rewards=per_agent(torch.float32),
            terminated=per_agent(torch.bool),
            truncated=per_agent(torch.bool),
            alive=per_agent(torch.bool),
            acting=per_agent(torch.bool),
            final_values=per_agent(torch.float32),
            bootstrap_values=torch.zeros((E, N), dtype=torch.float32, device=device),
            episode_returns=np.zeros((0, N)),
            episode_lengths=np.zeros(0, np.int64),
        )

    @property
    def steps(self) -> int:
        """T."""
        return int(self.rewards.shape[0])

    @property
    def num_envs(self) -> int:
        """E."""
        return int(self.rewards.shape[1])

    @property
    def num_agents(self) -> int:
        """N."""
        return int(self.rewards.shape[2])

    @property
    def valid(self) -> torch.Tensor:
        """``[T, E, N]`` rows that carry a decision: the agent was present and its action was used."""
        return self.alive & self.acting

    def validate(self) -> None:
        """Checks that every tensor agrees on T, E and N.

        Raises:
            ValueError: naming the field, its shape and the expected one.
        """
        T, E, N = self.steps, self.num_envs, self.num_agents
        if N != self.spec.num_agents:
            raise ValueError(f"rollout has {N} agents but its spec lists {self.spec.num_agents}")
        for name in ("log_probs", "values", "terminated", "truncated", "alive", "acting", "final_values"):
            shape = tuple(getattr(self, name).shape)
            if shape != (T, E, N):
                raise ValueError(f"rollout.{name} has shape {shape}, expected {(T, E, N)} like rollout.rewards")
        if tuple(self.bootstrap_values.shape) != (E, N):
            raise ValueError(
                f"rollout.bootstrap_values has shape {tuple(self.bootstrap_values.shape)}, expected {(E, N)}"
            )
        if len(self.obs) != len(self.spec.groups) or len(self.actions) != len(self.spec.groups):
            raise ValueError(
                f"rollout holds {len(self.obs)} observation and {len(self.actions)} action arrays for "
                f"{len(self.spec.groups)} agent groups"
            )
        for g, group in enumerate(self.spec.groups):
            expected_obs = (T, E, group.size, *group.observation.shape)
            if tuple(self.obs[g].shape) != expected_obs:
                raise ValueError(
                    f"rollout.obs[{g}] (agents {list(group.agents)}) has shape {tuple(self.obs[g].shape)}, "
                    f"expected {expected_obs}"
                )
            expected_act = (T, E, group.size, *group.action.shape)
            if tuple(self.actions[g].shape) != expected_act:
                raise ValueError(
                    f"rollout.actions[{g}] (agents {list(group.agents)}) has shape {tuple(self.actions[g].shape)}, "
                    f"expected {expected_act}"
                )
