"""Generalised advantage estimation as a pure function, with terminated and truncated kept apart."""

from __future__ import annotations

from typing import Any

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
    if valid is None:
        valid = torch.ones_like(terminated, dtype=torch.bool)
    if final_values is None:
        final_values = torch.zeros_like(values)
    _check_shapes(rewards, values, terminated, truncated, bootstrap_values, valid, final_values)
    inputs = (rewards, values, final_values, terminated, truncated, valid, bootstrap_values)
    if values.device.type == "cpu":
        # The recursion is sequential in T; numpy's per-op cost on small arrays is a fraction of torch's.
        return _on_host(*inputs, gamma, gae_lambda)
    # Another device: the same recursion in torch, on that device (no copy to the host).
    return _on_device(*inputs, gamma, gae_lambda)


def _on_host(
    rewards: torch.Tensor,
    values: torch.Tensor,
    final_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    valid: torch.Tensor,
    bootstrap_values: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`compute_gae` on CPU tensors: the recursion in numpy, on views of the tensors."""
    device, dtype = values.device, values.dtype

    def arr(x: torch.Tensor, kind: type | None = None) -> np.ndarray:
        a = x.detach().numpy()
        return a.astype(kind, copy=False) if kind is not None else a

    np_dtype = arr(values).dtype
    advantages, returns = _recursion(
        np.where,
        np.zeros_like,
        arr(rewards, np_dtype),
        arr(values),
        arr(final_values, np_dtype),
        arr(terminated, bool),
        arr(terminated, bool) | arr(truncated, bool),
        arr(valid, bool),
        arr(bootstrap_values, np_dtype),
        np_dtype.type(gamma),
        np_dtype.type(gamma * gae_lambda),
    )
    return torch.from_numpy(advantages).to(device=device, dtype=dtype), torch.from_numpy(returns).to(device, dtype)


def _on_device(
    rewards: torch.Tensor,
    values: torch.Tensor,
    final_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    valid: torch.Tensor,
    bootstrap_values: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`compute_gae` in torch on the tensors' own device, the factors rounded to the values' precision as on
    the host."""
    dtype = values.dtype
    values = values.detach()
    return _recursion(
        torch.where,
        torch.zeros_like,
        rewards.detach().to(dtype),
        values,
        final_values.detach().to(dtype),
        terminated.bool(),
        terminated.bool() | truncated.bool(),
        valid.bool(),
        bootstrap_values.detach().to(dtype),
        float(np.float32(gamma)) if dtype == torch.float32 else gamma,
        float(np.float32(gamma * gae_lambda)) if dtype == torch.float32 else gamma * gae_lambda,
    )


def _check_shapes(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    bootstrap_values: torch.Tensor,
    valid: torch.Tensor,
    final_values: torch.Tensor,
) -> None:
    """Raises ``ValueError`` naming the first input whose shape does not fit ``rewards``'."""
    named = (("values", values), ("terminated", terminated), ("truncated", truncated))
    for name, tensor in (*named, ("valid", valid), ("final_values", final_values)):
        if tensor.shape != rewards.shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}, rewards {tuple(rewards.shape)}; they must match")
    if bootstrap_values.shape != rewards.shape[1:]:
        raise ValueError(
            f"bootstrap_values has shape {tuple(bootstrap_values.shape)}, expected {tuple(rewards.shape[1:])} "
            "(the batch shape of one rollout row)"
        )


def _recursion(
    where: Any,
    zeros_like: Any,
    rewards: Any,
    values: Any,
    final_values: Any,
    terminated: Any,
    ended: Any,
    valid: Any,
    bootstrap_values: Any,
    discount: Any,
    decay: Any,
) -> tuple[Any, Any]:
    """The backward GAE recursion over numpy arrays (``np.where``, ``np.zeros_like``) or tensors (``torch.*``).

    Every selection takes an array of the values' dtype (``zero``), so neither library changes the dtype.
    """
    zero = zeros_like(values[0])
    advantages = zeros_like(values)
    next_value = bootstrap_values + zero
    next_advantage = zero
    pending_reward = zero
    for t in range(values.shape[0] - 1, -1, -1):
        # An episode end at row t discards everything carried from the next episode.
        end = ended[t]
        next_value = where(end, where(terminated[t], zero, final_values[t]), next_value)
        next_advantage = where(end, zero, next_advantage)
        pending_reward = where(end, zero, pending_reward)
        reward = rewards[t] + pending_reward
        advantage = reward + discount * next_value - values[t] + decay * next_advantage
        is_valid = valid[t]
        advantages[t] = where(is_valid, advantage, zero)
        next_value = where(is_valid, values[t], next_value)
        next_advantage = where(is_valid, advantage, next_advantage)
        pending_reward = where(is_valid, zero, reward)
    returns = where(valid, advantages + values, zeros_like(values))
    return advantages, returns
