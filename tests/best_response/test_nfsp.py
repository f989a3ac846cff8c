"""NFSP: reservoirs of own best-response rows, average policies, evaluation mode, seeding and persistence."""

import numpy as np
import pytest
import torch

from marljoint import JointTrainerConfig
from marljoint.best_response import NFSP, NFSP_METRICS, NfspConfig, nash_conv
from marljoint.best_response.games import KuhnGame
from marljoint.best_response.nfsp import AveragePolicy
from marljoint.env.spaces import ActionLayout, ObservationLayout
from marljoint_envs import identity_v0, kuhn_poker_v0

TINY = JointTrainerConfig(
    num_envs=16, rollout_steps=8, gamma=1.0, gae_lambda=1.0, minibatch_size=64, n_epochs=2, hidden_sizes=(16,)
)


def kuhn_nfsp(**changes):
    settings = {"trainer": TINY, "rollouts_per_iteration": 2, "min_reservoir_size": 8, "sl_batch_size": 32}
    settings.update(changes)
    return NFSP(kuhn_poker_v0.raw_env, NfspConfig(**settings), game=KuhnGame())


def test_reservoirs_hold_exactly_the_best_responses_own_rows():
    # With eta = 1 every decision is a best-response decision: Kuhn has one mover per step, so the two
    # reservoirs together saw every env step.
    nfsp = kuhn_nfsp(anticipatory=1.0, rollouts_per_iteration=1)
    nfsp.step()
    assert sum(r.seen for r in nfsp.reservoirs) == TINY.rollout_steps * TINY.num_envs
    # With eta = 0.25 about a quarter of the decisions are the best responses' own.
    nfsp = kuhn_nfsp(anticipatory=0.25, trainer=TINY.replace(num_envs=64), rollouts_per_iteration=3)
    nfsp.step()
    fraction = sum(r.seen for r in nfsp.reservoirs) / (3 * 8 * 64)
    assert 0.15 < fraction < 0.35


def test_rollout_rows_of_the_average_policy_are_invalid_for_ppo():
    nfsp = kuhn_nfsp(anticipatory=0.5)
    rollout = nfsp.trainer.collect_rollout()
    acting_in_env = rollout.acting.sum().item()
    assert 0 < acting_in_env < TINY.rollout_steps * TINY.num_envs
    # Valid rows are the best response's: never more than one per step and copy in a turn-based game.
    assert (rollout.valid.sum(dim=2) <= 1).all()


def test_metrics_and_evaluation_use_the_average_policies():
    nfsp = kuhn_nfsp()
    row = nfsp.step()
    gain = {"best_response_gain", "best_response_gain_ci"}  # with gain_every only
    assert {k.replace("player_0", "<agent>").replace("player_1", "<agent>") for k in row} == set(NFSP_METRICS) - gain
    averages = [nfsp.average_policy(agent) for agent in ("player_0", "player_1")]
    assert row["nash_conv"] == pytest.approx(nash_conv(KuhnGame(), averages))
    assert nfsp.exploitability() == pytest.approx(row["exploitability"])
    assert not any(p.requires_grad for p in averages[0].parameters())


def test_average_policy_cross_entropy_sums_the_heads():
    layout = ActionLayout("multidiscrete", (3, 2), (2,))
    observation = ObservationLayout("flat", (4,), np.dtype(np.float32))
    policy = AveragePolicy(observation, layout, (8,), torch.Generator().manual_seed(0))
    obs = torch.randn(5, 4)
    actions = torch.tensor([[0, 1], [2, 0], [1, 1], [0, 0], [2, 1]])
    logits = policy(obs)
    by_hand = torch.nn.functional.cross_entropy(logits[:, :3], actions[:, 0]) + torch.nn.functional.cross_entropy(
        logits[:, 3:], actions[:, 1]
    )
    torch.testing.assert_close(policy.loss(obs, actions, None), by_hand)


