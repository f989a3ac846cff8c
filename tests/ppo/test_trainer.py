"""The joint trainer: shapes, the minibatch schedule, one backward, clipping, freezing, determinism."""

import functools
import math

import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, LocalCollector, PettingZooJointEnv
from marljoint.auxiliary import features_only
from marljoint.policies import ActorCritic
from marljoint_envs import kuhn_poker_v0, mock_v0, variable_agents_v0


def make(env_fn=mock_v0.parallel_env, num_envs=2, **cfg):
    cfg.setdefault("rollout_steps", 16)
    cfg.setdefault("minibatch_size", 16)
    cfg.setdefault("n_epochs", 2)
    config = JointTrainerConfig(num_envs=num_envs, **cfg)
    env = PettingZooJointEnv(env_fn, num_envs=num_envs, seed=config.seed)
    return JointMultiAgentTrainer.from_env(env, config)


def params(trainer):
    return [p.detach().clone() for policy in trainer.policies for p in policy.parameters()]


def test_rollout_shapes_and_dtypes():
    trainer = make(functools.partial(mock_v0.parallel_env, num_agents=3, obs_dim=5), num_envs=4, rollout_steps=8)
    ro = trainer.collect_rollout()
    assert ro.rewards.shape == (8, 4, 3)
    assert ro.obs[0].shape == (8, 4, 3, 5)
    assert ro.actions[0].shape == (8, 4, 3) and ro.actions[0].dtype == torch.int64
    assert ro.log_probs.shape == ro.values.shape == ro.alive.shape == (8, 4, 3)
    assert ro.bootstrap_values.shape == (4, 3)
    assert ro.alive.all() and not ro.terminated.any()
    # mock rewards are the sum of all actions / 10, identical for every agent
    expected = ro.actions[0].sum(-1, keepdim=True).float().expand(-1, -1, 3) / 10
    torch.testing.assert_close(ro.rewards, expected)


def test_smoke_update_gives_finite_stats():
    trainer = make()
    stats = trainer.update(trainer.collect_rollout())
    for name in ("policy_loss", "value_loss", "entropy", "clip_fraction", "approx_kl"):
        values = getattr(stats, name)
        assert len(values) == 2 and all(math.isfinite(v) for v in values), name
    assert math.isfinite(stats.total_loss) and stats.aux_loss == 0.0


@pytest.mark.parametrize(
    "changes,expected",
    [
        ({}, 8),
        ({"max_minibatches_per_epoch": 2}, 4),
        ({"max_minibatches_per_epoch": 1}, 2),
        ({"max_minibatches_per_epoch": 0}, 2),
        ({"max_minibatches_per_epoch": 99}, 8),
        ({"iterate_all_minibatches": False}, 2),
    ],
)
def test_minibatch_schedule(changes, expected):
    trainer = make(num_envs=1, rollout_steps=64, minibatch_size=16, n_epochs=2, **changes)
    assert trainer.update(trainer.collect_rollout()).num_mb_steps == expected


def test_aux_loss_couples_agents_through_one_backward():
    trainer = make(share_parameters=False)

    def difference(features):
        return ((features[0] - features[1]) ** 2).mean()

    stats = trainer.update(trainer.collect_rollout(), aux_fn=features_only(difference))
    assert stats.aux_loss > 0
    with pytest.raises(TypeError, match=r"'difference' does not take \(features, alive\).*features_only\(fn\)"):
        trainer.update(trainer.collect_rollout(), aux_fn=difference)


def test_aux_fn_receives_alive_mask_and_rejects_bad_output():
    trainer = make()
    seen = {}

    def record(features, alive):
        seen["shapes"] = [tuple(f.shape) for f in features]
        seen["alive"] = tuple(alive.shape)
        return features[0].sum() * 0

    trainer.update(trainer.collect_rollout(), aux_fn=record)
    assert seen["shapes"] == [(16, 64), (16, 64)] and seen["alive"] == (16, 2)
    with pytest.raises(ValueError, match="aux_fn must return a scalar tensor"):
        trainer.update(trainer.collect_rollout(), aux_fn=lambda f, a: torch.ones(3))
    with pytest.raises(ValueError, match="non-finite loss"):
        trainer.update(trainer.collect_rollout(), aux_fn=lambda f, a: f[0].sum() * float("nan"))


