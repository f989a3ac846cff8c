"""The masked categorical maths every learner shares (marljoint.policies.distributions): the masked log-softmax,
the Gumbel-softmax straight-through sample, and their one masking rule (a row that allows nothing is unmasked)."""

import pytest
import torch

from marljoint.offpolicy import sac_networks
from marljoint.policies.distributions import (
    Categorical,
    gumbel_softmax_straight_through,
    legal_actions,
    masked_log_softmax,
    squashed_gaussian_log_prob,
)

LOGITS = torch.tensor([[2.0, 0.0, -1.0, 1.0], [0.5, 3.0, 0.0, -2.0]])
MASK = torch.tensor([[True, True, False, True], [False, False, False, False]])


def test_the_masked_softmax_is_zero_on_illegal_actions_and_the_softmax_over_the_legal_ones():
    probs = masked_log_softmax(LOGITS, MASK).exp()
    assert torch.equal(probs[0, 2], torch.tensor(0.0))
    assert torch.allclose(probs[0, [0, 1, 3]], torch.softmax(LOGITS[0, [0, 1, 3]], 0))


def test_an_all_masked_row_is_the_unmasked_softmax_with_finite_gradients():
    logits = LOGITS.clone().requires_grad_(True)
    log_p = masked_log_softmax(logits, MASK)
    assert torch.isfinite(log_p).all()
    assert torch.allclose(log_p[1].exp(), torch.softmax(LOGITS[1], 0))
    (log_p.exp() * log_p).sum().backward()
    assert torch.isfinite(logits.grad).all() and logits.grad[0, 2] == 0
    assert legal_actions(MASK).tolist() == [[True, True, False, True], [True, True, True, True]]


def test_the_distributions_and_the_function_give_the_same_log_probabilities():
    actions = torch.tensor([3, 1])
    expected = masked_log_softmax(LOGITS, MASK).gather(-1, actions[:, None])[:, 0]
    assert torch.equal(Categorical(LOGITS, MASK).log_prob(actions), expected)


def test_a_mask_that_is_not_bool_is_refused():
    with pytest.raises(TypeError, match=r"mask must be a bool tensor \(True = legal\), got dtype torch.int64"):
        masked_log_softmax(LOGITS, MASK.long())


def test_gumbel_samples_of_an_all_masked_row_follow_the_unmasked_softmax():
    logits = LOGITS[1:].repeat(4000, 1).requires_grad_(True)
    sample = gumbel_softmax_straight_through(logits, MASK[1:].expand(4000, 4), torch.Generator().manual_seed(0))
    assert (sample.detach().sum(-1) == 1).all()
    assert torch.allclose(sample.detach().mean(0), torch.softmax(LOGITS[1], 0), atol=0.03)
    (sample * torch.arange(4.0)).sum().backward()
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0


def test_gumbel_samples_never_pick_an_illegal_action_and_give_it_no_gradient():
    logits = torch.tensor([[0.0, 0.0, 50.0, 0.0]]).repeat(500, 1).requires_grad_(True)
    mask = MASK[:1].expand(500, 4)
    sample = gumbel_softmax_straight_through(logits, mask, torch.Generator().manual_seed(1), temperature=0.3)
    assert (sample.detach()[:, 2] == 0).all()
    (sample * torch.arange(4.0)).sum().backward()
    assert (logits.grad[:, 2] == 0).all()


def test_gumbel_refuses_a_missing_generator_and_a_non_positive_temperature():
    with pytest.raises(TypeError, match="sample\\(\\) needs a torch.Generator, got NoneType"):
        gumbel_softmax_straight_through(LOGITS, MASK, None)
    with pytest.raises(ValueError, match="temperature must be a number > 0, got 0.0; e.g. gumbel_temperature=1.0"):
        gumbel_softmax_straight_through(LOGITS, MASK, torch.Generator(), temperature=0.0)


def test_the_squashed_gaussian_refuses_a_sample_of_another_shape():
    with pytest.raises(
        ValueError, match=r"actions of shape \(2, 1\) do not match the Gaussian's mean of shape \(1, 1\)"
    ):
        squashed_gaussian_log_prob(torch.zeros(2, 1), torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1))


def test_the_off_policy_networks_module_names_the_same_functions():
    assert sac_networks.masked_log_softmax is masked_log_softmax
    assert sac_networks.gumbel_softmax_straight_through is gumbel_softmax_straight_through
    assert sac_networks.squashed_gaussian_log_prob is squashed_gaussian_log_prob
