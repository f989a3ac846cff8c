"""Known answers for the critics' targets: soft values, termination against truncation, dead agents, masks."""

import doctest
import math

import gymnasium
import pytest
import torch
import torch.nn.functional as F

from marljoint.offpolicy import sac, sac_networks
from marljoint.offpolicy.sac import SacAlgorithm, SacConfig, discrete_soft_value, soft_td_target

from ._sac_helpers import BOX, DISCRETE, N, make_algorithm, make_batch


@pytest.mark.parametrize("module", [sac, sac_networks], ids=lambda m: m.__name__)
def test_docstring_examples_run(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_td_target_by_hand_terminated_truncated_and_absent_agents():
    rewards = torch.tensor([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]])
    next_value = torch.tensor([[10.0, 20.0], [10.0, 20.0], [10.0, 20.0]])
    # Row 0: a plain step (or a truncation: the same). Row 1: the episode terminated. Row 2: agent 1 is gone.
    terminated = torch.tensor([False, True, False])
    next_alive = torch.tensor([[True, True], [True, True], [True, False]])
    y = soft_td_target(rewards, terminated, next_alive, next_value, gamma=0.9)
    assert torch.allclose(y, torch.tensor([[10.0, 20.0], [1.0, 2.0], [10.0, 2.0]]))
    # Per-agent termination: only agent 0 stops bootstrapping.
    y = soft_td_target(rewards[:1], torch.tensor([[True, False]]), next_alive[:1], next_value[:1], gamma=0.9)
    assert torch.allclose(y, torch.tensor([[1.0, 20.0]]))


def test_box_soft_target_by_hand():
    # y = r + γ (1 − d) (min(Q1', Q2') − α log π'): Q' = (3, 5), α = 0.5, log π' = −1.2, γ = 0.9.
    next_value = torch.tensor([[min(3.0, 5.0) - 0.5 * -1.2]])
    y = soft_td_target(
        torch.tensor([[1.0]]), torch.tensor([False]), torch.ones(1, 1, dtype=torch.bool), next_value, 0.9
    )
    assert y.item() == pytest.approx(1.0 + 0.9 * 3.6)


def test_discrete_soft_value_by_hand_over_legal_actions():
    q = torch.tensor([[[1.0, 100.0, 3.0]]])
    mask = torch.tensor([[[True, False, True]]])
    log_probs = sac_networks.masked_log_softmax(torch.tensor([[[0.0, 7.0, 0.0]]]), mask)
    value = discrete_soft_value(q, log_probs, torch.tensor([0.5]), mask)
    # π = (1/2, 0, 1/2): V = ½ (1 − ½ log ½) + ½ (3 − ½ log ½) = 2 + ½ log 2; the illegal action's Q never counts.
    assert value.item() == pytest.approx(2.0 + 0.5 * math.log(2.0))
    assert torch.isfinite(discrete_soft_value(q, log_probs, torch.tensor([1e30]), mask)).all()


def _critic_loss_by_hand(algo, batch, target):
    """Σ over twins and agents of the mean over alive rows of (Q(s, a) − y)², the critic input built by hand."""
    discrete = algo.spaces.discrete
    if discrete:
        encoded = F.one_hot(batch["actions"], algo.spaces.action_size).float()
    else:
        encoded = (batch["actions"] - algo.action_center) / algo.action_half_range
    encoded = encoded * batch["alive"].unsqueeze(-1)
    rows = []
    for i in range(N):
        # The discrete SAC critic of agent i gives a value per own action: its own slot is left empty.
        own = encoded.clone()
        if discrete:
            own[:, i] = 0.0
        rows.append(torch.cat([batch["state"], own.flatten(1)], dim=-1))
    q = algo.critic(torch.stack(rows, 1))  # [B, twins, N, out]
    if discrete:
        q = q.gather(-1, batch["actions"][:, None, :, None].expand(-1, q.shape[1], -1, 1))
    q = q[..., 0]
    alive = batch["alive"].float()
    per_twin = ((q - target.unsqueeze(1)).square() * alive.unsqueeze(1)).sum(0) / alive.sum(0)
    return per_twin.sum().item()


@pytest.mark.parametrize("variant", ["masac", "maddpg"])
def test_terminated_or_departed_agents_do_not_bootstrap_and_truncation_does(variant):
    algo = make_algorithm(BOX, variant=variant, gamma=0.9)
    batch = make_batch(BOX)
    ended = {**batch, "terminated": torch.ones_like(batch["terminated"])}
    departed = {**batch, "terminated": torch.zeros_like(batch["terminated"]), "next_alive": ~batch["next_alive"]}
    for b in (ended, departed):
        _, stats = algo.loss(b)
        assert stats["critic_loss"] == pytest.approx(_critic_loss_by_hand(algo, b, b["rewards"]), rel=1e-5)
    running = {**batch, "terminated": torch.zeros_like(batch["terminated"])}
    truncated = {**running, "truncated": torch.ones_like(batch["truncated"])}
    losses = []
    for b in (running, truncated):
        algo.generator.manual_seed(0)
        losses.append(algo.loss(b)[1]["critic_loss"])
    assert losses[0] == losses[1] != pytest.approx(_critic_loss_by_hand(algo, running, running["rewards"]))


