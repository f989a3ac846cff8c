"""RedundancyPenalty as an aux_fn: config errors, metrics, reductions, coef=0, gradients, variance floor."""

import dataclasses
import math

import pytest
import torch
from torch import nn

from marljoint.ppo.auxiliary import AuxFn, AuxOutput
from marljoint.redundancy import RedundancyPenalty, pairwise_redundancy

F64 = torch.float64
KINDS = ["xcorr", "cka", "hsic"]


def sample(rows, widths, seed=0):
    g = torch.Generator().manual_seed(seed)
    shared = torch.randn(rows, 1, generator=g, dtype=F64)
    return [torch.randn(rows, w, generator=g, dtype=F64) + shared for w in widths]


def all_alive(rows, num_agents):
    return torch.ones(rows, num_agents, dtype=torch.bool)


def whitened(rows, width, seed=0):
    raw = torch.randn(rows, width, generator=torch.Generator().manual_seed(seed), dtype=F64)
    q, _ = torch.linalg.qr(raw - raw.mean(dim=0))
    return q * math.sqrt(rows)


def test_is_an_aux_fn_and_frozen():
    penalty = RedundancyPenalty()
    assert isinstance(penalty, AuxFn)
    assert dataclasses.astuple(penalty) == ("xcorr", 1.0, "mean", False, None, 1e-5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        penalty.coef = 2.0


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"kind": "corr"},
            ValueError,
            r"kind='corr' is not a redundancy kind; use one of 'xcorr', 'cka', 'hsic'",
        ),
        ({"coef": -0.1}, ValueError, r"coef=-0.1 must be a finite number >= 0 .*use coef=0 to switch"),
        ({"coef": float("inf")}, ValueError, r"coef=inf must be a finite number >= 0"),
        ({"coef": "0.1"}, TypeError, r"coef must be a float, got str"),
        ({"reduction": "max"}, ValueError, r"reduction='max' is not supported; use 'mean' .* or 'sum'"),
        (
            {"kind": "cka", "debias": True},
            ValueError,
            r"debias=True applies to kind='xcorr' only; kind='cka'",
        ),
        (
            {"kind": "hsic", "debias": True},
            ValueError,
            r"debias=True applies to kind='xcorr' only; kind='hsic'",
        ),
        ({"debias": 1}, TypeError, r"debias must be a bool, got int"),
        ({"variance_floor": 0.0}, ValueError, r"variance_floor=0.0 must be a finite number > 0"),
        ({"variance_floor": -1.0}, ValueError, r"variance_floor=-1.0 must be a finite number > 0"),
        ({"eps": 0.0}, ValueError, r"eps=0.0 must be a finite number > 0"),
        ({"eps": -1e-5}, ValueError, r"eps=-1e-05 must be a finite number > 0"),
    ],
)
def test_config_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        RedundancyPenalty(**kwargs)


def test_call_errors_name_the_agent_and_shapes():
    penalty = RedundancyPenalty()
    z = torch.randn(8, 3)
    with pytest.raises(ValueError, match=r"features\[2\] has shape \(6, 3\); expected \[8, d_2\]"):
        penalty([z, z, z[:6]], all_alive(8, 3))
    with pytest.raises(ValueError, match=r"alive has shape \(8, 2\); expected \[B, N\] = \[8, 3\]"):
        penalty([z, z, z], all_alive(8, 2))
    with pytest.raises(ValueError, match=r"alive has shape \(3, 8\); expected \[B, N\] = \[8, 3\]"):
        penalty([z, z, z], all_alive(8, 3).T)
    with pytest.raises(TypeError, match=r"alive has dtype torch.int64; expected torch.bool"):
        penalty([z, z], torch.ones(8, 2, dtype=torch.long))
    with pytest.raises(TypeError, match=r"features\[1\] must be a torch.Tensor"):
        penalty([z, z.numpy()], all_alive(8, 2))


