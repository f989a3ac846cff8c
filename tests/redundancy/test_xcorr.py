"""xcorr: known answers, the null expectation (exact and Monte Carlo), bounds, gradients, errors."""

import itertools
import math

import numpy as np
import pytest
import torch

from marljoint.redundancy import pairwise_xcorr, xcorr_null_expectation, xcorr_redundancy

F64 = torch.float64


def naive_xcorr(z_i: torch.Tensor, z_j: torch.Tensor, eps: float) -> float:
    """The definition, one Pearson-like entry at a time, in plain Python floats."""
    rows, width_i = z_i.shape
    width_j = z_j.shape[1]

    def column(z, a):
        values = [float(z[b, a]) for b in range(rows)]
        mean = sum(values) / rows
        var = sum((v - mean) ** 2 for v in values) / rows
        return [(v - mean) / math.sqrt(var + eps) for v in values]

    total = 0.0
    for a in range(width_i):
        x = column(z_i, a)
        for c in range(width_j):
            y = column(z_j, c)
            total += (sum(p * q for p, q in zip(x, y)) / rows) ** 2
    return total / (width_i * width_j)


def whitened(rows: int, width: int, seed: int) -> torch.Tensor:
    """Columns with mean 0, biased variance 1 and zero correlation with each other."""
    g = torch.Generator().manual_seed(seed)
    raw = torch.randn(rows, width, generator=g, dtype=F64)
    q, _ = torch.linalg.qr(raw - raw.mean(dim=0))
    return q * math.sqrt(rows)


def test_hand_computed_single_column():
    # x - mean = [-1.5, -0.5, 0.5, 1.5], y - mean = [-1.5, 0.5, -0.5, 1.5]: r = 4 / 5, v = r² = 0.64.
    x = torch.tensor([[1.0], [2.0], [3.0], [4.0]], dtype=F64)
    y = torch.tensor([[1.0], [3.0], [2.0], [4.0]], dtype=F64)
    assert xcorr_redundancy(x, y, eps=0.0).item() == pytest.approx(0.64, abs=1e-15)
    # eps inside the square root: each side is divided by sqrt(1.25 + eps) instead of sqrt(1.25).
    assert xcorr_redundancy(x, y, eps=0.25).item() == pytest.approx((4 / 4 / 1.5) ** 2, abs=1e-15)


def test_hand_computed_orthogonal_columns():
    # Columns ±1, mean 0, variance 1, orthogonal: C = I₂, v = 2 / 4 = 1/2.
    z = torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]], dtype=F64)
    assert xcorr_redundancy(z, z, eps=0.0).item() == pytest.approx(0.5, abs=1e-15)


@pytest.mark.parametrize("eps", [0.0, 1e-5, 0.1])
def test_matches_naive_definition(eps):
    g = torch.Generator().manual_seed(1)
    z_i = torch.randn(7, 3, generator=g, dtype=F64)
    z_j = torch.randn(7, 2, generator=g, dtype=F64) + z_i[:, :2] ** 2
    assert xcorr_redundancy(z_i, z_j, eps=eps).item() == pytest.approx(naive_xcorr(z_i, z_j, eps), rel=1e-12)


@pytest.mark.parametrize("width", [1, 3, 8])
def test_identical_whitened_full_rank_is_one_over_d(width):
    z = whitened(32, width, seed=width)
    assert xcorr_redundancy(z, z, eps=0.0).item() == pytest.approx(1 / width, abs=1e-12)
    # Per-column affine maps with positive or negative scales change nothing.
    scale = torch.tensor([(-1) ** k * (k + 0.5) for k in range(width)], dtype=F64)
    assert xcorr_redundancy(z, z * scale + 5.0, eps=0.0).item() == pytest.approx(1 / width, abs=1e-12)


def test_rank_one_is_one():
    g = torch.Generator().manual_seed(2)
    signal = torch.randn(20, 1, generator=g, dtype=F64)
    scale, shift = (
        torch.tensor([1.0, -2.0, 0.5, 7.0], dtype=F64),
        torch.tensor([0.0, 1.0, -3.0, 2.0], dtype=F64),
    )
    z_i = signal * scale + shift
    z_j = signal * torch.tensor([-0.1, 4.0], dtype=F64) + 9.0
    assert xcorr_redundancy(z_i, z_i, eps=0.0).item() == pytest.approx(1.0, abs=1e-12)
    assert xcorr_redundancy(z_i, z_j, eps=0.0).item() == pytest.approx(1.0, abs=1e-12)


def test_identical_features_give_squared_norm_of_correlation_matrix():
    g = torch.Generator().manual_seed(3)
    z = torch.randn(50, 4, generator=g, dtype=F64) @ torch.randn(4, 4, generator=g, dtype=F64)
    correlation = np.corrcoef(z.numpy(), rowvar=False)
    expected = float((correlation**2).sum()) / 4**2
    assert xcorr_redundancy(z, z, eps=0.0).item() == pytest.approx(expected, abs=1e-12)


def test_value_in_unit_interval():
    g = torch.Generator().manual_seed(4)
    for trial in range(50):
        rows = 2 + trial % 9
        z_i = torch.randn(rows, 1 + trial % 4, generator=g, dtype=F64)
        z_j = torch.randn(rows, 1 + trial % 3, generator=g, dtype=F64)
        if trial % 5 == 0:
            z_j = torch.cat([z_i[:, :1], z_j], dim=1)
        v = xcorr_redundancy(z_i, z_j, eps=0.0).item()
        assert -1e-12 <= v <= 1 + 1e-12


