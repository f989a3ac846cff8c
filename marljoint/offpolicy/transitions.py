"""Joint transitions from the env adapter's steps: what each agent saw, did and sees next."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from marljoint.env.base import JointObs, JointStep
from marljoint.env.spaces import JointSpec
from marljoint.offpolicy.functional import encode_actions, joint_action_mask
from marljoint.offpolicy.replay import JointTransitions

__all__ = ["joint_transitions"]


def joint_transitions(
    spec: JointSpec, before: JointObs, actions: Sequence[np.ndarray], step: JointStep
) -> JointTransitions:
    """The E joint transitions of one env step.

    An agent whose episode ended on the step (terminated or truncated) has its final observation as next
    observation; a terminated agent is absent from the next state (nothing bootstrapped from it), a truncated one
    present in it (bootstrapped, with all actions legal since the env does not report its final mask). In
    turn-based games an agent decides in the next state only on its own turn.

    Args:
        spec: the env's agents and groups.
        before: the observations the actions were chosen on.
        actions: per group ``[E, n_g]`` (Discrete) or ``[E, n_g, K]`` (MultiDiscrete) int64, the actions played,
            stored as indices of the product of the heads' choices; or, where every agent acts in a Box,
            ``[E, n_g, D]`` float32, stored as they are (``[E, N, D]`` float32 actions).
        step: the env's outcome.

    Returns:
        :class:`JointTransitions` of E rows, on the CPU.
    """
    ended = step.terminated | step.truncated
    reset = step.reset_envs[:, None]
    next_present = step.truncated | (~step.terminated & ~reset & step.alive)
    final_acting = np.ones_like(ended) if step.final_waiting is None else ~step.final_waiting
    next_deciding = next_present & np.where(ended, final_acting, step.acting)
    num_envs = ended.shape[0]
    all_actions = _action_storage(spec, num_envs)
    obs, next_obs, next_masks = [], [], []
    for g, group in enumerate(spec.groups):
        columns = list(group.agent_indices)
        nvec = group.action.nvec
        if group.action.kind == "box":
            all_actions[:, columns] = np.asarray(actions[g], np.float32).reshape(num_envs, len(columns), -1)
        else:
            played = torch.as_tensor(np.asarray(actions[g], np.int64))
            categorical = played if group.action.kind == "discrete" else encode_actions(played, nvec)
            all_actions[:, columns] = categorical.numpy()
        obs.append(_flat(before.obs[g]))
        shape = (num_envs, len(columns)) + (1,) * (step.obs[g].ndim - 2)
        next_obs.append(_flat(np.where(ended[:, columns].reshape(shape), step.final_obs[g], step.obs[g])))
        mask = step.action_masks[g]
        allowed = torch.ones((num_envs, len(columns), int(np.prod(nvec))), dtype=torch.bool)
        if mask is not None:
            fresh = torch.from_numpy(ended[:, columns] | reset)[..., None]
            allowed = torch.where(fresh, allowed, joint_action_mask(torch.from_numpy(mask.copy()), nvec))
        next_masks.append(allowed)
    return JointTransitions(
        obs=tuple(obs),
        actions=torch.from_numpy(all_actions),
        rewards=torch.from_numpy(np.array(step.rewards, np.float32)),  # a copy: the env reuses its arrays
        terminated=torch.from_numpy(step.terminated.copy()),
        truncated=torch.from_numpy(step.truncated.copy()),
        alive=torch.from_numpy(before.alive.copy()),
        deciding=torch.from_numpy(before.alive & before.acting),
        next_obs=tuple(next_obs),
        next_masks=tuple(next_masks),
        next_present=torch.from_numpy(next_present),
        next_deciding=torch.from_numpy(next_deciding),
    )


def _action_storage(spec: JointSpec, num_envs: int) -> np.ndarray:
    """Zeros for the actions of one step: ``[E, N]`` int64, or ``[E, N, D]`` float32 where every agent acts in a
    Box of D entries."""
    if all(layout.kind == "box" for layout in spec.actions):
        return np.zeros((num_envs, spec.num_agents, spec.actions[0].shape[0]), np.float32)
    return np.zeros((num_envs, spec.num_agents), np.int64)


def _flat(obs: np.ndarray) -> torch.Tensor:
    """``[E, n_g, *shape]`` → float32 ``[E, n_g, F]`` (a copy: the env may reuse its arrays)."""
    flat = np.asarray(obs).reshape(obs.shape[0], obs.shape[1], -1)
    if flat.dtype == np.uint8:
        return torch.from_numpy(flat.astype(np.float32) / np.float32(255.0))
    return torch.from_numpy(flat.astype(np.float32, copy=True))
