"""What the update steps, and by how much: separate actor and critic, the split critic, per-network clipping,
the learning-rate schedule and the value normaliser's floor."""

import math

import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.policies import ActorCritic
from marljoint.policies.normalizer import RunningNormalizer
from marljoint_envs import mock_v0, variable_agents_v0


def _trainer(env_fn=mock_v0.parallel_env, **cfg):
    config = JointTrainerConfig(**{"num_envs": 2, "rollout_steps": 16, "minibatch_size": 16, "n_epochs": 2, **cfg})
    env = PettingZooJointEnv(env_fn, num_envs=config.num_envs, seed=config.seed)
    return JointMultiAgentTrainer.from_env(env, config)


def _snapshot(params):
    return [p.detach().clone() for p in params]


def _value_parameters(policy, obs, critic_obs=None):
    """The parameters the values depend on (non-zero gradient of their sum), found by autograd."""
    policy.zero_grad()
    policy.value(obs, critic_obs).sum().backward()
    params = [p for p in policy.parameters() if p.grad is not None and bool(p.grad.abs().sum() > 0)]
    policy.zero_grad()
    return params


@pytest.mark.parametrize(
    "cfg",
    [{}, {"share_parameters": False}, {"centralized_critic": True}],
    ids=["shared-agents", "per-agent", "centralised"],
)
def test_the_value_loss_never_moves_the_actor(cfg):
    # Same seed and rollout, only the value loss's weight differs: the actors must end bit-identical, the
    # critics not.
    results = []
    for vf_coef in (0.0, 5.0):
        trainer = _trainer(vf_coef=vf_coef, **cfg)
        trainer.update(trainer.collect_rollout())
        policy = trainer.policies[0]
        results.append((_snapshot(policy.actor_parameters()), _snapshot(policy.critic_parameters())))
    (actor_a, critic_a), (actor_b, critic_b) = results
    assert all(torch.equal(a, b) for a, b in zip(actor_a, actor_b))
    assert not all(torch.equal(a, b) for a, b in zip(critic_a, critic_b))


def test_actor_and_critic_are_separate_networks_by_default_and_a_shared_trunk_is_an_option():
    trainer = _trainer()
    policy = trainer.policies[0]
    group = trainer.spec.groups[0]
    obs = torch.randn(4, group.size, *group.observation.shape)
    actor_ids = {id(p) for p in policy.actor_parameters()}
    assert not any(id(p) in actor_ids for p in _value_parameters(policy, obs))
    shared = ActorCritic(
        group.observation, group.action, num_agents=group.size, share_parameters=True, share_trunk=True
    )
    shared_actor = {id(p) for p in shared.actor_parameters()}
    assert any(id(p) in shared_actor for p in _value_parameters(shared, obs))
    assert [id(p) for p in shared.critic_parameters()] == [id(p) for p in shared.value_head.parameters()]


@pytest.mark.parametrize("cfg", [{}, {"share_parameters": False}, {"centralized_critic": True}])
def test_critic_lr_steps_every_parameter_the_values_depend_on(cfg):
    # Actor at a learning rate of 1e-7, critic at 1e-2: Adam moves each parameter by about its learning rate per
    # step, so every parameter the values depend on must move by about 1e-2 and the actor's by far less.
    trainer = _trainer(learning_rate=1e-7, critic_lr=1e-2, **cfg)
    policy = trainer.policies[0]
    rollout = trainer.collect_rollout()
    group = trainer.spec.groups[0]
    obs = rollout.obs[0][0]
    critic_obs = None
    if trainer.config.centralized_critic:
        critic_obs = trainer.joint_policy.critic_state([o[0] for o in rollout.obs], rollout.alive[0])
        critic_obs = critic_obs.unsqueeze(1).expand(-1, group.size, -1)
    value_params = _value_parameters(policy, obs, critic_obs)
    before = {id(p): p.detach().clone() for p in policy.parameters()}
    trainer.update(rollout)
    for p in value_params:
        assert float((p.detach() - before[id(p)]).abs().max()) > 1e-3, tuple(p.shape)
    for p in policy.actor_parameters():
        assert float((p.detach() - before[id(p)]).abs().max()) < 1e-5, tuple(p.shape)


