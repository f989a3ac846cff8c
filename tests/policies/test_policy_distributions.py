import math

import numpy as np
import pytest
import torch

from marljoint.env.spaces import ActionLayout
from marljoint.policies import Categorical, DiagGaussian, FactoredCategorical, make_distribution


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def naive_log_prob(logits, nvec, actions, mask=None):
    """Per-head loop with -inf masking: the obvious implementation to compare against."""
    total = torch.zeros(logits.shape[:-1])
    for k, (head, head_mask) in enumerate(
        zip(logits.split(list(nvec), -1), (mask.split(list(nvec), -1) if mask is not None else [None] * len(nvec)))
    ):
        if head_mask is not None:
            head = head.masked_fill(~head_mask, -math.inf)
        total = total + head.log_softmax(-1).gather(-1, actions[..., k : k + 1]).squeeze(-1)
    return total


@pytest.mark.parametrize("nvec", [(3, 2, 4), (4, 4)])
def test_entropy_matches_mean_negative_log_prob_of_samples(nvec):
    logits = torch.randn(sum(nvec), generator=generator(1))
    dist = FactoredCategorical(logits.expand(200_000, -1), nvec)
    actions = dist.sample(generator(2))
    estimate = -dist.log_prob(actions).mean()
    assert estimate.item() == pytest.approx(dist.entropy()[0].item(), abs=0.01)


def test_masked_entropy_matches_mean_negative_log_prob_and_hand_value():
    nvec = (3, 2, 4)
    mask = torch.tensor([True, False, True, True, True, False, True, True, False])
    dist = FactoredCategorical(torch.zeros(200_000, 9), nvec, mask.expand(200_000, -1))
    # Uniform over the allowed actions of each head: log 2 + log 2 + log 2.
    assert dist.entropy()[0].item() == pytest.approx(3 * math.log(2), abs=1e-6)
    actions = dist.sample(generator(3))
    assert (-dist.log_prob(actions).mean()).item() == pytest.approx(3 * math.log(2), abs=1e-5)


def test_gaussian_entropy_matches_mean_negative_log_prob_of_samples():
    mean = torch.tensor([0.5, -1.0, 2.0]).expand(200_000, 3)
    log_std = torch.tensor([-0.5, 0.0, 0.7])
    dist = DiagGaussian(mean, log_std)
    estimate = -dist.log_prob(dist.sample(generator(4))).mean()
    assert estimate.item() == pytest.approx(dist.entropy()[0].item(), abs=0.01)


def test_gaussian_matches_torch_normal():
    mean = torch.randn(5, 2, 3, generator=generator(5))
    log_std = torch.randn(2, 3, generator=generator(6))
    actions = torch.randn(5, 2, 3, generator=generator(7))
    dist = DiagGaussian(mean, log_std)
    reference = torch.distributions.Normal(mean, log_std.exp())
    torch.testing.assert_close(dist.log_prob(actions), reference.log_prob(actions).sum(-1))
    torch.testing.assert_close(dist.entropy(), reference.entropy().sum(-1))
    assert torch.equal(dist.mode(), mean)


def test_gaussian_sample_has_no_gradient_and_is_unclipped():
    mean = torch.zeros(4, 2, requires_grad=True)
    sample = DiagGaussian(mean, torch.full((2,), 3.0)).sample(generator(0))
    assert not sample.requires_grad
    assert sample.abs().max() > 1.0


@pytest.mark.parametrize("nvec", [(3, 2, 4), (5,), (3, 3)])
def test_masked_actions_are_never_sampled(nvec):
    total = sum(nvec)
    # Masked actions get the LARGEST logits, so any leak of probability would show up.
    logits = torch.randn(total, generator=generator(8)) + 50.0 * (torch.arange(total) % 2 == 1)
    mask = torch.arange(total) % 2 == 0
    starts = np.cumsum((0,) + nvec[:-1])
    mask[starts] = True  # every head keeps at least one allowed action
    dist = FactoredCategorical(logits.expand(100_000, -1), nvec, mask.expand(100_000, -1))
    actions = dist.sample(generator(9))
    flat = actions + torch.as_tensor(starts)
    assert mask[flat].all()
    assert torch.isfinite(dist.log_prob(actions)).all()