def test_multidiscrete_rollout_and_update():
    trainer = make(functools.partial(mock_v0.parallel_env, nvec=(3, 2)))
    ro = trainer.collect_rollout()
    assert ro.actions[0].shape == (16, 2, 2, 2)
    assert (ro.actions[0][..., 0] < 3).all() and (ro.actions[0][..., 1] < 2).all()
    stats = trainer.update(ro)
    assert all(math.isfinite(v) for v in stats.entropy)


def test_per_agent_observations_are_read_per_agent():
    trainer = make(functools.partial(mock_v0.parallel_env, num_agents=3, one_hot_obs=True))
    ro = trainer.collect_rollout()
    for j in range(3):
        assert (ro.obs[0][:, :, j] == torch.eye(3)[j]).all()


def test_frozen_agent_is_bit_identical_and_others_move():
    trainer = make(share_parameters=False)
    before = params(trainer)
    opt_before = trainer.learner.units[0].optimizer.state_dict()
    trainer.update(trainer.collect_rollout(), active=[True, False])
    after = params(trainer)
    for b, a in zip(before, after):
        assert torch.equal(b[1], a[1])
    assert any(not torch.equal(b[0], a[0]) for b, a in zip(before, after))
    opt_after = trainer.learner.units[0].optimizer.state_dict()
    assert opt_before != opt_after


def test_freezing_part_of_a_shared_network_is_refused():
    trainer = make(share_parameters=True)
    with pytest.raises(ValueError, match="share one network"):
        trainer.update(trainer.collect_rollout(), active=[True, False])
    with pytest.raises(ValueError, match="active has 3 entries for 2 agents"):
        trainer.update(trainer.collect_rollout(), active=[True, True, False])


def test_same_seed_gives_bit_identical_rollouts_and_parameters():
    runs = []
    for _ in range(2):
        trainer = make(share_parameters=False, seed=7)
        for _ in range(2):
            ro = trainer.collect_rollout()
            trainer.update(ro)
        runs.append((ro.actions[0].clone(), ro.log_probs.clone(), params(trainer)))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
    assert all(torch.equal(a, b) for a, b in zip(runs[0][2], runs[1][2]))
    other = make(share_parameters=False, seed=8)
    assert not torch.equal(other.collect_rollout().actions[0], runs[0][0])


def test_dead_agent_rows_contribute_nothing():
    def run(corrupt):
        trainer = make(variable_agents_v0.parallel_env, num_envs=2, rollout_steps=20, share_parameters=True)
        ro = trainer.collect_rollout()
        assert (~ro.alive).any()
        if corrupt:
            dead = ~ro.alive
            ro.rewards[dead] = 123.0
            ro.log_probs[dead] = -7.0
            ro.values[dead] = 55.0
            ro.obs[0][dead] = 0.77
        trainer.update(ro)
        return params(trainer)

    assert all(torch.equal(a, b) for a, b in zip(run(False), run(True)))


def test_masked_actions_are_never_sampled_in_turn_based_games():
    trainer = make(kuhn_poker_v0.env, num_envs=4, rollout_steps=64)
    ro = trainer.collect_rollout()
    valid = ro.valid
    masks, actions = ro.action_masks[0], ro.actions[0]
    chosen = torch.gather(masks, -1, actions.unsqueeze(-1)).squeeze(-1)
    assert chosen[valid].all()
    assert (ro.acting.sum(-1) == 1).all()


