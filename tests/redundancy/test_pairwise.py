"""pairwise_*: batched equals a naive loop over pairs; alive-mask exclusion; tiny pairs; input errors."""

import pytest
import torch

from marljoint.redundancy import (
    agent_pairs,
    debiased_cka,
    feature_std,
    pairwise_cka,
    pairwise_hsic,
    pairwise_redundancy,
    pairwise_xcorr,
    rbf_hsic,
    xcorr_redundancy,
)

F64 = torch.float64
KINDS = ["xcorr", "cka", "hsic"]
PAIR_FN = {"xcorr": xcorr_redundancy, "cka": debiased_cka, "hsic": rbf_hsic}
PAIRWISE_FN = {"xcorr": pairwise_xcorr, "cka": pairwise_cka, "hsic": pairwise_hsic}


def make_features(widths, rows=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    shared = torch.randn(rows, 2, generator=g, dtype=F64)
    return [
        torch.randn(rows, w, generator=g, dtype=F64) + shared.repeat(1, w)[:, :w] * (k % 2)
        for k, w in enumerate(widths)
    ]


def make_alive(rows, num_agents, seed=1):
    return torch.rand(rows, num_agents, generator=torch.Generator().manual_seed(seed)) > 0.25


def naive_pairs(kind, features, alive=None):
    values = []
    for i, j in agent_pairs(len(features)):
        rows = slice(None) if alive is None else alive[:, i] & alive[:, j]
        values.append(PAIR_FN[kind](features[i][rows], features[j][rows]))
    return torch.stack(values)


def test_agent_pairs_order():
    assert agent_pairs(4) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert agent_pairs(1) == [] and agent_pairs(0) == []


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("widths", [[3, 3, 3, 3], [2, 4, 3]], ids=["shared-width", "mixed-widths"])
@pytest.mark.parametrize("masked", [False, True], ids=["all-alive", "masked"])
def test_batched_equals_naive_loop_over_pairs(kind, widths, masked):
    features = make_features(widths)
    alive = make_alive(24, len(widths)) if masked else None
    got = PAIRWISE_FN[kind](features, alive)
    assert got.shape == (len(agent_pairs(len(widths))),)
    assert torch.allclose(got, naive_pairs(kind, features, alive), rtol=1e-10, atol=1e-13)
    assert torch.equal(pairwise_redundancy(features, alive, kind=kind), got)


@pytest.mark.parametrize("kind", KINDS)
def test_all_true_mask_equals_no_mask(kind):
    features = make_features([3, 3, 3])
    all_alive = torch.ones(24, 3, dtype=torch.bool)
    assert torch.allclose(PAIRWISE_FN[kind](features, all_alive), PAIRWISE_FN[kind](features), atol=1e-14)


@pytest.mark.parametrize("kind", KINDS)
def test_dead_rows_never_reach_values_or_gradients(kind):
    features = [z.clone().requires_grad_(True) for z in make_features([3, 3, 3])]
    alive = make_alive(24, 3, seed=2)
    poisoned = [
        torch.where(alive[:, i, None], z, torch.full_like(z, float("nan"))) for i, z in enumerate(features)
    ]
    values = PAIRWISE_FN[kind](poisoned, alive)
    assert torch.allclose(
        values, naive_pairs(kind, [z.detach() for z in features], alive), rtol=1e-10, atol=1e-13
    )
    grads = torch.autograd.grad(values.sum(), features)
    for i, grad in enumerate(grads):
        assert torch.isfinite(grad).all()
        assert torch.count_nonzero(grad[~alive[:, i]]) == 0


@pytest.mark.parametrize("kind", KINDS)
def test_pairs_with_too_few_common_rows_are_zero(kind):
    features = make_features([2, 2, 2], rows=10)
    alive = torch.ones(10, 3, dtype=torch.bool)
    alive[:, 0] = False
    alive[:1, 0] = True  # agent 0 shares 1 row with each other agent
    alive[7:, 1] = False  # agents 1 and 2 share 7 rows
    features = [z.requires_grad_(True) for z in features]
    values = PAIRWISE_FN[kind](features, alive)
    assert values[0].item() == 0.0 and values[1].item() == 0.0
    assert values[2].item() == pytest.approx(
        PAIR_FN[kind](features[1][:7], features[2][:7]).item(), rel=1e-10
    )
    assert all(torch.isfinite(g).all() for g in torch.autograd.grad(values.sum(), features))


def test_cka_and_hsic_need_four_rows_xcorr_two():
    features = make_features([2, 2], rows=3)
    assert pairwise_xcorr(features).item() > 0
    assert pairwise_cka(features).item() == 0.0 and pairwise_hsic(features).item() == 0.0


@pytest.mark.parametrize("kind", KINDS)
def test_single_agent_has_no_pairs(kind):
    assert PAIRWISE_FN[kind](make_features([3])).shape == (0,)


def test_debias_with_mask_uses_each_pairs_row_count():
    features = make_features([2, 2, 2])
    alive = make_alive(24, 3, seed=3)
    plain = pairwise_xcorr(features, alive, eps=0.0)
    debiased = pairwise_xcorr(features, alive, eps=0.0, debias=True)
    counts = torch.tensor([float((alive[:, i] & alive[:, j]).sum()) for i, j in agent_pairs(3)], dtype=F64)
    assert torch.allclose(plain - debiased, 1 / (counts - 1), atol=1e-15)


def test_gradcheck_masked_pairwise():
    g = torch.Generator().manual_seed(4)
    inputs = tuple(torch.randn(8, 2, generator=g, dtype=F64, requires_grad=True) for _ in range(3))
    alive = make_alive(8, 3, seed=5)
    alive[:5] = True
    assert torch.autograd.gradcheck(lambda *z: pairwise_xcorr(list(z), alive, eps=1e-2, debias=True), inputs)
    assert torch.autograd.gradcheck(lambda *z: pairwise_cka(list(z), alive), inputs)


def test_feature_std():
    z = torch.tensor([[1.0, 5.0], [-1.0, 5.0], [3.0, 5.0], [100.0, 0.0]], dtype=F64)
    rows = torch.tensor([True, True, False, False])
    assert torch.allclose(feature_std(z, rows), torch.tensor([1.0, 0.0], dtype=F64))
    assert torch.isnan(feature_std(z, torch.zeros(4, dtype=torch.bool))).all()
    with pytest.raises(ValueError, match=r"rows has shape \(3,\); expected \[B\] = \[4\]"):
        feature_std(z, rows[:3])


def test_input_errors():
    z = torch.randn(8, 3, dtype=F64)
    alive = torch.ones(8, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"features\[1\] has shape \(7, 3\); expected \[8, d_1\]"):
        pairwise_xcorr([z, z[:7]], alive)
    with pytest.raises(ValueError, match=r"features\[0\] has shape \(8,\); expected \[B, d_0\]"):
        pairwise_cka([z[:, 0], z], alive)
    with pytest.raises(ValueError, match=r"features\[2\] has shape \(8, 3, 1\); expected \[8, d_2\]"):
        pairwise_hsic([z, z, z[..., None]])
    with pytest.raises(ValueError, match=r"alive has shape \(8, 3\); expected \[B, N\] = \[8, 2\]"):
        pairwise_xcorr([z, z], torch.ones(8, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"alive has dtype torch.float32; expected torch.bool"):
        pairwise_xcorr([z, z], torch.ones(8, 2))
    with pytest.raises(TypeError, match=r"features must be a list of tensors"):
        pairwise_xcorr(torch.stack([z, z]))
    with pytest.raises(ValueError, match=r"features is empty"):
        pairwise_xcorr([])
    with pytest.raises(
        TypeError, match=r"features\[1\] has dtype torch.float32 but features\[0\] has torch.float64"
    ):
        pairwise_xcorr([z, z.float()])
    with pytest.raises(
        ValueError, match=r"kind='pearson' is not a redundancy kind; use one of 'xcorr', 'cka', 'hsic'"
    ):
        pairwise_redundancy([z, z], kind="pearson")
    with pytest.raises(ValueError, match=r"debias=True applies to kind='xcorr' only"):
        pairwise_redundancy([z, z], kind="cka", debias=True)