@pytest.mark.parametrize("space", [BOX, DISCRETE], ids=["box", "discrete"])
def test_dead_agents_are_masked_out_of_the_losses(space):
    algo = make_algorithm(space)
    batch = make_batch(space)
    dead = torch.zeros_like(batch["alive"])
    dead[:6, 1] = True
    batch["alive"] = ~dead
    changed = {key: value.clone() for key, value in batch.items()}
    # Whatever a dead agent's row holds (its reward, its action) changes no loss.
    changed["rewards"][dead] = 1e3
    changed["actions"][dead] = make_batch(space, seed=7)["actions"][dead]
    losses = []
    for b in (batch, changed):
        algo.generator.manual_seed(0)
        losses.append(algo.loss(b)[0].item())
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    ended = {**batch, "terminated": torch.ones_like(batch["terminated"])}
    assert algo.loss(ended)[1]["critic_loss"] == pytest.approx(
        _critic_loss_by_hand(algo, ended, ended["rewards"]), rel=1e-5
    )


DISCRETE_3 = gymnasium.spaces.Discrete(3)


def _one_agent(space, **settings):
    config = SacConfig(hidden_sizes=(8,), critic_hidden_sizes=(8,), gamma=0.9, init_alpha=0.3, **settings)
    return SacAlgorithm(config, num_agents=1, obs_dim=2, state_dim=2, action_space=space, seed=1)


def _one_agent_batch(space):
    g = torch.Generator().manual_seed(5)
    obs, next_obs = torch.randn(6, 1, 2, generator=g), torch.randn(6, 1, 2, generator=g)
    batch = {
        "obs": obs,
        "state": obs[:, 0],
        "next_obs": next_obs,
        "next_state": next_obs[:, 0],
        "rewards": torch.randn(6, 1, generator=g),
        "terminated": torch.tensor([False, True, False, False, True, False]),
        "alive": torch.ones(6, 1, dtype=torch.bool),
        "next_alive": torch.ones(6, 1, dtype=torch.bool),
    }
    if isinstance(space, gymnasium.spaces.Discrete):
        batch["actions"] = torch.tensor([[0], [2], [1], [0], [2], [1]])
        batch["next_masks"] = torch.tensor([[True, False, True]]).repeat(6, 1).unsqueeze(1)
    else:
        batch["actions"] = torch.rand(6, 1, 1, generator=g) * 4 - 1
    return batch


def test_discrete_sac_target_by_hand():
    # One agent: its discrete critic reads the state only (its own action slot is zeroed), so V is exact.
    algo, batch = _one_agent(DISCRETE_3), _one_agent_batch(DISCRETE_3)
    with torch.no_grad():
        logits, _ = algo.actor(batch["next_obs"])
        log_pi = torch.log_softmax(logits.masked_fill(~batch["next_masks"], -math.inf), -1)
        pi = log_pi.exp()
        next_input = torch.cat([batch["next_state"], torch.zeros(6, 3)], dim=-1).unsqueeze(1)
        q_next = algo.target_critic(next_input).amin(1)  # [6, 1, 3]
        legal = batch["next_masks"]
        value = torch.where(legal, pi * (q_next - 0.3 * log_pi.masked_fill(~legal, 0.0)), 0.0).sum(-1)
        y = batch["rewards"] + 0.9 * (~batch["terminated"]).float().unsqueeze(1) * value
        q = algo.critic(torch.cat([batch["state"], torch.zeros(6, 3)], -1).unsqueeze(1))
        taken = q.gather(-1, batch["actions"].view(6, 1, 1, 1).expand(-1, 2, -1, -1))[..., 0]
        expected = (taken - y.unsqueeze(1)).square().mean(0).sum().item()
    assert algo.loss(batch)[1]["critic_loss"] == pytest.approx(expected, rel=1e-5)


def test_box_sac_target_by_hand():
    space = gymnasium.spaces.Box(-1.0, 3.0, (1,))
    algo, batch = _one_agent(space), _one_agent_batch(space)
    noise = torch.Generator()
    noise.set_state(algo.generator.get_state())  # the target's next actions are the loss's first draw
    with torch.no_grad():
        head, _ = algo.actor(batch["next_obs"])
        mean, log_std = head[..., :1], head[..., 1:]
        u = mean + log_std.exp() * torch.randn(mean.shape, generator=noise)
        gaussian = torch.distributions.Normal(mean, log_std.exp()).log_prob(u)
        log_pi = (gaussian - torch.log(2.0 * (1 - torch.tanh(u) ** 2))).sum(-1)  # da/du = 2 (1 − tanh²u)
        q_next = algo.target_critic(torch.cat([batch["next_state"], torch.tanh(u)[:, 0]], -1).unsqueeze(1))
        value = q_next[..., 0].amin(1) - 0.3 * log_pi
        y = batch["rewards"] + 0.9 * (~batch["terminated"]).float().unsqueeze(1) * value
        encoded = (batch["actions"][:, 0] - 1.0) / 2.0
        q = algo.critic(torch.cat([batch["state"], encoded], -1).unsqueeze(1))[..., 0]
        expected = (q - y.unsqueeze(1)).square().mean(0).sum().item()
    assert algo.loss(batch)[1]["critic_loss"] == pytest.approx(expected, rel=1e-5)
