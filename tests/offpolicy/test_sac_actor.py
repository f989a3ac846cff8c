"""The actors: the squashed Gaussian's density, actions within bounds, Gumbel-softmax straight-through."""

import gymnasium
import pytest
import torch

from marljoint.offpolicy.sac_networks import gumbel_softmax_straight_through, squashed_gaussian_log_prob

from ._sac_helpers import BOX, DISCRETE, OBS, N, make_algorithm, make_batch


def test_squashed_gaussian_log_prob_matches_a_numerical_change_of_variables():
    low, high = torch.tensor([-2.0, 0.0], dtype=torch.float64), torch.tensor([3.0, 0.5], dtype=torch.float64)
    center, half = (high + low) / 2, (high - low) / 2
    mean = torch.tensor([0.3, -1.0], dtype=torch.float64)
    log_std = torch.tensor([-0.2, 0.4], dtype=torch.float64)
    u = torch.tensor([[0.1, -2.5], [1.7, 0.0], [-3.0, 4.0]], dtype=torch.float64)
    h = 1e-6
    squash = lambda x: center + half * torch.tanh(x)  # noqa: E731
    slope = (squash(u + h) - squash(u - h)) / (2 * h)  # da/du per dimension, numerically
    gaussian = torch.distributions.Normal(mean, log_std.exp()).log_prob(u)
    expected = (gaussian - slope.log()).sum(-1)
    got = squashed_gaussian_log_prob(u, mean.expand_as(u), log_std.expand_as(u), half)
    assert torch.allclose(got, expected, atol=1e-6)


def test_squashed_gaussian_log_prob_stays_finite_at_saturation():
    u = torch.tensor([[30.0], [-30.0]])
    assert torch.isfinite(squashed_gaussian_log_prob(u, torch.zeros(2, 1), torch.zeros(2, 1), torch.ones(1))).all()


@pytest.mark.parametrize("variant", ["masac", "maddpg"])
def test_box_actions_respect_the_bounds(variant):
    algo = make_algorithm(BOX, variant=variant, exploration_noise=5.0)
    with torch.no_grad():  # saturate the heads so that only the squashing keeps actions inside
        algo.actor.head.weight.mul_(1e4)
    obs = 10 * torch.randn(256, N, OBS, generator=torch.Generator().manual_seed(0))
    for explore in (True, False):
        actions = algo.act(obs, explore=explore, generator=torch.Generator().manual_seed(1))
        assert actions.shape == (256, N, 2)
        low, high = torch.as_tensor(BOX.low), torch.as_tensor(BOX.high)
        assert ((actions >= low) & (actions <= high)).all()
        assert actions.min() < low.min() + 0.1 and actions.max() > high.max() - 0.1


@pytest.mark.parametrize("variant", ["masac", "maddpg"])
def test_discrete_actions_are_legal(variant):
    algo = make_algorithm(DISCRETE, variant=variant)
    g = torch.Generator().manual_seed(0)
    masks = torch.rand(128, N, DISCRETE.n, generator=g) < 0.4
    masks[..., 3] = True
    obs = torch.randn(128, N, OBS, generator=g)
    for explore in (True, False):
        actions = algo.act(obs, masks, explore=explore, generator=g)
        assert actions.dtype == torch.long and masks.gather(-1, actions.unsqueeze(-1)).all()


def test_gumbel_softmax_straight_through_is_one_hot_forward_with_gradients_backward():
    logits = torch.tensor([[2.0, 0.0, -1.0, 1.0]]).repeat(4000, 1).requires_grad_(True)
    mask = torch.tensor([True, True, False, True]).expand(4000, 4)
    sample = gumbel_softmax_straight_through(logits, mask, torch.Generator().manual_seed(0), temperature=0.5)
    assert set(sample.detach().unique().tolist()) == {0.0, 1.0} and (sample.detach().sum(-1) == 1).all()
    assert (sample.detach()[:, 2] == 0).all()  # never the illegal action
    # The forward samples the masked categorical: frequencies match softmax over the legal logits.
    expected = torch.softmax(torch.tensor([2.0, 0.0, 1.0]), 0)
    frequency = sample.detach()[:, [0, 1, 3]].mean(0)
    assert torch.allclose(frequency, expected, atol=0.03)
    (sample * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    assert logits.grad.abs().sum() > 0 and torch.isfinite(logits.grad).all()
    assert (logits.grad[:, 2] == 0).all()


def test_maddpg_discrete_actor_gets_gradient_through_the_relaxation():
    algo = make_algorithm(DISCRETE, variant="maddpg")
    loss, _ = algo.loss(make_batch(DISCRETE))
    loss.backward()
    grads = [p.grad for p in algo.actor.parameters()]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)


def test_act_without_a_generator_when_exploring_is_refused():
    algo = make_algorithm(gymnasium.spaces.Box(-1.0, 1.0, (2,)))
    with pytest.raises(TypeError, match="needs a torch.Generator"):
        algo.act(torch.zeros(1, N, OBS), explore=True)
    assert algo.act(torch.zeros(1, N, OBS), explore=False).shape == (1, N, 2)