@pytest.mark.parametrize("kind", KINDS)
def test_metric_names_are_pinned(kind):
    out = RedundancyPenalty(kind=kind)(sample(16, [3, 3, 3]), all_alive(16, 3))
    assert isinstance(out, AuxOutput)
    assert set(out.metrics) == {
        f"redundancy/{kind}/0-1",
        f"redundancy/{kind}/0-2",
        f"redundancy/{kind}/1-2",
        f"redundancy/{kind}",
        "redundancy/feature_std/0",
        "redundancy/feature_std/1",
        "redundancy/feature_std/2",
    }
    assert all(type(v) is float for v in out.metrics.values())
    floored = RedundancyPenalty(kind=kind, variance_floor=1.0)(sample(16, [3, 3, 3]), all_alive(16, 3))
    assert set(floored.metrics) == set(out.metrics) | {"redundancy/variance_hinge"}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_loss_and_metrics_match_the_pure_functions(kind, reduction):
    features = sample(20, [2, 3, 4, 2], seed=1)
    alive = torch.rand(20, 4, generator=torch.Generator().manual_seed(2)) > 0.2
    out = RedundancyPenalty(kind=kind, coef=0.3, reduction=reduction)(features, alive)
    values = pairwise_redundancy(features, alive, kind=kind)
    reduced = values.mean() if reduction == "mean" else values.sum()
    assert out.loss.item() == pytest.approx(0.3 * reduced.item(), rel=1e-12)
    assert out.metrics[f"redundancy/{kind}/1-3"] == pytest.approx(values[4].item(), rel=1e-12)
    assert out.metrics[f"redundancy/{kind}"] == pytest.approx(values.mean().item(), rel=1e-12)
    expected_std = features[2][alive[:, 2]].std(dim=0, unbiased=False).mean().item()
    assert out.metrics["redundancy/feature_std/2"] == pytest.approx(expected_std, rel=1e-12)


@pytest.mark.parametrize("num_agents", [2, 3, 5])
def test_mean_reduction_is_independent_of_the_number_of_agents(num_agents):
    # N copies of identical whitened features: every pair has v = (1/d) / (1 + eps)² (variance 1, eps inside
    # sqrt).
    z, eps = whitened(32, 4), 1e-5
    expected = 0.25 / (1 + eps) ** 2
    features = [z.clone() for _ in range(num_agents)]
    mean_loss = RedundancyPenalty(coef=2.0)(features, all_alive(32, num_agents)).loss.item()
    sum_loss = RedundancyPenalty(coef=2.0, reduction="sum")(features, all_alive(32, num_agents)).loss.item()
    assert mean_loss == pytest.approx(2.0 * expected, rel=1e-12)
    assert sum_loss == pytest.approx(2.0 * expected * num_agents * (num_agents - 1) / 2, rel=1e-12)


def test_debias_shifts_the_reported_and_penalised_value():
    features = sample(11, [2, 2], seed=3)
    plain = RedundancyPenalty()(features, all_alive(11, 2))
    debiased = RedundancyPenalty(debias=True)(features, all_alive(11, 2))
    shift = plain.metrics["redundancy/xcorr/0-1"] - debiased.metrics["redundancy/xcorr/0-1"]
    assert shift == pytest.approx(1 / 10, rel=1e-4)  # 1/(B - 1), up to the var/(var + eps) factors
    assert plain.loss.item() - debiased.loss.item() == pytest.approx(shift, rel=1e-12)


def test_single_agent_and_dead_agent():
    out = RedundancyPenalty()(sample(8, [3]), all_alive(8, 1))
    assert out.loss.item() == 0.0 and out.metrics["redundancy/xcorr"] == 0.0
    alive = all_alive(8, 3)
    alive[:, 1] = False
    dead = RedundancyPenalty(variance_floor=1.0)(sample(8, [2, 2, 2]), alive)
    assert dead.metrics["redundancy/xcorr/0-1"] == 0.0 and dead.metrics["redundancy/xcorr/1-2"] == 0.0
    assert math.isnan(dead.metrics["redundancy/feature_std/1"])
    assert math.isfinite(dead.loss.item())


class TwoEncoders(nn.Module):
    def __init__(self, seed=0):
        super().__init__()
        with torch.random.fork_rng():  # seeded initialisation without touching the caller's RNG state
            torch.manual_seed(seed)
            self.encoders = nn.ModuleList([nn.Linear(5, 4), nn.Linear(5, 4)]).double()
            self.head = nn.Linear(4, 1).double()

    def forward(self, obs):
        features = [encoder(obs[:, i]) for i, encoder in enumerate(self.encoders)]
        base_loss = sum(self.head(torch.tanh(z)).square().mean() for z in features)
        return base_loss, features


