"""PPO loss terms as pure functions over ``[B, N]`` tensors (B minibatch rows, N agents), masked per agent.

Every term is a weighted mean over the rows where an agent is valid (alive and moving); an agent with no valid
row in the minibatch gets 0. Diagnostics are computed without gradients.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

__all__ = [
    "PolicyLossTerms",
    "masked_mean",
    "masked_moments",
    "normalize_advantages",
    "policy_loss",
    "value_loss",
    "explained_variance",
]


class PolicyLossTerms(NamedTuple):
    """The clipped surrogate and its diagnostics, one entry per agent.

    Attributes:
        loss: ``[N]`` clipped-surrogate loss (to minimise).
        clip_fraction: ``[N]`` fraction of valid rows whose ratio left ``[1 − ε, 1 + ε]`` (no gradient).
        approx_kl: ``[N]`` the ``(ratio − 1) − log ratio`` estimator of KL(old ‖ new) (no gradient).
    """

    loss: torch.Tensor
    clip_fraction: torch.Tensor
    approx_kl: torch.Tensor


def masked_mean(x: torch.Tensor, mask: torch.Tensor, count: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over rows (dim 0) where ``mask`` holds, per column.

    Args:
        x: ``[B, N]``.
        mask: ``[B, N]`` bool or float weights.
        count: ``[N]`` the denominators (≥ 1) in place of the weights' sums: a share of a larger batch's rows divided
            by the larger batch's counts (data-parallel ranks), so that the shares' results sum to its mean.

    Returns:
        ``[N]``; 0 for columns with no valid row.
    """
    weights = mask.to(x.dtype)
    return (x * weights).sum(0) / (weights.sum(0).clamp_min(1.0) if count is None else count)


def masked_moments(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and (biased) standard deviation over rows (dim 0) where ``mask`` holds, per column.

    Args:
        x: ``[B, N]``.
        mask: ``[B, N]`` bool.

    Returns:
        ``([N], [N])``: the mean and the standard deviation; 0 for columns with no valid row.

    Example:
        >>> x = torch.tensor([[1.0], [3.0], [100.0]])
        >>> masked_moments(x, torch.tensor([[True], [True], [False]]))
        (tensor([2.]), tensor([1.]))
    """
    mean = masked_mean(x, mask)
    return mean, masked_mean((x - mean) ** 2, mask).sqrt()


def normalize_advantages(advantages: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Standardises advantages per agent over its valid rows only (other rows become 0).

    Args:
        advantages: ``[B, N]``.
        mask: ``[B, N]`` bool.
        eps: added to the standard deviation.

    Returns:
        ``[B, N]`` advantages with zero mean and unit (biased) standard deviation over each agent's valid rows.
    """
    mean, std = masked_moments(advantages, mask)
    return torch.where(mask.bool(), (advantages - mean) / (std + eps), torch.zeros_like(advantages))


def policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip_range: float,
    mask: torch.Tensor,
    weights: torch.Tensor | None = None,
    count: torch.Tensor | None = None,
) -> PolicyLossTerms:
    """PPO's clipped surrogate objective, per agent.

    With ``weights``, the decoupled form of Hilton et al. (2022, "Batch size-invariance for policy optimization"):
    ``old_log_prob`` is then the proximal policy's (the one the trust region is centred on) and ``weights`` the
    importance weights ``π_prox / π_behaviour`` of the rows, which multiply each row's clipped surrogate.

    Args:
        log_prob: ``[B, N]`` log-probabilities of the taken actions under the current policy.
        old_log_prob: ``[B, N]`` the same under the policy that collected the data (or the proximal policy).
        advantages: ``[B, N]``.
        clip_range: ε.
        mask: ``[B, N]`` bool, valid rows.
        weights: ``[B, N]`` weights of the rows' clipped surrogates (no gradient): the decoupled form's importance
            weights, a regulariser's row weights, or their product; ``None`` for plain PPO.
        count: ``[N]`` the denominators of the means (:func:`masked_mean`), or ``None``: the valid rows.

    Returns:
        :class:`PolicyLossTerms` with ``[N]`` entries.
    """
    log_ratio = log_prob - old_log_prob
    ratio = log_ratio.exp()
    surrogate = torch.min(advantages * ratio, advantages * ratio.clamp(1.0 - clip_range, 1.0 + clip_range))
    if weights is not None:
        surrogate = surrogate * weights
    loss = -masked_mean(surrogate, mask, count)
    with torch.no_grad():
        clipped = ((ratio - 1.0).abs() > clip_range).to(ratio.dtype)
        clip_fraction = masked_mean(clipped, mask, count)
        approx_kl = masked_mean((ratio - 1.0) - log_ratio, mask, count)
    return PolicyLossTerms(loss, clip_fraction, approx_kl)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    clip_range_vf: float,
    mask: torch.Tensor,
    count: torch.Tensor | None = None,
) -> torch.Tensor:
    """Value regression loss per agent: ``0.5 · (V − R)²``, or PPO's clipped form when ``clip_range_vf`` is finite.

    Args:
        values: ``[B, N]`` current predictions.
        old_values: ``[B, N]`` predictions at collection time (same scale as ``values``).
        returns: ``[B, N]`` targets.
        clip_range_vf: clip range of the value change; ``math.inf`` gives the plain squared error.
        mask: ``[B, N]`` bool, valid rows.
        count: ``[N]`` the denominators of the mean (:func:`masked_mean`), or ``None``: the valid rows.

    Returns:
        ``[N]`` losses.
    """
    error = (values - returns) ** 2
    if math.isfinite(clip_range_vf):
        clipped = old_values + (values - old_values).clamp(-clip_range_vf, clip_range_vf)
        error = torch.max(error, (clipped - returns) ** 2)
    return 0.5 * masked_mean(error, mask, count)


def explained_variance(predictions: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``1 − Var[target − prediction] / Var[target]`` per agent over valid rows.

    Args:
        predictions: ``[B, N]``.
        targets: ``[B, N]``.
        mask: ``[B, N]`` bool.

    Returns:
        ``[N]``; NaN where the targets have zero variance (undefined).
    """
    target_mean = masked_mean(targets, mask)
    target_var = masked_mean((targets - target_mean) ** 2, mask)
    residual = targets - predictions
    residual_mean = masked_mean(residual, mask)
    residual_var = masked_mean((residual - residual_mean) ** 2, mask)
    ev = 1.0 - residual_var / target_var
    return torch.where(target_var > 0, ev, torch.full_like(ev, float("nan")))