def test_action_marginal_for_every_head_of_a_multidiscrete_policy():
    trainer = TINY.replace(num_envs=4, minibatch_size=32)
    config = NfspConfig(trainer=trainer, rollouts_per_iteration=1, min_reservoir_size=8)
    nfsp = NFSP(lambda: identity_v0.parallel_env(num_agents=2, nvec=(3, 2)), config)
    nfsp.step()
    obs = np.array([1, 0, 0, 0, 1], dtype=np.float32)
    heads = nfsp.action_marginal_for("agent_1", obs)
    assert [h.shape for h in heads] == [(3,), (2,)]
    assert all(abs(h.sum() - 1.0) < 1e-6 for h in heads)
    batch = nfsp.action_marginal_for(0, np.stack([obs, obs]), mask=np.ones((2, 5), bool))
    np.testing.assert_allclose(batch[0][0], batch[0][1])
    masked = nfsp.action_marginal_for(0, obs, mask=np.array([False, True, True, True, True]))
    assert masked[0][0] == 0.0
    assert np.isnan(nfsp.history[-1]["exploitability"])
    with pytest.raises(ValueError, match=r"does not fit agent 'agent_0'"):
        nfsp.action_marginal_for(0, np.zeros(3))
    with pytest.raises(ValueError, match="unknown agent 'x'"):
        nfsp.action_marginal_for("x", obs)
    with pytest.raises(ValueError, match="needs a known game"):
        nfsp.nash_conv()


def test_every_episode_is_dealt_afresh():
    nfsp = kuhn_nfsp(anticipatory=1.0, trainer=TINY.replace(rollout_steps=24))
    rollout = nfsp.trainer.collect_rollout()
    obs = rollout.obs[0][:, :, 0].numpy()  # player 0's observations [T, E, 9]
    starts = obs[:, :, 5] == 1.0  # history "" : a new hand
    deals = [tuple(obs[starts[:, e], e, :3].argmax(-1)) for e in range(TINY.num_envs)]
    assert len(set(deals)) == TINY.num_envs  # no two copies see the same sequence of cards
    cards = np.concatenate([np.array(d) for d in deals])
    assert set(cards) == {0, 1, 2} and len(cards) > 3 * TINY.num_envs


def test_same_seed_same_average_policy_and_save_load(tmp_path):
    first, second = kuhn_nfsp(seed=5), kuhn_nfsp(seed=5)
    first.step()
    second.step()
    for a, b in zip(first.average_policies[1].parameters(), second.average_policies[1].parameters()):
        assert torch.equal(a, b)
    first.save(tmp_path)
    loaded = NFSP.load(tmp_path, kuhn_poker_v0.raw_env, game=KuhnGame())
    assert loaded.iteration == 1 and loaded.reservoirs[0].seen == first.reservoirs[0].seen
    for a, b in zip(first.average_policies[0].parameters(), loaded.average_policies[0].parameters()):
        assert torch.equal(a, b)
    assert loaded.exploitability() == pytest.approx(first.exploitability())
    loaded.step()
    assert loaded.iteration == 2


def test_configuration_errors():
    with pytest.raises(ValueError, match=r"anticipatory must be in \(0, 1\], got 0"):
        NfspConfig(anticipatory=0)
    with pytest.raises(ValueError, match="reservoir_capacity must be a positive integer"):
        NfspConfig(reservoir_capacity=0)
    with pytest.raises(ValueError, match="sl_learning_rate must be > 0"):
        NfspConfig(sl_learning_rate=0.0)
    with pytest.raises(ValueError, match="pass iterations=..., max_seconds=..., or both"):
        kuhn_nfsp().run()
    assert NfspConfig.from_dict(NfspConfig(seed=2).to_dict()) == NfspConfig(seed=2)


def test_an_annealed_learning_rate_is_refused():
    from marljoint import JointTrainerConfig
    from marljoint.best_response import NfspConfig

    with pytest.raises(ValueError, match="NFSP runs for as many iterations as it is asked; set anneal_lr=False"):
        NfspConfig(trainer=JointTrainerConfig(anneal_lr=True))