def test_single_allowed_action_is_always_sampled_despite_large_masked_logits():
    logits = torch.tensor([80.0, -80.0, 80.0, 80.0]).expand(100_000, 4)
    mask = torch.tensor([False, True, False, False]).expand(100_000, 4)
    dist = Categorical(logits, mask)
    assert (dist.sample(generator(10)) == 1).all()
    assert dist.entropy().abs().max().item() == 0.0
    torch.testing.assert_close(dist.log_prob(torch.ones(100_000, dtype=torch.long)), torch.zeros(100_000))


def test_sample_frequencies_match_probabilities():
    nvec = (3, 2, 4)
    logits = torch.randn(9, generator=generator(11))
    dist = FactoredCategorical(logits.expand(200_000, -1), nvec)
    actions = dist.sample(generator(12))
    for k, (n, probs) in enumerate(zip(nvec, dist.head_probs())):
        frequency = torch.bincount(actions[:, k], minlength=n).float() / actions.shape[0]
        torch.testing.assert_close(frequency, probs[0], atol=0.006, rtol=0)


@pytest.mark.parametrize("nvec", [(3, 2, 4), (4, 4, 4), (6,)])
@pytest.mark.parametrize("masked", [False, True])
def test_log_prob_is_sum_of_per_head_log_softmax(nvec, masked):
    logits = torch.randn(7, 2, sum(nvec), generator=generator(13))
    mask = None
    if masked:
        mask = torch.rand(7, 2, sum(nvec), generator=generator(14)) < 0.6
        mask[..., np.cumsum((0,) + nvec[:-1])] = True
    dist = FactoredCategorical(logits, nvec, mask)
    actions = dist.sample(generator(15))
    assert actions.shape == (7, 2, len(nvec))
    torch.testing.assert_close(dist.log_prob(actions), naive_log_prob(logits, nvec, actions, mask))


def test_categorical_equals_one_head_factored_without_head_axis():
    logits = torch.randn(5, 3, 4, generator=generator(16))
    mask = torch.rand(5, 3, 4, generator=generator(17)) < 0.7
    mask[..., 0] = True
    single = Categorical(logits, mask)
    factored = FactoredCategorical(logits, (4,), mask)
    actions = single.sample(generator(18))
    assert actions.shape == (5, 3) and actions.dtype == torch.long
    assert torch.equal(actions, factored.sample(generator(18)).squeeze(-1))
    assert torch.equal(single.log_prob(actions), factored.log_prob(actions.unsqueeze(-1)))
    assert torch.equal(single.entropy(), factored.entropy())
    assert single.mode().shape == (5, 3)
    assert single.head_entropy().shape == (5, 3, 1)


def test_same_seed_gives_bit_identical_samples_and_different_seed_differs():
    logits = torch.randn(64, 9, generator=generator(19))
    dist = FactoredCategorical(logits, (3, 2, 4))
    assert torch.equal(dist.sample(generator(5)), dist.sample(generator(5)))
    assert not torch.equal(dist.sample(generator(5)), dist.sample(generator(6)))
    gaussian = DiagGaussian(torch.zeros(64, 3), torch.zeros(3))
    assert torch.equal(gaussian.sample(generator(5)), gaussian.sample(generator(5)))


def test_sampling_leaves_the_global_generator_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    FactoredCategorical(torch.zeros(10, 5), (2, 3)).sample(generator(0))
    DiagGaussian(torch.zeros(10, 2), torch.zeros(2)).sample(generator(0))
    assert torch.equal(torch.rand(3), expected)