def _sgd_trainer(max_grad_norm, critic_lr=None):
    env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=2, seed=0)
    cfg = JointTrainerConfig(num_envs=2, rollout_steps=16, minibatch_size=32, n_epochs=1, max_grad_norm=max_grad_norm)
    group = env.spec.groups[0]
    torch.manual_seed(0)
    policies = [ActorCritic(group.observation, group.action, num_agents=1, share_parameters=True) for _ in range(2)]
    if critic_lr is None:
        optimizers = [torch.optim.SGD(p.parameters(), lr=1.0) for p in policies]
        return JointMultiAgentTrainer(env, cfg, policies, optimizers), policies
    optimizers = [torch.optim.SGD(list(p.actor_parameters()), lr=0.0) for p in policies]
    critics = [torch.optim.SGD(list(p.critic_parameters()), lr=critic_lr) for p in policies]
    return JointMultiAgentTrainer(env, cfg, policies, optimizers, critic_optimizers=critics), policies


def _flat(params):
    return torch.cat([p.detach().flatten() for p in params])


def test_global_norm_clipping_scales_each_network_to_the_cap_and_is_a_noop_above():
    # Actor and critic are separate networks, each clipped on its own: with SGD at lr 1 each one's step is its
    # clipped gradient, of norm exactly the cap (clipped) or the logged gradient norm (not clipped).
    for cap, clipped in ((1e-3, True), (1e9, False)):
        trainer, policies = _sgd_trainer(cap)
        parts = {"actor": lambda p: p.actor_parameters(), "critic": lambda p: p.critic_parameters()}
        before = {(i, part): _flat(get(pol)) for i, pol in enumerate(policies) for part, get in parts.items()}
        stats = trainer.update(trainer.collect_rollout())
        assert sorted(stats.grad_norm) == sorted(f"{part}/{a}" for part in parts for a in trainer.spec.agents)
        for (i, part), old in before.items():
            step = (_flat(parts[part](policies[i])) - old).norm().item()
            expected = cap if clipped else stats.grad_norm[f"{part}/{trainer.spec.agents[i]}"]
            assert step == pytest.approx(expected, rel=1e-3)


def test_split_critic_steps_only_the_critic_when_actor_lr_is_zero():
    trainer, policies = _sgd_trainer(1e9, critic_lr=0.1)
    actor_before = [p.detach().clone() for p in policies[0].actor_parameters()]
    critic_before = [p.detach().clone() for p in policies[0].critic_parameters()]
    trainer.update(trainer.collect_rollout())
    assert all(torch.equal(a, p) for a, p in zip(actor_before, policies[0].actor_parameters()))
    assert any(not torch.equal(c, p) for c, p in zip(critic_before, policies[0].critic_parameters()))


def test_from_env_split_critic_has_its_own_optimizer():
    trainer = make(critic_lr=1e-3)
    assert trainer.learner.units[0].critic_optimizer is not None
    trainer.update(trainer.collect_rollout())


def test_length_mismatches_raise():
    env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=1)
    group = env.spec.groups[0]
    policy = ActorCritic(group.observation, group.action, num_agents=1, share_parameters=True)
    opt = torch.optim.Adam(policy.parameters())
    with pytest.raises(ValueError, match="got 1 policies for 2 agents"):
        JointMultiAgentTrainer(env, JointTrainerConfig(), [policy], [opt, opt])
    with pytest.raises(ValueError, match="got 1 optimizers for 2 agents"):
        JointMultiAgentTrainer(env, JointTrainerConfig(), [policy, policy], [opt])
    with pytest.raises(ValueError, match="config.num_agents is 3 but the env has 2 agents"):
        JointMultiAgentTrainer.from_env(env, JointTrainerConfig(num_agents=3))
    trainer = make()
    ro = trainer.collect_rollout()
    ro.values = ro.values[:-1]
    with pytest.raises(ValueError, match=r"rollout.values has shape \(15, 2, 2\), expected \(16, 2, 2\)"):
        trainer.update(ro)


def test_train_reports_iterations_and_rejects_bad_budgets():
    trainer = make()
    history = trainer.train(64)
    assert [h["iteration"] for h in history] == [1, 2]
    assert history[-1]["env_steps"] == 64
    with pytest.raises(ValueError, match="total_steps must be a positive integer"):
        trainer.train(0)


