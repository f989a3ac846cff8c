"""Pure functions behind the redundancy penalties: cross-correlation, debiased CKA, unbiased HSIC.

Shapes used throughout: ``B`` minibatch rows (the same rows for every agent), ``N`` agents in
``possible_agents`` order, ``d_i`` the feature width of agent ``i``, and ``P = N (N - 1) / 2`` agent pairs
``(i, j)``, ``i < j``, in the order of :func:`agent_pairs`.

The ``pairwise_*`` functions take every agent's features plus an optional ``[B, N]`` ``alive`` mask. A pair
``(i, j)`` uses only the rows where both agents are alive, so its value equals the pair function applied to
those rows alone; a pair with too few such rows (fewer than 2 for ``xcorr``, fewer than 4 for ``cka`` and
``hsic``) is 0. When every agent is alive on every row, per-agent statistics are computed once and all pairs
are evaluated with batched matmuls; the pairs are also batched under a mask, as long as the agents share a
feature width (``xcorr``, ``cka``; ``hsic`` works on ``[B, B]`` kernels and is always batched).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import torch

__all__ = [
    "DEFAULT_EPS",
    "RedundancyKind",
    "agent_pairs",
    "debiased_cka",
    "feature_std",
    "hsic_unbiased",
    "linear_kernel",
    "pairwise_cka",
    "pairwise_hsic",
    "pairwise_redundancy",
    "pairwise_xcorr",
    "rbf_hsic",
    "rbf_kernel",
    "xcorr_null_expectation",
    "xcorr_redundancy",
]

RedundancyKind = Literal["xcorr", "cka", "hsic"]
REDUNDANCY_KINDS: tuple[str, ...] = ("xcorr", "cka", "hsic")

DEFAULT_EPS = 1e-5
"""Added to the variance inside the square root when standardising (keeps constant features finite)."""

_MIN_ROWS = {"xcorr": 2, "cka": 4, "hsic": 4}


# ----------------------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------------------


def agent_pairs(num_agents: int) -> list[tuple[int, int]]:
    """The agent pairs ``(i, j)``, ``i < j``, in the order every ``pairwise_*`` result uses.

    Args:
        num_agents: ``N``, the number of agents.

    Returns:
        ``P = N (N - 1) / 2`` pairs in lexicographic order: ``(0, 1), (0, 2), ..., (1, 2), ...``.

    Example:
        >>> agent_pairs(3)
        [(0, 1), (0, 2), (1, 2)]
    """
    if isinstance(num_agents, bool) or not isinstance(num_agents, int):
        raise TypeError(f"num_agents must be an int, got {type(num_agents).__name__}; pass len(features)")
    if num_agents < 0:
        raise ValueError(f"num_agents must be >= 0, got {num_agents}; pass len(features)")
    return [(i, j) for i in range(num_agents) for j in range(i + 1, num_agents)]


def _check_eps(eps: float) -> None:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"eps must be a float, got {type(eps).__name__}; the default is {DEFAULT_EPS}")
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps={eps!r} must be a finite number >= 0; the default is {DEFAULT_EPS}")


def _check_matrix(name: str, z: object) -> torch.Tensor:
    if not isinstance(z, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape [B, d], got {type(z).__name__}")
    if z.ndim != 2:
        raise ValueError(f"{name} has shape {tuple(z.shape)}; expected [B, d] (rows, features)")
    if not z.is_floating_point():
        raise TypeError(f"{name} has dtype {z.dtype}; expected a floating dtype, e.g. {name}.float()")
    return z


def _check_pair(z_i: torch.Tensor, z_j: torch.Tensor, min_rows: int, fn_name: str) -> None:
    _check_matrix("z_i", z_i)
    _check_matrix("z_j", z_j)
    if z_i.shape[0] != z_j.shape[0]:
        raise ValueError(
            f"z_i has {z_i.shape[0]} rows and z_j has {z_j.shape[0]}; both must hold the same B rows "
            "(the same minibatch rows for both agents)"
        )
    if z_i.dtype != z_j.dtype:
        raise TypeError(f"z_i has dtype {z_i.dtype} and z_j has {z_j.dtype}; cast both to one dtype")
    if z_i.shape[0] < min_rows:
        raise ValueError(
            f"{fn_name} needs at least {min_rows} rows, got B={z_i.shape[0]}; use a larger batch"
        )


def validate_features(features: Sequence[torch.Tensor], alive: torch.Tensor | None) -> tuple[int, int]:
    """Check the aux-loss inputs and return ``(B, N)``.

    Args:
        features: per agent, ``[B, d_i]`` floating tensors on the same ``B`` rows, all of one dtype.
        alive: ``[B, N]`` bool, or ``None`` for every agent alive on every row.

    Returns:
        ``(B, N)``.

    Raises:
        TypeError: ``features`` is not a list/tuple of floating tensors of one dtype, or ``alive`` is not a
            bool tensor.
        ValueError: no agents, or a shape does not match (the message names the agent index, the observed
            shape and the expected one).
    """
    _check_features_are_tensors(features)
    first = features[0]
    if first.ndim != 2:
        raise ValueError(
            f"features[0] has shape {tuple(first.shape)}; expected [B, d_0] (agent 0's encoder features, "
            "one row per minibatch row)"
        )
    num_rows = first.shape[0]
    for i, z in enumerate(features):
        if z.ndim != 2 or z.shape[0] != num_rows:
            raise ValueError(
                f"features[{i}] has shape {tuple(z.shape)}; expected [{num_rows}, d_{i}]: every agent's "
                f"features must be 2-D and hold the same B={num_rows} rows as features[0]"
            )
        if z.shape[1] == 0:
            raise ValueError(
                f"features[{i}] has shape {tuple(z.shape)}; expected at least one feature column"
            )
        if not z.is_floating_point():
            raise TypeError(f"features[{i}] has dtype {z.dtype}; expected a floating dtype, e.g. .float()")
        if z.dtype != first.dtype:
            raise TypeError(
                f"features[{i}] has dtype {z.dtype} but features[0] has {first.dtype}; "
                "cast all agents to one dtype"
            )
    num_agents = len(features)
    if alive is not None:
        _check_alive(alive, num_rows, num_agents)
    return num_rows, num_agents


def _check_features_are_tensors(features: Any) -> None:
    """``features`` is a non-empty list or tuple of tensors."""
    if isinstance(features, torch.Tensor) or not isinstance(features, (list, tuple)):
        raise TypeError(
            f"features must be a list of tensors, one [B, d_i] per agent in possible_agents order; "
            f"got {type(features).__name__}"
        )
    if len(features) == 0:
        raise ValueError("features is empty; pass one [B, d_i] tensor per agent in possible_agents order")
    for i, z in enumerate(features):
        if not isinstance(z, torch.Tensor):
            raise TypeError(f"features[{i}] must be a torch.Tensor of shape [B, d_{i}], got {type(z).__name__}")


def _check_alive(alive: Any, num_rows: int, num_agents: int) -> None:
    """``alive`` is a ``[B, N]`` bool tensor."""
    if not isinstance(alive, torch.Tensor):
        raise TypeError(f"alive must be a bool torch.Tensor of shape [B, N], got {type(alive).__name__}")
    if alive.dtype != torch.bool:
        raise TypeError(f"alive has dtype {alive.dtype}; expected torch.bool, e.g. alive.bool()")
    if tuple(alive.shape) != (num_rows, num_agents):
        raise ValueError(
            f"alive has shape {tuple(alive.shape)}; expected [B, N] = [{num_rows}, {num_agents}] "
            "(one row per minibatch row, one column per agent in possible_agents order)"
        )


def _all_alive(alive: torch.Tensor | None) -> bool:
    return alive is None or bool(alive.all())


def _same_width(features: Sequence[torch.Tensor]) -> bool:
    return all(z.shape[1] == features[0].shape[1] for z in features)


def _pair_index(num_agents: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    pairs = agent_pairs(num_agents)
    first = torch.tensor([i for i, _ in pairs], dtype=torch.long, device=device)
    second = torch.tensor([j for _, j in pairs], dtype=torch.long, device=device)
    return first, second


def _empty(features: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.zeros(0, dtype=features[0].dtype, device=features[0].device)


# ----------------------------------------------------------------------------------------------------------
# Moments and standardisation (rows outside ``rows`` never enter, even if they hold NaN)
# ----------------------------------------------------------------------------------------------------------


def _centered(z: torch.Tensor, rows: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Centre over the kept rows. z ``[..., B, d]``, rows ``[..., B]`` bool or None.

    Returns ``(centered [..., B, d] zero on dropped rows, count [...])``.
    """
    if rows is None:
        count = torch.full(z.shape[:-2], z.shape[-2], dtype=z.dtype, device=z.device)
        return z - z.mean(dim=-2, keepdim=True), count
    keep = rows.unsqueeze(-1)
    count = rows.sum(dim=-1).to(z.dtype)
    kept = torch.where(keep, z, torch.zeros((), dtype=z.dtype, device=z.device))
    mean = kept.sum(dim=-2, keepdim=True) / count.clamp_min(1)[..., None, None]
    return torch.where(keep, kept - mean, torch.zeros((), dtype=z.dtype, device=z.device)), count