def observations(rows=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    shared = torch.randn(rows, 1, 5, generator=g, dtype=F64)
    return shared + 0.5 * torch.randn(rows, 2, 5, generator=g, dtype=F64)


@pytest.mark.parametrize("kind", KINDS)
def test_gradients_reach_both_encoders(kind):
    model = TwoEncoders()
    _, features = model(observations())
    RedundancyPenalty(kind=kind)(features, all_alive(32, 2)).loss.backward()
    for encoder in model.encoders:
        assert torch.isfinite(encoder.weight.grad).all()
        assert encoder.weight.grad.abs().sum() > 0
    assert model.head.weight.grad is None


@pytest.mark.parametrize("kind", KINDS)
def test_coef_zero_is_exactly_no_aux_loss(kind):
    obs = observations()
    reference = TwoEncoders(seed=1)
    base_loss, _ = reference(obs)
    base_loss.backward()

    model = TwoEncoders(seed=1)
    base_loss, features = model(obs)
    out = RedundancyPenalty(kind=kind, coef=0.0, variance_floor=1.0)(features, all_alive(32, 2))
    assert out.loss.item() == 0.0 and out.loss.grad_fn is None and not out.loss.requires_grad
    assert out.loss.dtype == F64 and out.loss.shape == ()
    (base_loss + out.loss).backward()
    for got, expected in zip(model.parameters(), reference.parameters()):
        assert torch.equal(got.grad, expected.grad)
    active = RedundancyPenalty(kind=kind, coef=1.0, variance_floor=1.0)(
        [z.detach() for z in features], all_alive(32, 2)
    )
    assert out.metrics == active.metrics


def test_float32_in_float32_out():
    out = RedundancyPenalty(kind="hsic")([z.float() for z in sample(16, [3, 3])], all_alive(16, 2))
    assert out.loss.dtype == torch.float32


@pytest.mark.parametrize("kind", KINDS)
def test_constant_features_with_floor_are_finite(kind):
    features = [
        torch.full((12, 3), 0.5, dtype=F64, requires_grad=True),
        sample(12, [3])[0].requires_grad_(True),
    ]
    out = RedundancyPenalty(kind=kind, variance_floor=1.0)(features, all_alive(12, 2))
    grads = torch.autograd.grad(out.loss, features)
    assert math.isfinite(out.loss.item()) and all(torch.isfinite(g).all() for g in grads)
    assert out.metrics["redundancy/feature_std/0"] == 0.0


def test_variance_floor_hinge_by_hand():
    # Agent 0: one feature of std 0.5 -> relu(1 - 0.5); agent 1: std 2 -> 0. Mean over the 2 agents.
    z0 = torch.tensor([[0.5], [-0.5], [0.5], [-0.5]], dtype=F64)
    z1 = torch.tensor([[2.0], [2.0], [-2.0], [-2.0]], dtype=F64)
    out = RedundancyPenalty(coef=0.5, variance_floor=1.0)([z0, z1], all_alive(4, 2))
    hinge = (1 - 0.5) / 2
    assert out.metrics["redundancy/variance_hinge"] == pytest.approx(hinge, rel=1e-12)
    assert out.metrics["redundancy/feature_std/0"] == pytest.approx(0.5, rel=1e-12)
    assert out.metrics["redundancy/feature_std/1"] == pytest.approx(2.0, rel=1e-12)
    assert out.loss.item() == pytest.approx(0.5 * (out.metrics["redundancy/xcorr/0-1"] + hinge), rel=1e-12)


def test_variance_floor_blocks_the_shrinking_shortcut_but_does_not_undo_a_collapse():
    # Agent 0's features scaled by s. xcorr barely changes at s = 0.1, yet its gradient already rewards
    # shrinking (d loss / d s > 0); the hinge (slope -coef · mean std / N = -0.5 here) reverses that. Once s
    # is near sqrt(eps) the shortcut's pull (~ v / sqrt(eps)) outweighs the hinge: the floor prevents the
    # slide, it does not reverse it. feature_std exposes the scale either way.
    z = whitened(32, 3, seed=4)
    other = z + 0.3 * whitened(32, 3, seed=5)

    def grad_wrt_scale(s, floor):
        scale = torch.tensor(s, dtype=F64, requires_grad=True)
        out = RedundancyPenalty(variance_floor=floor)([scale * z, other], all_alive(32, 2))
        out.loss.backward()
        assert out.metrics["redundancy/feature_std/0"] == pytest.approx(s, rel=1e-9)
        return scale.grad.item()

    assert grad_wrt_scale(0.1, None) > 0
    assert grad_wrt_scale(0.1, 1.0) == pytest.approx(grad_wrt_scale(0.1, None) - 0.5, rel=1e-9)
    assert grad_wrt_scale(0.1, 1.0) < 0
    assert grad_wrt_scale(1e-3, 1.0) > 0