@pytest.mark.parametrize("eps", [0.0, 0.3])
def test_null_expectation_is_exact_over_all_row_permutations(eps):
    # Independent i.i.d. rows: permuting z_j's rows leaves the joint law unchanged, so the average over all B!
    # permutations is the exact expectation. It is 1/(B - 1) (not 1/B) for eps = 0, whatever the distribution.
    rows = 5
    g = torch.Generator().manual_seed(5)
    z_i = torch.randn(rows, 2, generator=g, dtype=F64) ** 3
    z_j = torch.rand(rows, 3, generator=g, dtype=F64).log()
    orders = [list(p) for p in itertools.permutations(range(rows))]
    values = [xcorr_redundancy(z_i, z_j[order], eps=eps).item() for order in orders]
    null = xcorr_null_expectation(z_i, z_j, eps=eps).item()
    assert sum(values) / len(values) == pytest.approx(null, abs=1e-12)
    if eps == 0.0:
        assert null == pytest.approx(1 / (rows - 1), abs=1e-15)
    debiased = [xcorr_redundancy(z_i, z_j[order], eps=eps, debias=True).item() for order in orders]
    assert sum(debiased) / len(debiased) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("distribution", ["normal", "lognormal"])
def test_null_expectation_monte_carlo(distribution):
    # 40 independent agents per draw -> 780 independent-feature pairs; 8 draws. Standard error ≈ 0.0014.
    rows, g = 6, torch.Generator().manual_seed(6)
    raw, debiased = [], []
    for _ in range(8):
        features = [torch.randn(rows, 2, generator=g, dtype=F64) for _ in range(40)]
        if distribution == "lognormal":
            features = [z.exp() for z in features]
        raw.append(pairwise_xcorr(features))
        debiased.append(pairwise_xcorr(features, debias=True))
    mean = torch.cat(raw).mean().item()
    assert mean == pytest.approx(1 / (rows - 1), abs=0.006)
    assert abs(mean - 1 / rows) > 0.025
    assert torch.cat(debiased).mean().item() == pytest.approx(0.0, abs=0.006)


def test_debias_subtracts_one_over_b_minus_one():
    g = torch.Generator().manual_seed(7)
    z_i, z_j = torch.randn(9, 3, generator=g, dtype=F64), torch.randn(9, 2, generator=g, dtype=F64)
    shift = xcorr_redundancy(z_i, z_j, eps=0.0) - xcorr_redundancy(z_i, z_j, eps=0.0, debias=True)
    assert shift.item() == pytest.approx(1 / 8, abs=1e-15)


@pytest.mark.parametrize("debias", [False, True])
def test_gradcheck(debias):
    g = torch.Generator().manual_seed(8)
    z_i = torch.randn(6, 3, generator=g, dtype=F64, requires_grad=True)
    z_j = torch.randn(6, 2, generator=g, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: xcorr_redundancy(a, b, eps=1e-2, debias=debias), (z_i, z_j))


def test_gradient_vanishes_at_zero_cross_correlation():
    z_i = torch.tensor([[1.0], [-1.0], [1.0], [-1.0]], dtype=F64, requires_grad=True)
    z_j = torch.tensor([[1.0], [1.0], [-1.0], [-1.0]], dtype=F64, requires_grad=True)
    value = xcorr_redundancy(z_i, z_j)
    value.backward()
    assert value.item() == pytest.approx(0.0, abs=1e-30)
    assert z_i.grad.abs().max().item() < 1e-15 and z_j.grad.abs().max().item() < 1e-15
    # Away from zero correlation the gradient is not small: the vanishing is specific to C = 0.
    moved = z_j.detach().clone()
    moved[0, 0] = 2.0
    moved.requires_grad_(True)
    xcorr_redundancy(z_i.detach(), moved).backward()
    assert moved.grad.abs().max().item() > 1e-2


@pytest.mark.parametrize("eps", [0.0, 1e-5])
def test_constant_features_give_finite_values_and_gradients(eps):
    g = torch.Generator().manual_seed(9)
    z_i = torch.cat([torch.full((8, 1), 0.5, dtype=F64), torch.randn(8, 1, generator=g, dtype=F64)], dim=1)
    z_i.requires_grad_(True)
    z_j = torch.full((8, 2), -2.0, dtype=F64, requires_grad=True)
    for debias in (False, True):
        value = xcorr_redundancy(z_i, z_j, eps=eps, debias=debias)
        grads = torch.autograd.grad(value, (z_i, z_j))
        assert torch.isfinite(value)
        assert all(torch.isfinite(grad).all() for grad in grads)


def test_shrinking_features_below_sqrt_eps_lowers_the_value():
    # The loophole the variance floor closes: eps inside the square root damps features whose std <<
    # sqrt(eps).
    z = whitened(16, 2, seed=10)
    full = xcorr_redundancy(z, z).item()
    assert full == pytest.approx(0.5, rel=1e-4)
    assert xcorr_redundancy(z * 1e-4, z).item() < 1e-2 * full


def test_errors():
    z = torch.randn(5, 2, dtype=F64)
    with pytest.raises(ValueError, match=r"z_i has 5 rows and z_j has 4"):
        xcorr_redundancy(z, z[:4])
    with pytest.raises(ValueError, match=r"z_j has shape \(5,\); expected \[B, d\]"):
        xcorr_redundancy(z, z[:, 0])
    with pytest.raises(ValueError, match=r"needs at least 2 rows, got B=1"):
        xcorr_redundancy(z[:1], z[:1])
    with pytest.raises(ValueError, match=r"eps=-0.1 must be a finite number >= 0"):
        xcorr_redundancy(z, z, eps=-0.1)
    with pytest.raises(TypeError, match=r"z_i has dtype torch.int64; expected a floating dtype"):
        xcorr_redundancy(torch.ones(5, 2, dtype=torch.long), z)
    with pytest.raises(TypeError, match=r"z_i has dtype torch.float64 and z_j has torch.float32"):
        xcorr_redundancy(z, z.float())