def _safe_sqrt(x: torch.Tensor) -> torch.Tensor:
    """sqrt with a finite gradient at 0 (returns 0 there, with zero gradient)."""
    positive = x > 0
    return torch.where(positive, torch.where(positive, x, torch.ones_like(x)).sqrt(), torch.zeros_like(x))


def _standardize(
    z: torch.Tensor, rows: torch.Tensor | None, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(z - mean) / sqrt(var + eps)`` over the kept rows, biased variance.

    Args:
        z: ``[..., B, d]``.
        rows: ``[..., B]`` bool, or None for all rows.
        eps: added to the variance inside the square root.

    Returns:
        ``(z_hat [..., B, d], count [...], shrink [..., d])`` with ``z_hat`` zero on dropped rows and
        ``shrink = var / (var + eps)`` (so ``||z_hat[:, a]||^2 = count * shrink[a]``). A feature with
        ``var + eps == 0`` (constant, with ``eps = 0``) standardises to 0.
    """
    centered, count = _centered(z, rows)
    var = centered.square().sum(dim=-2) / count.clamp_min(1).unsqueeze(-1)
    denom = var + eps
    positive = denom > 0
    safe = torch.where(positive, denom, torch.ones_like(denom))
    return centered * safe.rsqrt().unsqueeze(-2), count, var / safe


def feature_std(z: torch.Tensor, rows: torch.Tensor | None = None, eps: float = 0.0) -> torch.Tensor:
    """Per-feature standard deviation over the batch, ``sqrt(var + eps)`` with the biased variance.

    Args:
        z: ``[B, d]`` features of one agent.
        rows: ``[B]`` bool, the rows to use (e.g. ``alive[:, i]``); None for all rows.
        eps: added to the variance inside the square root.

    Returns:
        ``[d]``; 0 for a feature whose ``var + eps`` is 0, NaN for every feature when no row is kept.
    """
    _check_matrix("z", z)
    _check_eps(eps)
    if rows is not None:
        if not isinstance(rows, torch.Tensor) or rows.dtype != torch.bool:
            raise TypeError(
                f"rows must be a bool tensor of shape [B], got {getattr(rows, 'dtype', type(rows).__name__)}"
            )
        if tuple(rows.shape) != (z.shape[0],):
            raise ValueError(
                f"rows has shape {tuple(rows.shape)}; expected [B] = [{z.shape[0]}], e.g. alive[:, i]"
            )
    centered, count = _centered(z, rows)
    if float(count) == 0:
        return torch.full(z.shape[1:], float("nan"), dtype=z.dtype, device=z.device)
    return _safe_sqrt(centered.square().sum(dim=0) / count + eps)


# ----------------------------------------------------------------------------------------------------------
# xcorr: normalised squared Frobenius norm of the cross-correlation matrix
# ----------------------------------------------------------------------------------------------------------


def _xcorr_from_standardized(
    z_hat_i: torch.Tensor,
    z_hat_j: torch.Tensor,
    count: torch.Tensor,
    shrink_i: torch.Tensor,
    shrink_j: torch.Tensor,
    debias: bool,
) -> torch.Tensor:
    """``[..., B, d_i]``, ``[..., B, d_j]``, ``[...]``, ``[..., d_i]``, ``[..., d_j]`` -> ``[...]``."""
    width_i, width_j = z_hat_i.shape[-1], z_hat_j.shape[-1]
    cross = z_hat_i.transpose(-1, -2) @ z_hat_j / count.clamp_min(1)[..., None, None]
    value = cross.square().sum(dim=(-2, -1)) / (width_i * width_j)
    if debias:
        value = value - _null_from_shrink(shrink_i, shrink_j, count)
    return torch.where(count >= 2, value, torch.zeros_like(value))


def _null_from_shrink(shrink_i: torch.Tensor, shrink_j: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    width_i, width_j = shrink_i.shape[-1], shrink_j.shape[-1]
    return shrink_i.sum(dim=-1) * shrink_j.sum(dim=-1) / (width_i * width_j * (count - 1).clamp_min(1))


def xcorr_redundancy(
    z_i: torch.Tensor, z_j: torch.Tensor, eps: float = DEFAULT_EPS, debias: bool = False
) -> torch.Tensor:
    """Normalised squared cross-correlation between two agents' features.

    Each feature is standardised over the batch, ``Ẑ = (Z - mean) / sqrt(var + eps)`` (biased variance,
    ``eps`` inside the square root so a constant feature has finite gradients); then ``C = Ẑ_iᵀ Ẑ_j / B`` and
    ``v = ||C||_F² / (d_i d_j)``. With ``eps = 0``, ``C`` holds Pearson correlations, so ``v ∈ [0, 1]``:
    ``1/d`` for identical whitened features, 1 for rank-1 features, ``||R||_F² / d²`` for identical features
    with correlation matrix ``R``, and ``E[v] = 1/(B - 1)`` for independent features.

    Args:
        z_i: ``[B, d_i]`` features of agent i.
        z_j: ``[B, d_j]`` features of agent j, same rows.
        eps: added to the variance inside the square root (>= 0; 0 gives exact correlations).
        debias: subtract :func:`xcorr_null_expectation`, the exact expectation of ``v`` when the two agents'
            features are independent, so unrelated features score about 0 (and the value can be negative).

    Returns:
        Scalar ``v``.

    Raises:
        ValueError: fewer than 2 rows, mismatched rows, negative eps.
    """
    _check_pair(z_i, z_j, _MIN_ROWS["xcorr"], "xcorr_redundancy")
    _check_eps(eps)
    z_hat_i, count, shrink_i = _standardize(z_i, None, eps)
    z_hat_j, _, shrink_j = _standardize(z_j, None, eps)
    return _xcorr_from_standardized(z_hat_i, z_hat_j, count, shrink_i, shrink_j, debias)


def xcorr_null_expectation(z_i: torch.Tensor, z_j: torch.Tensor, eps: float = DEFAULT_EPS) -> torch.Tensor:
    """The exact expectation of :func:`xcorr_redundancy` when the two agents' features are independent.

    If the rows are i.i.d. and ``z_j`` is independent of ``z_i``, permuting the rows of ``z_j`` does not
    change the joint law, and averaging ``(Ẑ_iᵀ Ẑ_j)_ab²`` over all ``B!`` permutations gives
    ``||Ẑ_i[:, a]||² ||Ẑ_j[:, b]||² / (B - 1)`` (the centred vectors live in the ``B - 1``-dimensional space
    orthogonal to the ones vector, and a uniformly random permutation spreads their squared norm evenly over
    its ``B - 1`` dimensions). Hence, with ``s_a = var_a / (var_a + eps)`` (so ``||Ẑ[:, a]||² = B s_a``),

    ``E[v] = (Σ_a s_ia)(Σ_b s_jb) / (d_i d_j (B - 1))``, which is exactly ``1/(B - 1)`` for ``eps = 0`` and
    non-constant features, whatever their distribution (not ``1/B``).

    Args:
        z_i: ``[B, d_i]``.
        z_j: ``[B, d_j]``.
        eps: as in :func:`xcorr_redundancy`.

    Returns:
        Scalar, differentiable.
    """
    _check_pair(z_i, z_j, _MIN_ROWS["xcorr"], "xcorr_null_expectation")
    _check_eps(eps)
    _, count, shrink_i = _standardize(z_i, None, eps)
    _, _, shrink_j = _standardize(z_j, None, eps)
    return _null_from_shrink(shrink_i, shrink_j, count)


def pairwise_xcorr(
    features: Sequence[torch.Tensor],
    alive: torch.Tensor | None = None,
    *,
    eps: float = DEFAULT_EPS,
    debias: bool = False,
) -> torch.Tensor:
    """:func:`xcorr_redundancy` for every agent pair, on the rows where both agents are alive.

    Args:
        features: per agent in ``possible_agents`` order, ``[B, d_i]`` on the same rows.
        alive: ``[B, N]`` bool, or None for all alive.
        eps: as in :func:`xcorr_redundancy`.
        debias: as in :func:`xcorr_redundancy`.

    Returns:
        ``[P]`` in :func:`agent_pairs` order; 0 for a pair with fewer than 2 common alive rows.
    """
    _, num_agents = validate_features(features, alive)
    _check_eps(eps)
    if num_agents < 2:
        return _empty(features)
    every_row = _all_alive(alive)
    if _same_width(features):
        stacked = torch.stack(list(features))
        first, second = _pair_index(num_agents, stacked.device)
        if every_row:
            z_hat, count, shrink = _standardize(stacked, None, eps)
            return _xcorr_from_standardized(
                z_hat[first], z_hat[second], count[first], shrink[first], shrink[second], debias
            )
        rows = (alive[:, first] & alive[:, second]).T
        z_hat_i, count, shrink_i = _standardize(stacked[first], rows, eps)
        z_hat_j, _, shrink_j = _standardize(stacked[second], rows, eps)
        return _xcorr_from_standardized(z_hat_i, z_hat_j, count, shrink_i, shrink_j, debias)
    if every_row:
        z_hat, count, shrink = zip(*(_standardize(z, None, eps) for z in features))
        values = [
            _xcorr_from_standardized(z_hat[i], z_hat[j], count[i], shrink[i], shrink[j], debias)
            for i, j in agent_pairs(num_agents)
        ]
        return torch.stack(values)
    values = []
    for i, j in agent_pairs(num_agents):
        rows = alive[:, i] & alive[:, j]
        z_hat_i, count, shrink_i = _standardize(features[i], rows, eps)
        z_hat_j, _, shrink_j = _standardize(features[j], rows, eps)
        values.append(_xcorr_from_standardized(z_hat_i, z_hat_j, count, shrink_i, shrink_j, debias))
    return torch.stack(values)


# ----------------------------------------------------------------------------------------------------------
# Unbiased HSIC (Song et al. 2012) and debiased linear CKA
# ----------------------------------------------------------------------------------------------------------


def _hsic_combine(
    trace: torch.Tensor,
    k_total: torch.Tensor,
    l_total: torch.Tensor,
    cross: torch.Tensor,
    count: torch.Tensor,
) -> torch.Tensor:
    """Song et al.'s unbiased HSIC from its four sums over the zero-diagonal kernels K̃, L̃.

    ``trace = tr(K̃ L̃)``, ``k_total = 1ᵀ K̃ 1``, ``l_total = 1ᵀ L̃ 1``, ``cross = 1ᵀ K̃ L̃ 1`` and
    ``count = n``; 0 where ``n < 4``.
    """
    valid = count >= 4
    n = torch.where(valid, count, torch.full_like(count, 4))
    value = (trace + k_total * l_total / ((n - 1) * (n - 2)) - 2 * cross / (n - 2)) / (n * (n - 3))
    return torch.where(valid, value, torch.zeros_like(value))


def _hsic_from_kernels(k: torch.Tensor, l: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """k, l ``[..., B, B]`` with dropped rows/columns already zero; count ``[...]`` -> ``[...]``."""
    eye = torch.eye(k.shape[-1], dtype=torch.bool, device=k.device)
    k = k.masked_fill(eye, 0)
    l = l.masked_fill(eye, 0)
    trace = (k * l.transpose(-1, -2)).sum(dim=(-2, -1))
    cross = (k.sum(dim=-2) * l.sum(dim=-1)).sum(dim=-1)
    return _hsic_combine(trace, k.sum(dim=(-2, -1)), l.sum(dim=(-2, -1)), cross, count)


def _linear_hsic(x: torch.Tensor, y: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Unbiased HSIC with linear kernels ``K = x xᵀ``, ``L = y yᵀ`` in O(B d²), without forming ``[B, B]``.

    x ``[..., B, d_i]``, y ``[..., B, d_j]`` with dropped rows zero; count ``[...]`` -> ``[...]``.
    """
    k_diag = x.square().sum(dim=-1)
    l_diag = y.square().sum(dim=-1)
    trace = (x.transpose(-1, -2) @ y).square().sum(dim=(-2, -1)) - (k_diag * l_diag).sum(dim=-1)
    k_rows = (x @ x.sum(dim=-2).unsqueeze(-1)).squeeze(-1) - k_diag
    l_rows = (y @ y.sum(dim=-2).unsqueeze(-1)).squeeze(-1) - l_diag
    return _hsic_combine(trace, k_rows.sum(dim=-1), l_rows.sum(dim=-1), (k_rows * l_rows).sum(dim=-1), count)


def _cka_ratio(hsic_xy: torch.Tensor, hsic_xx: torch.Tensor, hsic_yy: torch.Tensor) -> torch.Tensor:
    """``hsic_xy / sqrt(hsic_xx hsic_yy)``, 0 where a self-HSIC is <= 0 (constant features, tiny batches)."""
    product = hsic_xx.clamp_min(0) * hsic_yy.clamp_min(0)
    positive = product > 0
    safe = torch.where(positive, product, torch.ones_like(product))
    return torch.where(positive, hsic_xy * safe.rsqrt(), torch.zeros_like(hsic_xy))


def _cka_from_centered(x: torch.Tensor, y: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    return _cka_ratio(_linear_hsic(x, y, count), _linear_hsic(x, x, count), _linear_hsic(y, y, count))


def linear_kernel(z: torch.Tensor) -> torch.Tensor:
    """The linear kernel matrix ``K = Z Zᵀ``.

    Args:
        z: ``[B, d]``.

    Returns:
        ``[B, B]``.
    """
    _check_matrix("z", z)
    return z @ z.T


def _squared_distances(z: torch.Tensor) -> torch.Tensor:
    """``[..., B, d]`` -> ``[..., B, B]`` squared Euclidean distances, exact zeros on the diagonal."""
    norms = z.square().sum(dim=-1)
    dist = (norms.unsqueeze(-1) + norms.unsqueeze(-2) - 2 * z @ z.transpose(-1, -2)).clamp_min(0)
    eye = torch.eye(z.shape[-2], dtype=torch.bool, device=z.device)
    return dist.masked_fill(eye, 0)


def _median_bandwidth_sq(dist: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    """Median-heuristic ``σ²``: the (lower) median of the squared distances over pairs of kept rows ``a < b``.

    Falls back to their mean when the median is 0 (many duplicate rows), and to 1 when that is 0 too (constant
    features, whose kernel is then all ones whatever σ). Computed without gradient. dist ``[..., B, B]``,
    rows ``[..., B]`` bool or None -> ``[...]``.
    """
    with torch.no_grad():
        num_rows = dist.shape[-1]
        pairs = torch.ones(num_rows, num_rows, dtype=torch.bool, device=dist.device).triu(1)
        if rows is not None:
            pairs = pairs & rows.unsqueeze(-1) & rows.unsqueeze(-2)
        pairs = pairs.expand(dist.shape)
        kept = torch.where(pairs, dist, torch.full_like(dist, float("nan"))).flatten(-2)
        median = kept.nanmedian(dim=-1).values
        mean = kept.nansum(dim=-1) / pairs.flatten(-2).sum(dim=-1).clamp_min(1)
        sigma_sq = torch.where(median > 0, median, mean)
        return torch.where(sigma_sq > 0, sigma_sq, torch.ones_like(sigma_sq))


def _check_bandwidth(name: str, bandwidth: float | None) -> None:
    if bandwidth is None:
        return
    if isinstance(bandwidth, bool) or not isinstance(bandwidth, (int, float)):
        raise TypeError(f"{name} must be a float or None (median heuristic), got {type(bandwidth).__name__}")
    if not (math.isfinite(bandwidth) and bandwidth > 0):
        raise ValueError(
            f"{name}={bandwidth!r} must be a finite number > 0; pass None for the median heuristic"
        )


def rbf_kernel(z: torch.Tensor, bandwidth: float | None = None) -> torch.Tensor:
    """Gaussian RBF kernel ``K_ab = exp(-||z_a - z_b||² / (2 σ²))``.

    Args:
        z: ``[B, d]``.
        bandwidth: ``σ``; None uses the median heuristic, ``σ`` = the median Euclidean distance between
            distinct rows (the lower median for an even number of pairs; the mean when the median is 0; 1 when
            all rows coincide), computed without gradient.

    Returns:
        ``[B, B]``, ones on the diagonal.
    """
    _check_matrix("z", z)
    _check_bandwidth("bandwidth", bandwidth)
    dist = _squared_distances(z)
    if bandwidth is None:
        sigma_sq = _median_bandwidth_sq(dist, None)
    else:
        sigma_sq = torch.tensor(float(bandwidth) ** 2, dtype=z.dtype, device=z.device)
    return torch.exp(-dist / (2 * sigma_sq))


def hsic_unbiased(k: torch.Tensor, l: torch.Tensor) -> torch.Tensor:
    """Song et al. (2012) unbiased HSIC estimator from two kernel matrices.

    With ``K̃``, ``L̃`` the kernels with their diagonals set to zero (the diagonal never enters; it is
    ignored, whatever it holds),
    ``HSIC₁ = [tr(K̃ L̃) + (1ᵀK̃1)(1ᵀL̃1) / ((n-1)(n-2)) - 2/(n-2) · 1ᵀK̃L̃1] / (n (n-3))``.
    It is the U-statistic over ordered quadruples of distinct rows, so its expectation is the population HSIC;
    unlike the biased ``tr(KHLH)/(n-1)²`` it is about 0 for independent inputs, and it can be slightly
    negative.

    Args:
        k: ``[..., n, n]`` kernel matrix of the first variable.
        l: ``[..., n, n]`` kernel matrix of the second, same rows.

    Returns:
        ``[...]``.

    Raises:
        ValueError: non-square or mismatched kernels, or ``n < 4``.
    """
    for name, m in (("k", k), ("l", l)):
        if not isinstance(m, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor of shape [..., n, n], got {type(m).__name__}")
        if m.ndim < 2 or m.shape[-1] != m.shape[-2]:
            raise ValueError(
                f"{name} has shape {tuple(m.shape)}; expected a square kernel matrix [..., n, n]"
            )
    if k.shape != l.shape:
        raise ValueError(
            f"k has shape {tuple(k.shape)} and l has {tuple(l.shape)}; expected the same [..., n, n]"
        )
    num_rows = k.shape[-1]
    if num_rows < 4:
        raise ValueError(f"hsic_unbiased needs n >= 4 rows, got n={num_rows}; use a larger batch")
    count = torch.full(k.shape[:-2], num_rows, dtype=k.dtype, device=k.device)
    return _hsic_from_kernels(k, l, count)


def rbf_hsic(
    z_i: torch.Tensor, z_j: torch.Tensor, bandwidth_i: float | None = None, bandwidth_j: float | None = None
) -> torch.Tensor:
    """Unbiased HSIC between two agents' features with RBF kernels; catches nonlinear dependence.

    ``xcorr`` and ``cka`` only see linear relations: for a symmetric ``z`` and ``z_j = z_i²`` both are about
    0, while this is clearly positive. With the median heuristic the value is invariant to rescaling either
    input.

    Args:
        z_i: ``[B, d_i]``.
        z_j: ``[B, d_j]``, same rows.
        bandwidth_i: ``σ`` for ``z_i``'s kernel; None for the median heuristic (no gradient through it).
        bandwidth_j: ``σ`` for ``z_j``'s kernel; likewise.

    Returns:
        Scalar.
    """
    _check_pair(z_i, z_j, _MIN_ROWS["hsic"], "rbf_hsic")
    _check_bandwidth("bandwidth_i", bandwidth_i)
    _check_bandwidth("bandwidth_j", bandwidth_j)
    return hsic_unbiased(rbf_kernel(z_i, bandwidth_i), rbf_kernel(z_j, bandwidth_j))


def debiased_cka(z_i: torch.Tensor, z_j: torch.Tensor) -> torch.Tensor:
    """Debiased linear CKA between two agents' features.

    ``CKA = HSIC₁(K, L) / sqrt(HSIC₁(K, K) HSIC₁(L, L))`` with ``K = Z_i Z_iᵀ``, ``L = Z_j Z_jᵀ``. Uses Song
    et al.'s unbiased HSIC (see :func:`hsic_unbiased`), computed from the features in O(B d²) without forming
    ``[B, B]`` kernels. Invariant to rotations and isotropic scaling of either input and to shifts; identical
    features give 1; independent features give about 0 (the plain, biased CKA does not). It is 0 when a
    self-HSIC is <= 0 (constant features).

    Args:
        z_i: ``[B, d_i]``.
        z_j: ``[B, d_j]``, same rows.

    Returns:
        Scalar.
    """
    _check_pair(z_i, z_j, _MIN_ROWS["cka"], "debiased_cka")
    x, count = _centered(z_i, None)
    y, _ = _centered(z_j, None)
    return _cka_from_centered(x, y, count)


def pairwise_cka(features: Sequence[torch.Tensor], alive: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`debiased_cka` for every agent pair, on the rows where both agents are alive.

    Args:
        features: per agent, ``[B, d_i]`` on the same rows.
        alive: ``[B, N]`` bool, or None for all alive.

    Returns:
        ``[P]`` in :func:`agent_pairs` order; 0 for a pair with fewer than 4 common alive rows.
    """
    _, num_agents = validate_features(features, alive)
    if num_agents < 2:
        return _empty(features)
    every_row = _all_alive(alive)
    if _same_width(features):
        stacked = torch.stack(list(features))
        first, second = _pair_index(num_agents, stacked.device)
        if every_row:
            centered, count = _centered(stacked, None)
            self_hsic = _linear_hsic(centered, centered, count)
            cross = _linear_hsic(centered[first], centered[second], count[first])
            return _cka_ratio(cross, self_hsic[first], self_hsic[second])
        rows = (alive[:, first] & alive[:, second]).T
        x, count = _centered(stacked[first], rows)
        y, _ = _centered(stacked[second], rows)
        return _cka_from_centered(x, y, count)
    values = []
    for i, j in agent_pairs(num_agents):
        rows = None if every_row else alive[:, i] & alive[:, j]
        x, count = _centered(features[i], rows)
        y, _ = _centered(features[j], rows)
        values.append(_cka_from_centered(x, y, count))
    return torch.stack(values)


def pairwise_hsic(features: Sequence[torch.Tensor], alive: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`rbf_hsic` (median-heuristic bandwidths) for every agent pair, on the rows where both are alive.

    The bandwidth of each side is the median heuristic over the pair's own rows, so a pair's value equals
    :func:`rbf_hsic` on those rows alone. Always batched over pairs (kernels are ``[B, B]`` whatever ``d_i``).

    Args:
        features: per agent, ``[B, d_i]`` on the same rows.
        alive: ``[B, N]`` bool, or None for all alive.

    Returns:
        ``[P]`` in :func:`agent_pairs` order; 0 for a pair with fewer than 4 common alive rows.
    """
    num_rows, num_agents = validate_features(features, alive)
    if num_agents < 2:
        return _empty(features)
    every_row = _all_alive(alive)
    zero = torch.zeros((), dtype=features[0].dtype, device=features[0].device)
    if every_row:
        dist = torch.stack([_squared_distances(z) for z in features])
    else:
        # Rows where agent i is absent are zeroed first, so whatever they hold never reaches a gradient.
        dist = torch.stack(
            [_squared_distances(torch.where(alive[:, i, None], z, zero)) for i, z in enumerate(features)]
        )
    first, second = _pair_index(num_agents, dist.device)
    if every_row:
        kernels = torch.exp(-dist / (2 * _median_bandwidth_sq(dist, None))[:, None, None])
        count = torch.full((len(first),), num_rows, dtype=dist.dtype, device=dist.device)
        return _hsic_from_kernels(kernels[first], kernels[second], count)
    rows = (alive[:, first] & alive[:, second]).T
    keep = rows.unsqueeze(-1) & rows.unsqueeze(-2)
    dist_i, dist_j = dist[first], dist[second]
    k = torch.where(keep, torch.exp(-dist_i / (2 * _median_bandwidth_sq(dist_i, rows))[:, None, None]), zero)
    l = torch.where(keep, torch.exp(-dist_j / (2 * _median_bandwidth_sq(dist_j, rows))[:, None, None]), zero)
    return _hsic_from_kernels(k, l, rows.sum(dim=-1).to(dist.dtype))


def pairwise_redundancy(
    features: Sequence[torch.Tensor],
    alive: torch.Tensor | None = None,
    *,
    kind: str = "xcorr",
    eps: float = DEFAULT_EPS,
    debias: bool = False,
) -> torch.Tensor:
    """Dispatch to :func:`pairwise_xcorr`, :func:`pairwise_cka` or :func:`pairwise_hsic`.

    Args:
        features: per agent, ``[B, d_i]`` on the same rows.
        alive: ``[B, N]`` bool, or None for all alive.
        kind: ``"xcorr"``, ``"cka"`` or ``"hsic"``.
        eps: ``xcorr`` only.
        debias: ``xcorr`` only (the other two are unbiased already).

    Returns:
        ``[P]`` in :func:`agent_pairs` order.
    """
    if kind not in REDUNDANCY_KINDS:
        kinds = ", ".join(map(repr, REDUNDANCY_KINDS))
        raise ValueError(f"kind={kind!r} is not a redundancy kind; use one of {kinds}")
    if kind == "xcorr":
        return pairwise_xcorr(features, alive, eps=eps, debias=debias)
    if debias:
        raise ValueError(f"debias=True applies to kind='xcorr' only; kind={kind!r} is unbiased already")
    if kind == "cka":
        return pairwise_cka(features, alive)
    return pairwise_hsic(features, alive)