def test_mode_head_entropy_and_head_probs():
    logits = torch.tensor([[0.0, 2.0, 1.0, 5.0, 0.0]])
    mask = torch.tensor([[True, False, True, True, True]])
    dist = FactoredCategorical(logits, (3, 2), mask)
    assert dist.mode().tolist() == [[2, 0]]
    probs = dist.head_probs()
    assert [p.shape for p in probs] == [(1, 3), (1, 2)]
    assert probs[0][0, 1].item() == 0.0
    torch.testing.assert_close(probs[0], torch.tensor([[1.0, 0.0, math.e]]) / (1.0 + math.e))
    heads = dist.head_entropy()
    assert heads.shape == (1, 2)
    torch.testing.assert_close(dist.entropy(), heads.sum(-1))
    expected = -(probs[1] * probs[1].log()).sum(-1)
    torch.testing.assert_close(heads[:, 1], expected)


def test_masked_gradients_are_finite_and_zero_on_masked_logits():
    logits = torch.randn(6, 9, generator=generator(20), requires_grad=True)
    mask = torch.rand(6, 9, generator=generator(21)) < 0.5
    mask[:, [0, 3, 5]] = True
    dist = FactoredCategorical(logits, (3, 2, 4), mask)
    (dist.log_prob(dist.sample(generator(22))).sum() + dist.entropy().sum()).backward()
    assert torch.isfinite(logits.grad).all()
    assert (logits.grad[~mask] == 0).all()


def test_all_masked_head_is_left_unmasked_and_stays_finite():
    logits = torch.tensor([[1.0, 2.0, 0.5, -1.0, 3.0]])
    mask = torch.tensor([[False, False, False, True, False]])
    dist = FactoredCategorical(logits, (3, 2), mask)
    torch.testing.assert_close(dist.head_probs()[0], logits[:, :3].softmax(-1))
    assert dist.head_probs()[1].tolist() == [[1.0, 0.0]]
    assert torch.isfinite(dist.entropy()).all()


@pytest.mark.parametrize(
    "layout, head_size, expected",
    [
        (ActionLayout("discrete", (5,), ()), 5, Categorical),
        (ActionLayout("multidiscrete", (3, 2), (2,)), 5, FactoredCategorical),
        (
            ActionLayout("box", (), (2,), low=np.full(2, -1, np.float32), high=np.ones(2, np.float32)),
            2,
            DiagGaussian,
        ),
    ],
)
def test_make_distribution_picks_the_class_of_the_layout(layout, head_size, expected):
    dist = make_distribution(layout, torch.zeros(4, 3, head_size), log_std=torch.zeros(3, head_size))
    assert type(dist) is expected
    assert dist.sample(generator(0)).shape == (4, 3, *layout.shape)


def test_make_distribution_errors():
    box = ActionLayout("box", (), (2,), low=np.full(2, -1, np.float32), high=np.ones(2, np.float32))
    with pytest.raises(ValueError, match="needs 5 entries"):
        make_distribution(ActionLayout("discrete", (5,), ()), torch.zeros(4, 4))
    with pytest.raises(ValueError, match="needs log_std"):
        make_distribution(box, torch.zeros(4, 2))
    with pytest.raises(ValueError, match="takes no action mask"):
        make_distribution(box, torch.zeros(4, 2), torch.zeros(2), torch.ones(4, 2, dtype=torch.bool))


