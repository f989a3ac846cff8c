"""Debiased CKA and unbiased HSIC: loop references, known answers, invariances, gradients, errors."""

import itertools
import math

import pytest
import torch

from marljoint.redundancy import (
    debiased_cka,
    hsic_unbiased,
    linear_kernel,
    pairwise_cka,
    rbf_hsic,
    rbf_kernel,
    xcorr_redundancy,
)

F64 = torch.float64


def hsic_formula_loops(k: torch.Tensor, l: torch.Tensor) -> float:
    """Song et al. (2012), Eq. 5, with K̃, L̃ the kernels with zeroed diagonals, element by element."""
    n = k.shape[0]
    kt = [[0.0 if a == b else float(k[a, b]) for b in range(n)] for a in range(n)]
    lt = [[0.0 if a == b else float(l[a, b]) for b in range(n)] for a in range(n)]
    trace = sum(kt[a][b] * lt[b][a] for a in range(n) for b in range(n))
    k_sum = sum(kt[a][b] for a in range(n) for b in range(n))
    l_sum = sum(lt[a][b] for a in range(n) for b in range(n))
    k_l_sum = sum(kt[a][b] * lt[b][c] for a in range(n) for b in range(n) for c in range(n))
    return (trace + k_sum * l_sum / ((n - 1) * (n - 2)) - 2 / (n - 2) * k_l_sum) / (n * (n - 3))


def hsic_u_statistic_loops(k: torch.Tensor, l: torch.Tensor) -> float:
    """HSIC₁ as a U-statistic, the definition the closed form is derived from.

    The mean over ordered quadruples (s, t, u, v) of distinct rows of ``k_st l_st + k_st l_uv - 2 k_st l_su``.
    The diagonal never appears, which is what the closed form's zeroing encodes.
    """
    n = k.shape[0]
    total, count = 0.0, 0
    for s, t, u, v in itertools.permutations(range(n), 4):
        total += float(k[s, t] * l[s, t] + k[s, t] * l[u, v] - 2 * k[s, t] * l[s, u])
        count += 1
    return total / count


def rbf_loops(z: torch.Tensor, sigma: float) -> torch.Tensor:
    n = z.shape[0]
    return torch.tensor(
        [[math.exp(-float(((z[a] - z[b]) ** 2).sum()) / (2 * sigma**2)) for b in range(n)] for a in range(n)],
        dtype=F64,
    )


def sample(rows, width, seed):
    return torch.randn(rows, width, generator=torch.Generator().manual_seed(seed), dtype=F64)


@pytest.mark.parametrize("kernel", ["rbf", "linear"])
def test_hsic_matches_loop_references(kernel):
    z_i = sample(6, 2, seed=0)
    z_j = z_i[:, :1] ** 2 + 0.3 * sample(6, 1, seed=1)
    if kernel == "rbf":
        k, l = rbf_loops(z_i, 1.3), rbf_loops(z_j, 0.7)
        assert torch.allclose(rbf_kernel(z_i, bandwidth=1.3), k, atol=1e-14)
    else:
        k, l = z_i @ z_i.T, z_j @ z_j.T
    value = hsic_unbiased(k, l).item()
    assert value == pytest.approx(hsic_formula_loops(k, l), rel=1e-12, abs=1e-14)
    assert value == pytest.approx(hsic_u_statistic_loops(k, l), rel=1e-10, abs=1e-14)


def test_hsic_ignores_the_kernel_diagonal():
    k, l = linear_kernel(sample(7, 3, seed=2)), linear_kernel(sample(7, 2, seed=3))
    noise = torch.diag(torch.arange(1.0, 8.0, dtype=F64) * 10)
    assert hsic_unbiased(k + noise, l - noise).item() == pytest.approx(hsic_unbiased(k, l).item(), rel=1e-12)


def test_hsic_batches_over_leading_dims():
    k = torch.stack([linear_kernel(sample(5, 2, seed=s)) for s in range(3)])
    l = torch.stack([linear_kernel(sample(5, 1, seed=10 + s)) for s in range(3)])
    batched = hsic_unbiased(k, l)
    assert batched.shape == (3,)
    for s in range(3):
        assert batched[s].item() == pytest.approx(hsic_formula_loops(k[s], l[s]), rel=1e-12)


def test_linear_hsic_is_unbiased_for_the_squared_cross_covariance():
    # y = x + noise, x ~ N(0, 1): Cov(x, y) = 1, so E[HSIC₁] = ||Cov||_F² = 1 even with n = 8 rows per
    # estimate.
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4000, 8, 1, generator=g, dtype=F64)
    y = x + torch.randn(4000, 8, 1, generator=g, dtype=F64)
    estimates = hsic_unbiased(x @ x.transpose(-1, -2), y @ y.transpose(-1, -2))
    assert estimates.mean().item() == pytest.approx(1.0, abs=0.1)  # standard error ≈ 0.023


def test_rbf_median_heuristic_by_hand():
    # Squared distances between distinct rows: 1, 9, 4 -> median 4 -> σ² = 4, K_01 = exp(-1/8), K_02 =
    # exp(-9/8).
    z = torch.tensor([[0.0], [1.0], [3.0]], dtype=F64)
    k = rbf_kernel(z)
    assert k[0, 1].item() == pytest.approx(math.exp(-1 / 8), rel=1e-14)
    assert k[0, 2].item() == pytest.approx(math.exp(-9 / 8), rel=1e-14)
    assert torch.equal(torch.diagonal(k), torch.ones(3, dtype=F64))
    assert torch.allclose(k, rbf_kernel(z, bandwidth=2.0))