def test_critic_lr_with_a_shared_trunk_is_rejected():
    with pytest.raises(ValueError, match="share_trunk=True gives the critic no trunk of its own"):
        JointTrainerConfig(critic_lr=1e-3, share_trunk=True)
    JointTrainerConfig(critic_lr=1e-3, share_trunk=True, centralized_critic=True)  # its critic is separate


def test_grad_norms_are_logged_per_network_with_what_each_network_serves():
    shared = _trainer()
    stats = shared.update(shared.collect_rollout())
    name = "+".join(shared.spec.agents)
    assert sorted(stats.grad_norm) == [f"actor/{name}", f"critic/{name}"]
    per_agent = _trainer(share_parameters=False)
    stats = per_agent.update(per_agent.collect_rollout())
    assert sorted(stats.grad_norm) == sorted(f"{p}/{a}" for p in ("actor", "critic") for a in per_agent.spec.agents)
    trunk = _trainer(share_trunk=True)
    stats = trunk.update(trunk.collect_rollout())
    assert sorted(stats.grad_norm) == [f"actor_critic/{name}"]
    assert all(v > 0 and math.isfinite(v) for v in stats.grad_norm.values())
    metrics = trunk.iteration_metrics(trunk.collect_rollout(), stats, 1.0)
    assert metrics[f"grad_norm/actor_critic/{name}"] == stats.grad_norm[f"actor_critic/{name}"]


def test_a_shared_network_is_clipped_once_on_the_gradient_summed_over_its_agents():
    # The clip acts on the gradient itself: after it, the gradient of the shared critic (summed over the agents)
    # has norm exactly the cap, one clip for the whole network.
    trainer = _trainer(max_grad_norm=1e-4)
    unit = trainer.learner.units[0]
    rollout = trainer.collect_rollout()
    trainer.update(rollout)  # logged norms are far above the cap
    group_obs = [o[0] for o in rollout.obs]
    out = trainer.joint_policy.forward(group_obs, rollout.alive[0])
    out[0].values.sum().backward()
    norms = unit.clip(1e-4)
    grad = torch.cat([p.grad.flatten() for p in unit.critic_params if p.grad is not None])
    assert float(norms["critic"][0]) > 1e-4
    assert float(grad.norm()) == pytest.approx(1e-4, rel=1e-3)


def test_anneal_lr_scales_each_optimizer_from_its_own_rate():
    env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=2, seed=0)
    cfg = JointTrainerConfig(num_envs=2, rollout_steps=8, minibatch_size=16, n_epochs=1, anneal_lr=True)
    group = env.spec.groups[0]
    policies = [ActorCritic(group.observation, group.action, num_agents=1, share_parameters=True) for _ in range(2)]
    optimizers = [torch.optim.Adam(policies[0].parameters(), lr=1e-2), torch.optim.Adam(policies[1].parameters())]
    trainer = JointMultiAgentTrainer(env, cfg, policies, optimizers)
    trainer.train(2 * 8 * 2)  # two iterations: the second runs at scale 1 - 1/2
    assert optimizers[0].param_groups[0]["lr"] == pytest.approx(5e-3)
    assert optimizers[1].param_groups[0]["lr"] == pytest.approx(5e-4)  # Adam's default 1e-3


