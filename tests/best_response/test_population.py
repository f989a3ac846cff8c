"""Frozen tabular policies, per-head masking and per-episode mixtures."""

import numpy as np
import pytest
import torch

from marljoint.best_response.kuhn import KUHN_INFOSETS, kuhn_infoset_observations
from marljoint.best_response.population import (
    ConstantPolicy,
    FrozenPolicy,
    KuhnTablePolicy,
    PolicyMixture,
    UniformPolicy,
    masked_head_probs,
    sample_heads,
)
from marljoint.env.spaces import ActionLayout
from marljoint.policies import AgentPolicy

DISCRETE_3 = ActionLayout("discrete", (3,), ())
MULTI = ActionLayout("multidiscrete", (3, 2), (2,))


def test_masked_head_probs_by_hand():
    probs = [torch.tensor([[0.5, 0.25, 0.25], [0.0, 0.0, 1.0]]), torch.tensor([[0.5, 0.5], [0.9, 0.1]])]
    mask = torch.tensor([[True, True, False, True, True], [True, True, False, False, False]])
    out = masked_head_probs(probs, mask)
    torch.testing.assert_close(out[0], torch.tensor([[2 / 3, 1 / 3, 0.0], [0.5, 0.5, 0.0]]))
    # Row 1 of head 1 has nothing allowed (a waiting player's mask): left as it is.
    torch.testing.assert_close(out[1], torch.tensor([[0.5, 0.5], [0.9, 0.1]]))


def test_uniform_policy_respects_masks_and_heads():
    policy = UniformPolicy(MULTI)
    mask = torch.tensor([[True, False, True, True, True]])
    probs = policy.action_probs(torch.zeros(1, 4), mask)
    torch.testing.assert_close(probs[0], torch.tensor([[0.5, 0.0, 0.5]]))
    torch.testing.assert_close(probs[1], torch.tensor([[0.5, 0.5]]))
    actions = policy.act(torch.zeros(500, 4), torch.Generator().manual_seed(0), mask.expand(500, -1))
    assert actions.shape == (500, 2) and not (actions[:, 0] == 1).any()
    assert isinstance(policy, FrozenPolicy)
    with pytest.raises(ValueError, match="needs categorical actions"):
        UniformPolicy(ActionLayout("box", (2,), (2,), low=np.zeros(2), high=np.ones(2)))


def test_constant_policy_samples_its_distribution():
    policy = ConstantPolicy([np.array([0.2, 0.8, 0.0])])
    actions = policy.act(torch.zeros(4000, 1), torch.Generator().manual_seed(1))
    assert actions.shape == (4000,)
    assert abs(float((actions == 1).float().mean()) - 0.8) < 0.03 and not (actions == 2).any()
    assert policy.act(torch.zeros(2, 1), torch.Generator(), deterministic=True).tolist() == [1, 1]
    with pytest.raises(ValueError, match=r"head_probs\[0\] .* non-negative"):
        ConstantPolicy([np.array([-1.0, 2.0])])


def test_kuhn_table_policy_reads_the_information_set():
    rng = np.random.default_rng(0)
    for player in (0, 1):
        table = rng.dirichlet(np.ones(2), size=6)
        policy = KuhnTablePolicy(table, player)
        probs = policy.action_probs(torch.as_tensor(kuhn_infoset_observations(player)))[0]
        np.testing.assert_allclose(probs.numpy(), table, atol=1e-6)
    assert KUHN_INFOSETS[0][1] == (0, "pb")
    with pytest.raises(ValueError, match=r"shape \(2, 6\)"):
        KuhnTablePolicy(np.full((2, 6), 0.5), 0)


def test_sample_heads_modes():
    probs = [torch.tensor([[0.1, 0.9]]), torch.tensor([[0.7, 0.2, 0.1]])]
    assert sample_heads(probs, torch.Generator(), True, True).tolist() == [[1, 0]]
    assert sample_heads(probs[:1], torch.Generator(), True, False).tolist() == [1]


def test_policy_mixture_normalises_and_checks():
    mixture = PolicyMixture([UniformPolicy(DISCRETE_3)] * 2, [1.0, 3.0])
    np.testing.assert_allclose(mixture.weights, [0.25, 0.75])
    assert len(mixture) == 2 and len(PolicyMixture([UniformPolicy(DISCRETE_3)]).weights) == 1
    with pytest.raises(ValueError, match="at least one member"):
        PolicyMixture([])
    with pytest.raises(ValueError, match="weights has 1 entries for 2 members"):
        PolicyMixture([UniformPolicy(DISCRETE_3)] * 2, [1.0])
    with pytest.raises(ValueError, match="non-negative and finite"):
        PolicyMixture([UniformPolicy(DISCRETE_3)] * 2, [1.0, -1.0])


def test_agent_policy_is_a_frozen_policy():
    assert issubclass(AgentPolicy, FrozenPolicy)


def test_agent_policy_of_a_box_agent_with_its_own_network_uses_its_own_log_std():
    """Per-agent (stacked) networks hold log_std [n_g, D]; an agent's policy must read its own row (it used to
    pass all of them and fail to broadcast)."""
    from marljoint.env.spaces import ObservationLayout
    from marljoint.policies import ActorCritic

    box = ActionLayout("box", (), (2,), low=np.full(2, -1.0, np.float32), high=np.full(2, 1.0, np.float32))
    obs_layout = ObservationLayout("flat", (4,), np.dtype(np.float32))
    net = ActorCritic(obs_layout, box, 3, False, (8,), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        net.log_std.copy_(torch.tensor([[0.0, 0.0], [-2.0, 1.0], [0.5, -0.5]]))
    obs = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    actions = torch.randn(5, 2, generator=torch.Generator().manual_seed(2))
    policy = AgentPolicy(net, slot=1)
    assert policy.act(obs, torch.Generator().manual_seed(0)).shape == (5, 2)
    placed = torch.zeros(5, 3, 4)
    placed[:, 1] = obs
    whole = net.distribution(net.action_head(placed))
    want = whole.log_prob(actions.unsqueeze(1).expand(5, 3, 2))[:, 1]
    torch.testing.assert_close(policy.distribution(obs).log_prob(actions), want)