def test_train_without_history_keeps_the_last_metrics_and_shares_metric_keys():
    trainer = make()
    seen = []
    history = trainer.train(96, callback=seen.append, keep_history=False)
    assert [h["iteration"] for h in seen] == [1, 2, 3]
    assert history == [seen[-1]]
    # every iteration's dict reuses the same key objects: long histories do not repeat the key strings
    keys = [next(k for k in h if k.startswith("value_loss/")) for h in seen]
    assert keys[0] is keys[1] is keys[2]


def test_save_and_load_round_trip(tmp_path):
    trainer = make(share_parameters=False)
    trainer.update(trainer.collect_rollout())
    trainer.save(tmp_path / "ckpt.pt")
    other = make(share_parameters=False, seed=3)
    other.load(tmp_path / "ckpt.pt")
    assert all(torch.equal(a, b) for a, b in zip(params(trainer), params(other)))
    assert other.iteration == trainer.iteration


@pytest.mark.parametrize("share", [True, False])
def test_agent_policy_reproduces_the_group_network_and_stays_frozen(share):
    trainer = make(functools.partial(mock_v0.parallel_env, num_agents=3, one_hot_obs=True), share_parameters=share)
    ro = trainer.collect_rollout()
    obs = ro.obs[0][0]  # [E, n_g, obs]
    network, _ = trainer.policy_for("agent_2")
    with torch.no_grad():
        head = network(obs).head[:, 2]
    frozen = trainer.agent_policy("agent_2")
    probs = frozen.action_probs(obs[:, 2])[0]
    torch.testing.assert_close(probs, torch.softmax(head, -1))
    trainer.update(ro)
    torch.testing.assert_close(frozen.action_probs(obs[:, 2])[0], probs)
    with pytest.raises(ValueError, match="unknown agent 'nobody'"):
        trainer.agent_policy("nobody")


def test_centralized_critic_anneal_and_target_kl_run():
    trainer = make(centralized_critic=True, anneal_lr=True, target_kl=1e-12, n_epochs=4)
    history = trainer.train(3 * 32)
    assert history[0]["learning_rate"] == pytest.approx(3e-4)
    assert history[-1]["learning_rate"] < history[0]["learning_rate"]
    # a tiny target KL stops each update after its first minibatch
    assert all(h["num_mb_steps"] == 1 for h in history)
    frozen = trainer.agent_policy(0)
    assert frozen.act(torch.zeros(2, 4), torch.Generator().manual_seed(0)).shape == (2,)


def test_value_normalization_off_and_box_actions_are_clipped():
    from marljoint_envs import identity_v0

    trainer = make(functools.partial(identity_v0.parallel_env, action_type="box"), value_normalization=False)
    ro = trainer.collect_rollout()
    assert ro.actions[0].dtype == torch.float32 and ro.actions[0].shape == (16, 2, 2, 2)
    actions = trainer.act(trainer.collector.current)
    assert all((a >= -1).all() and (a <= 1).all() for a in actions)
    stats = trainer.update(ro)
    assert all(math.isfinite(v) for v in stats.value_loss)


def test_a_slice_of_copies_reproduces_the_same_rows_of_the_full_rollout():
    """Each copy's env seeds and action noise depend only on its global index, not on the batch it is in."""
    full = make(variable_agents_v0.parallel_env, num_envs=4, rollout_steps=12, seed=5)
    ro_full = full.collect_rollout()
    env = PettingZooJointEnv(variable_agents_v0.parallel_env, num_envs=2, seed=5, first_copy=2)
    # Evaluate copies 2..3 at their rows of a 4-copy batch, as the multi-process collectors' workers do.
    part = LocalCollector(env, seed=5, first_copy=2, batch_rows=4)
    ro_part = part.collect(full.joint_policy, 12)
    assert torch.equal(ro_part.actions[0], ro_full.actions[0][:, 2:])
    assert torch.equal(ro_part.rewards, ro_full.rewards[:, 2:])
    assert torch.equal(ro_part.log_probs, ro_full.log_probs[:, 2:])
    assert torch.equal(ro_part.values, ro_full.values[:, 2:])
