"""Generalised advantage estimation as a pure function, with terminated and truncated kept apart."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["compute_gae"]


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    bootstrap_values: torch.Tensor,
    gamma: float,
    gae_lambda: float,
    valid: torch.Tensor | None = None,
    final_values: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Computes GAE advantages and returns, per agent, over a rollout.

    Row ``t`` is the transition taken from state ``t``. ``terminated[t]`` ends the episode in a terminal state: no
    bootstrap. ``truncated[t]`` ends it by a cut: bootstrap from ``final_values[t]``, the value of the state the
    episode was cut in (before any auto-reset). The rollout end bootstraps from ``bootstrap_values``. Either way the
    λ-recursion stops at an episode end.

    Rows where ``valid`` is False (an absent agent, or in turn-based games an agent that is not moving) carry no
    decision: their rewards are credited to the agent's previous valid row, undiscounted, and the agent's next valid
    row provides the bootstrap value, so an agent's own moves form its trajectory. Their advantages are 0.

    Example:
        >>> r = torch.tensor([1.0, 2.0, 3.0, 4.0])
        >>> v = torch.tensor([0.5, 1.0, 1.5, 2.0])
        >>> term = torch.tensor([False, True, False, False])
        >>> adv, ret = compute_gae(r, v, term, torch.zeros(4, dtype=torch.bool), torch.tensor(0.0), 0.9, 0.8)
        >>> [round(a, 2) for a in adv.tolist()]
        [2.12, 1.0, 4.74, 2.0]

    Args:
        rewards: ``[T, *batch]`` rewards (``*batch`` is e.g. ``E, N``).
        values: ``[T, *batch]`` value estimates of the states the rows were taken from.
        terminated: ``[T, *batch]`` bool.
        truncated: ``[T, *batch]`` bool (ignored where ``terminated`` is also set).
        bootstrap_values: ``[*batch]`` values of the states after the last row.
        gamma: discount factor.
        gae_lambda: GAE λ.
        valid: ``[T, *batch]`` bool, rows that carry a decision; all rows when ``None``.
        final_values: ``[T, *batch]`` values of the final states of truncated rows; zeros when ``None``.

    Returns:
        ``(advantages, returns)``, each ``[T, *batch]``; returns are ``advantages + values`` on valid rows and 0
        elsewhere.
    """
    steps = rewards.shape[0]
    for name, tensor in (("values", values), ("terminated", terminated), ("truncated", truncated)):
        if tensor.shape != rewards.shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}, rewards {tuple(rewards.shape)}; they must match")
    if bootstrap_values.shape != rewards.shape[1:]:
        raise ValueError(
            f"bootstrap_values has shape {tuple(bootstrap_values.shape)}, expected {tuple(rewards.shape[1:])} "
            "(the batch shape of one rollout row)"
        )
    if valid is None:
        valid = torch.ones_like(terminated, dtype=torch.bool)
    if final_values is None:
        final_values = torch.zeros_like(values)
    for name, tensor in (("valid", valid), ("final_values", final_values)):
        if tensor.shape != rewards.shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}, rewards {tuple(rewards.shape)}; they must match")

    # The recursion is sequential in T; numpy's per-op cost on small arrays is a fraction of torch's.
    device, dtype = values.device, values.dtype

    def arr(x: torch.Tensor, kind: type | None = None) -> np.ndarray:
        a = x.detach().cpu().numpy()
        return a.astype(kind, copy=False) if kind is not None else a

    np_dtype = arr(values).dtype
    rewards_np = arr(rewards, np_dtype)
    values_np = arr(values, np_dtype)
    final_np = arr(final_values, np_dtype)
    terminated_np = arr(terminated, bool)
    ended_np = terminated_np | arr(truncated, bool)
    valid_np = arr(valid, bool)
    advantages = np.zeros_like(values_np)
    next_value = arr(bootstrap_values, np_dtype).copy()
    next_advantage = np.zeros_like(next_value)
    pending_reward = np.zeros_like(next_value)
    decay = np_dtype.type(gamma * gae_lambda)
    discount = np_dtype.type(gamma)
    for t in range(steps - 1, -1, -1):
        # An episode end at row t discards everything carried from the next episode.
        ended = ended_np[t]
        if ended.any():
            next_value = np.where(ended, np.where(terminated_np[t], 0, final_np[t]), next_value).astype(np_dtype)
            next_advantage = np.where(ended, 0, next_advantage).astype(np_dtype)
            pending_reward = np.where(ended, 0, pending_reward).astype(np_dtype)
        reward = rewards_np[t] + pending_reward
        advantage = reward + discount * next_value - values_np[t] + decay * next_advantage
        is_valid = valid_np[t]
        advantages[t] = np.where(is_valid, advantage, 0)
        next_value = np.where(is_valid, values_np[t], next_value)
        next_advantage = np.where(is_valid, advantage, next_advantage)
        pending_reward = np.where(is_valid, 0, reward).astype(np_dtype)
    returns = np.where(valid_np, advantages + values_np, 0).astype(np_dtype)
    return torch.from_numpy(advantages).to(device=device, dtype=dtype), torch.from_numpy(returns).to(device, dtype)