def test_categorical_input_errors():
    with pytest.raises(ValueError, match=r"sum\(nvec\) = 5"):
        FactoredCategorical(torch.zeros(3, 4), (3, 2))
    with pytest.raises(ValueError, match="at least one positive head size"):
        FactoredCategorical(torch.zeros(3, 4), ())
    with pytest.raises(ValueError, match="at least one positive head size"):
        FactoredCategorical(torch.zeros(3, 4), (4, 0))
    with pytest.raises(TypeError, match="floating-point"):
        FactoredCategorical(torch.zeros(3, 4, dtype=torch.long), (4,))
    with pytest.raises(ValueError, match="mask of shape"):
        FactoredCategorical(torch.zeros(3, 5), (3, 2), torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        FactoredCategorical(torch.zeros(3, 5), (3, 2), torch.ones(3, 5))
    with pytest.raises(ValueError, match="at least one dimension"):
        Categorical(torch.tensor(1.0))


def test_action_errors():
    dist = FactoredCategorical(torch.zeros(3, 5), (3, 2))
    with pytest.raises(ValueError, match=r"expected \(3, 2\)"):
        dist.log_prob(torch.zeros(3, dtype=torch.long))
    with pytest.raises(TypeError, match="integer tensor"):
        dist.log_prob(torch.zeros(3, 2))
    single = Categorical(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="no head axis"):
        single.log_prob(torch.zeros(3, 1, dtype=torch.long))
    torch.testing.assert_close(single.log_prob(torch.zeros(3, dtype=torch.int32)), torch.full((3,), -math.log(4)))


def test_gaussian_errors():
    with pytest.raises(ValueError, match="does not broadcast"):
        DiagGaussian(torch.zeros(4, 3), torch.zeros(2))
    with pytest.raises(ValueError, match="would enlarge"):
        DiagGaussian(torch.zeros(4, 3), torch.zeros(2, 4, 3))
    with pytest.raises(TypeError, match="floating point"):
        DiagGaussian(torch.zeros(4, 3, dtype=torch.long), torch.zeros(3))
    with pytest.raises(ValueError, match="unclipped sampled actions"):
        DiagGaussian(torch.zeros(4, 3), torch.zeros(3)).log_prob(torch.zeros(4, 2))


def test_sampling_requires_a_generator():
    with pytest.raises(TypeError, match="needs a torch.Generator"):
        Categorical(torch.zeros(2, 3)).sample(None)
    with pytest.raises(TypeError, match="needs a torch.Generator"):
        DiagGaussian(torch.zeros(2, 3), torch.zeros(3)).sample(0)


@pytest.mark.parametrize("shape", [(64, 3, 1, 5), (32, 4, 3, 10), (8, 2, 1, 40)])
def test_log_softmax_and_its_gradient_match_torch_with_and_without_masked_entries(shape):
    from marljoint.policies.distributions import _log_softmax

    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(shape, generator=generator) * 4.0
    masked = logits.clone()
    masked[..., 2:4] = torch.finfo(torch.float32).min  # how masked and padded entries reach the log-softmax
    for x in (logits, masked):
        ours = x.clone().requires_grad_()
        ref = x.clone().requires_grad_()
        weights = torch.rand(shape, generator=generator)
        got, want = _log_softmax(ours), ref.log_softmax(-1)
        finite = want > -1e30
        torch.testing.assert_close(got[finite], want[finite], rtol=1e-6, atol=1e-6)
        assert (got[~finite] < -1e30).all()
        (got[finite] * weights[finite]).sum().backward()
        (want[finite] * weights[finite]).sum().backward()
        torch.testing.assert_close(ours.grad, ref.grad, rtol=1e-5, atol=1e-6)


def test_probabilities_are_exactly_zero_on_masked_entries_and_exp_elsewhere():
    from marljoint.policies.distributions import _probs

    log_p = torch.tensor([[-0.1, -2.5, torch.finfo(torch.float32).min, -90.0, -80.0]])
    probs = _probs(log_p)
    assert probs[0, 2] == 0.0 and probs[0, 3] == 0.0  # masked, and under 1e-37
    torch.testing.assert_close(probs[0, [0, 1, 4]], log_p[0, [0, 1, 4]].exp(), rtol=0, atol=0)
    dist = FactoredCategorical(torch.zeros(1, 4), (4,), torch.tensor([[True, True, False, False]]))
    assert dist.entropy().item() == pytest.approx(math.log(2.0), abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_logits_use_torch_kernels(dtype):
    # In float16 the smallest normal number (6e-5) is not negligible against 1 over thousands of entries.
    from marljoint.policies.distributions import _log_softmax, _probs

    x = torch.randn(6, 1, 4672).to(dtype)
    x[..., 30:] = torch.finfo(dtype).min
    assert torch.equal(_log_softmax(x), x.log_softmax(-1))
    assert torch.equal(_probs(x.log_softmax(-1)), x.log_softmax(-1).exp())
