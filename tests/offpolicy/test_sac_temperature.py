"""The entropy temperature: the sign of its gradient, one optimiser step by hand, and the algorithm's use of it."""

import math

import pytest
import torch

from marljoint.offpolicy.sac import temperature_loss

from ._sac_helpers import BOX, DISCRETE, N, make_algorithm, make_batch


@pytest.mark.parametrize(
    ("log_prob", "raises_alpha"),
    [(2.0, True), (-3.0, False)],  # entropy −2 below the target −1: α rises; entropy 3 above it: α falls
)
def test_the_gradient_raises_alpha_exactly_when_the_entropy_is_below_target(log_prob, raises_alpha):
    log_alpha = torch.zeros(1, requires_grad=True)
    alive = torch.ones(4, 1, dtype=torch.bool)
    temperature_loss(log_alpha, torch.full((4, 1), log_prob), -1.0, alive).backward()
    assert (log_alpha.grad.item() < 0) == raises_alpha  # a descent step moves against the gradient


def test_one_sgd_step_by_hand():
    # grad_i = −mean over agent i's alive rows of (log π + H̄): agent 0 (rows 0.5 and 1.5) gets 1, agent 1 (its one
    # alive row, 4.0) gets −2; SGD moves log α against them.
    log_alpha = torch.tensor([math.log(0.2), 0.0], requires_grad=True)
    log_prob = torch.tensor([[0.5, 4.0], [1.5, -9.0]])
    alive = torch.tensor([[True, True], [True, False]])
    target = -2.0
    optimizer = torch.optim.SGD([log_alpha], lr=0.1)
    temperature_loss(log_alpha, log_prob, target, alive).backward()
    optimizer.step()
    expected = torch.tensor([math.log(0.2) + 0.1 * (1.0 - 2.0), 0.0 + 0.1 * (4.0 - 2.0)])
    assert torch.allclose(log_alpha.detach(), expected)


def test_the_algorithm_gradient_of_log_alpha_is_entropy_minus_target():
    algo = make_algorithm(BOX)
    batch = make_batch(BOX)
    batch["alive"][:5, 2] = False
    loss, stats = algo.loss(batch)
    loss.backward()
    # d/dlog α_i of −log α_i (log π + H̄) averaged over alive rows is entropy_i − H̄, with H̄ = −D = −2.
    expected = torch.tensor([stats[f"entropy/{i}"] + 2.0 for i in range(N)])
    assert torch.allclose(algo.temperature.log_alpha.grad, expected, atol=1e-5)


def test_discrete_target_entropy_is_a_fraction_of_the_legal_actions_entropy():
    algo = make_algorithm(DISCRETE, target_entropy_fraction=0.5)
    batch = make_batch(DISCRETE)
    loss, stats = algo.loss(batch)
    loss.backward()
    legal = batch["masks"].sum(-1).float()
    expected = torch.tensor([stats[f"entropy/{i}"] for i in range(N)]) - 0.5 * legal.log().mean(0)
    assert torch.allclose(algo.temperature.log_alpha.grad, expected, atol=1e-5)


def test_a_fixed_temperature_is_not_trained():
    algo = make_algorithm(BOX, autotune_alpha=False, init_alpha=0.05)
    assert [name for name, _ in algo.networks()] == ["actor", "critic"]
    loss, stats = algo.loss(make_batch(BOX))
    loss.backward()
    assert algo.temperature.log_alpha.grad is None and stats["alpha_loss"] == 0.0
    assert stats["alpha/0"] == pytest.approx(0.05)