def test_anneal_lr_continues_across_a_resumed_train_call():
    steps = 2 * 8
    cfg = {"anneal_lr": True, "rollout_steps": 8}

    def fresh():
        return _trainer(**cfg)

    whole = fresh()
    lrs_whole = [m["learning_rate"] for m in whole.train(4 * steps)]
    first = fresh()  # the same run, stopped after 2 of its 4 iterations (as by a crash), then resumed
    lrs = [m["learning_rate"] for m in first.train(4 * steps, callback=lambda m: m["iteration"] < 2)]
    resumed = fresh()
    resumed.load_state_dict(first.state_dict())
    resumed.load_env_state(first.env_state())
    lrs += [m["learning_rate"] for m in resumed.train(2 * steps)]
    assert lrs == pytest.approx(lrs_whole)
    assert lrs_whole == pytest.approx([3e-4 * s for s in (1.0, 0.75, 0.5, 0.25)])
    for a, b in zip(whole.policies[0].parameters(), resumed.policies[0].parameters()):
        assert torch.equal(a, b)


def test_anneal_learning_rate_needs_an_end_after_the_current_iteration():
    trainer = _trainer()
    trainer.iteration = 3
    with pytest.raises(ValueError, match="end_iteration=3 must be after the current iteration 3"):
        trainer.anneal_learning_rate(3)
    assert trainer.anneal_learning_rate(4) == pytest.approx(0.25)


def test_value_normaliser_floor_bounds_the_first_return_after_a_long_constant_run():
    norm = RunningNormalizer(1)
    norm.update(torch.zeros(51_200, 1), torch.ones(51_200, 1, dtype=torch.bool))
    # The floor is MAPPO's: var >= 1e-2, so one unit of return normalises to at most 1 / sqrt(1e-2) = 10.
    assert float(norm.normalize(torch.ones(1))) <= 10.0 + 1e-9
    assert float(norm.normalize(torch.ones(1))) == pytest.approx(10.0)


def test_value_normaliser_rejects_a_bad_floor():
    with pytest.raises(ValueError, match="min_var must be a positive finite number"):
        RunningNormalizer(2, min_var=0.0)


def test_variable_agent_envs_still_train_with_separate_networks():
    trainer = _trainer(variable_agents_v0.parallel_env, share_parameters=False)
    stats = trainer.update(trainer.collect_rollout())
    assert all(math.isfinite(v) for v in stats.value_loss)


def test_a_checkpoint_of_the_other_critic_layout_is_refused_with_the_fix():
    shared = _trainer(share_trunk=True)
    state = shared.state_dict()
    with pytest.raises(ValueError, match=r"reads the actor's trunk, this trainer's do not; .*share_trunk=True"):
        _trainer().load_state_dict(state)
    with pytest.raises(ValueError, match="have a critic trunk of its own, .*share_trunk=False"):
        _trainer(share_trunk=True).load_state_dict(_trainer().state_dict())
    _trainer(share_trunk=True).load_state_dict(shared.state_dict())


def test_iterate_is_one_loop_body_and_needs_the_end_with_anneal_lr():
    trainer = _trainer()
    rollout, stats, seconds = trainer.iterate()
    assert trainer.iteration == 1 and stats.num_mb_steps > 0 and seconds > 0
    seen = []
    trainer.iterate(active=lambda ro: seen.append(ro) or [True, True])
    assert seen and trainer.iteration == 2
    annealed = _trainer(anneal_lr=True)
    with pytest.raises(ValueError, match="iterate\\(\\) needs end_iteration"):
        annealed.iterate()
    annealed.iterate(4)
    assert annealed.policies[0] is not None and annealed.iteration == 1


def test_advantage_std_is_each_agents_spread_of_advantages_before_normalisation():
    trainer = _trainer(share_parameters=False, normalize_advantages=True)
    rollout = trainer.collect_rollout()
    advantages, _ = trainer.learner._gae(rollout.extended())
    stats = trainer.update(rollout)
    valid = rollout.valid
    for i, agent in enumerate(trainer.spec.agents):
        rows = advantages[..., i][valid[..., i]].double()
        expected = float(((rows - rows.mean()) ** 2).mean().sqrt())
        assert expected > 0
        assert stats.advantage_std[i] == pytest.approx(expected, rel=1e-5), agent
    metrics = trainer.iteration_metrics(rollout, stats, 1.0)
    assert [metrics[f"advantage_std/{a}"] for a in trainer.spec.agents] == stats.advantage_std