def test_rbf_median_heuristic_carries_no_gradient():
    z = sample(6, 2, seed=5).requires_grad_(True)
    sigma = math.sqrt(float(torch.pdist(z.detach()).square().median()))
    (grad_heuristic,) = torch.autograd.grad(rbf_kernel(z).sum(), z)
    (grad_fixed,) = torch.autograd.grad(rbf_kernel(z, bandwidth=sigma).sum(), z)
    assert torch.allclose(grad_heuristic, grad_fixed, atol=1e-14)


def test_hsic_detects_square_that_xcorr_misses():
    z = torch.linspace(-1.0, 1.0, 41, dtype=F64).unsqueeze(1)
    square = z**2
    assert xcorr_redundancy(z, square).item() < 1e-20  # exactly uncorrelated by symmetry
    dependent = rbf_hsic(z, square).item()
    shuffled = rbf_hsic(z, square[torch.randperm(41, generator=torch.Generator().manual_seed(6))]).item()
    assert dependent > 0.02
    assert dependent > 10 * abs(shuffled)


def test_hsic_is_scale_invariant_with_the_median_heuristic():
    z_i, z_j = sample(12, 2, seed=7), sample(12, 3, seed=8)
    z_j = z_j + z_i[:, :1].sin()
    assert rbf_hsic(100 * z_i, 0.01 * z_j).item() == pytest.approx(rbf_hsic(z_i, z_j).item(), rel=1e-10)


def test_cka_identical_and_affine_copies_are_one():
    z = sample(20, 4, seed=9)
    assert debiased_cka(z, z).item() == pytest.approx(1.0, abs=1e-12)
    assert debiased_cka(z, -3.0 * z + 2.0).item() == pytest.approx(1.0, abs=1e-12)


def test_cka_is_rotation_invariant():
    z_i, z_j = sample(20, 4, seed=10), sample(20, 4, seed=11)
    z_j = z_j + z_i
    rotation, _ = torch.linalg.qr(sample(4, 4, seed=12))
    assert debiased_cka(z_i @ rotation, z_j).item() == pytest.approx(debiased_cka(z_i, z_j).item(), rel=1e-12)
    assert debiased_cka(z_i @ rotation, z_i).item() == pytest.approx(1.0, abs=1e-12)


def test_cka_matches_kernel_form():
    z_i, z_j = sample(9, 3, seed=13), sample(9, 2, seed=14)
    k, l = linear_kernel(z_i), linear_kernel(z_j)
    expected = hsic_formula_loops(k, l) / math.sqrt(hsic_formula_loops(k, k) * hsic_formula_loops(l, l))
    assert debiased_cka(z_i, z_j).item() == pytest.approx(expected, rel=1e-10)


def test_cka_of_independent_features_averages_zero():
    g = torch.Generator().manual_seed(15)
    features = [torch.randn(16, 4, generator=g, dtype=F64).exp() for _ in range(30)]
    assert pairwise_cka(features).mean().item() == pytest.approx(0.0, abs=0.02)  # standard error ≈ 0.005


def test_gradcheck_cka_and_hsic():
    z_i = sample(6, 3, seed=16).requires_grad_(True)
    z_j = (sample(6, 2, seed=17) + z_i.detach()[:, :2]).requires_grad_(True)
    assert torch.autograd.gradcheck(debiased_cka, (z_i, z_j))
    assert torch.autograd.gradcheck(lambda a, b: rbf_hsic(a, b, bandwidth_i=1.5, bandwidth_j=0.8), (z_i, z_j))
    k = linear_kernel(sample(5, 2, seed=18)).requires_grad_(True)
    l = linear_kernel(sample(5, 2, seed=19)).requires_grad_(True)
    assert torch.autograd.gradcheck(hsic_unbiased, (k, l))


def test_constant_features_give_finite_values_and_gradients():
    z_i = torch.full((8, 2), 0.25, dtype=F64, requires_grad=True)
    z_j = sample(8, 2, seed=20).requires_grad_(True)
    for fn in (debiased_cka, rbf_hsic):
        value = fn(z_i, z_j)
        grads = torch.autograd.grad(value, (z_i, z_j))
        assert value.item() == pytest.approx(0.0, abs=1e-12)
        assert all(torch.isfinite(grad).all() for grad in grads)


def test_errors():
    z = sample(5, 2, seed=21)
    with pytest.raises(ValueError, match=r"hsic_unbiased needs n >= 4 rows, got n=3"):
        hsic_unbiased(torch.eye(3, dtype=F64), torch.eye(3, dtype=F64))
    with pytest.raises(ValueError, match=r"k has shape \(4, 5\); expected a square kernel matrix"):
        hsic_unbiased(torch.ones(4, 5), torch.ones(4, 5))
    with pytest.raises(ValueError, match=r"k has shape \(4, 4\) and l has \(5, 5\)"):
        hsic_unbiased(torch.ones(4, 4), torch.ones(5, 5))
    with pytest.raises(ValueError, match=r"debiased_cka needs at least 4 rows, got B=3"):
        debiased_cka(z[:3], z[:3])
    with pytest.raises(ValueError, match=r"bandwidth=0.0 must be a finite number > 0"):
        rbf_kernel(z, bandwidth=0.0)
    with pytest.raises(ValueError, match=r"bandwidth_j=-1.0 must be a finite number > 0"):
        rbf_hsic(z, z, bandwidth_j=-1.0)
    with pytest.raises(ValueError, match=r"z has shape \(5,\); expected \[B, d\]"):
        linear_kernel(z[:, 0])
