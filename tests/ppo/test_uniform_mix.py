"""``uniform_mix``: rollouts played by (1 − ε)·π + ε·uniform, the learner correcting each agent's own rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mpe2 import simple_spread_v3

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, make_joint_env
from marljoint.collect import CollectionConfig
from marljoint.collect.acting import HostActing, _UnitActing
from marljoint.env.spaces import ActionLayout, ObservationLayout
from marljoint.policies import ActorCritic, Categorical, FactoredCategorical, UniformMixture
from marljoint_envs import kuhn_poker_v0, mock_v0

FLAT = ObservationLayout("flat", (7,), np.dtype(np.float32))
LAYOUTS = {
    "discrete": ActionLayout("discrete", (5,), ()),
    "multidiscrete-uneven": ActionLayout("multidiscrete", (3, 2, 4), (3,)),
}


def _mixture(probs: torch.Tensor, allowed: torch.Tensor, epsilon: float) -> torch.Tensor:
    return (1 - epsilon) * probs + epsilon * allowed.double() / allowed.sum(-1, keepdim=True)


def test_the_mixture_puts_the_uniform_share_on_the_allowed_choices_only() -> None:
    logits = torch.tensor([[2.0, 0.5, -1.0, 0.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False, True], [False, False, False, False]])
    dist = Categorical(logits, mask)
    mixed = dist.mixed_with_uniform(0.25)
    probs = dist.head_probs()[0]
    got = torch.stack([mixed.log_prob(torch.full((2,), a)).exp() for a in range(4)], -1)
    # Row 1 has no allowed choice: it is left unmasked, so the uniform share covers all four.
    allowed = torch.tensor([[True, True, False, True], [True, True, True, True]])
    torch.testing.assert_close(got, _mixture(probs, allowed, 0.25))
    assert got[0, 2] == 0.0
    torch.testing.assert_close(got.sum(-1), torch.ones(2, dtype=torch.float64))
    # The policy's own distribution is untouched.
    torch.testing.assert_close(dist.head_probs()[0], probs)


def test_the_mixture_of_uneven_heads_mixes_each_head_over_its_own_choices() -> None:
    nvec = (3, 2, 4)
    logits = torch.randn(5, sum(nvec), generator=torch.Generator().manual_seed(0))
    mask = torch.rand(5, sum(nvec), generator=torch.Generator().manual_seed(1)) < 0.7
    dist = FactoredCategorical(logits, nvec, mask)
    mixed = dist.mixed_with_uniform(0.4)
    for head, (own, mix) in enumerate(zip(dist.head_probs(), mixed.head_probs())):
        start = sum(nvec[:head])
        allowed = mask[:, start : start + nvec[head]]
        allowed = allowed | ~allowed.any(-1, keepdim=True)
        torch.testing.assert_close(mix, _mixture(own.double(), allowed, 0.4).float())
    actions = mixed.sample(torch.Generator().manual_seed(2))
    torch.testing.assert_close(
        mixed.log_prob(actions),
        sum(torch.log(p.gather(-1, actions[:, [k]]))[:, 0] for k, p in enumerate(mixed.head_probs())),
    )


def test_sampling_the_mixture_follows_its_probabilities() -> None:
    dist = Categorical(
        torch.tensor([8.0, 0.0, 0.0]).expand(40_000, 3), torch.tensor([True, True, False]).expand(40_000, 3)
    )
    actions = dist.mixed_with_uniform(0.2).sample(torch.Generator().manual_seed(3))
    counts = torch.bincount(actions, minlength=3).double() / len(actions)
    p = dist.head_probs()[0][0].double()
    expected = 0.8 * p + 0.2 * torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
    torch.testing.assert_close(counts, expected, atol=0.01, rtol=0.0)
    assert counts[2] == 0.0


def test_a_zero_mixture_is_the_distribution_itself() -> None:
    dist = Categorical(torch.randn(4, 3, generator=torch.Generator().manual_seed(4)))
    actions = torch.tensor([0, 1, 2, 1])
    assert torch.equal(dist.mixed_with_uniform(0.0).log_prob(actions), dist.log_prob(actions))


@pytest.mark.parametrize("epsilon", [-0.1, 1.0, 1.5])
def test_a_mixture_outside_zero_to_one_is_refused(epsilon: float) -> None:
    with pytest.raises(ValueError, match=r"epsilon must be in \[0, 1\)"):
        Categorical(torch.zeros(2, 3)).mixed_with_uniform(epsilon)


@pytest.mark.parametrize("kind", list(LAYOUTS))
@pytest.mark.parametrize("masked", [False, True])
def test_unit_acting_samples_the_mixture_as_the_torch_distribution_does(kind: str, masked: bool) -> None:
    layout, n, rows = LAYOUTS[kind], 3, 8
    policy = ActorCritic(FLAT, layout, n, True, (16,), generator=torch.Generator().manual_seed(1))
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(rows, n, 7)).astype(np.float32)
    mask = (rng.random((rows, n, layout.mask_size)) < 0.6) if masked else None
    unit = _UnitActing(policy, 0, np.arange(n), np.arange(n), 0, rows, rows, None, behaviour=UniformMixture(0.3))
    noise = torch.rand(unit.noise_shape)
    with torch.no_grad():
        out = policy(torch.from_numpy(obs))
        dist = policy.distribution(out.head, None if mask is None else torch.from_numpy(mask)).mixed_with_uniform(0.3)
        expected = dist.sample_from_noise(noise.clone())
        actions, log_probs, _ = unit.act(obs, None, mask, noise.numpy())
    np.testing.assert_array_equal(actions, expected.numpy())
    np.testing.assert_allclose(log_probs, dist.log_prob(expected).numpy(), rtol=1e-5, atol=1e-5)


def _trainer(env_fn, epsilon: float, **changes) -> JointMultiAgentTrainer:
    config = JointTrainerConfig(
        num_envs=4, rollout_steps=16, minibatch_size=32, n_epochs=2, seed=7, uniform_mix=epsilon, **changes
    )
    return JointMultiAgentTrainer.from_env(make_joint_env(env_fn, config.num_envs, config.seed), config)


def test_rollouts_store_the_behaviour_policys_log_probs_and_the_update_is_decoupled() -> None:
    trainer = _trainer(kuhn_poker_v0.env, 0.3, share_parameters=False)
    assert trainer.learner.decoupled and trainer.behaviour == UniformMixture(0.3)
    trainer.update(trainer.collect_rollout())  # move the policy away from its uniform start
    rollout = trainer.collect_rollout()
    policy = trainer.joint_policy
    checked, gaps = 0, []
    with torch.no_grad():
        for t in range(rollout.steps):
            masks = [None if m is None else m[t] for m in rollout.action_masks]
            outputs = policy.forward([o[t] for o in rollout.obs], rollout.alive[t])
            own, _, _ = policy.evaluate(outputs, [a[t] for a in rollout.actions], masks)
            for k, (network, out) in enumerate(zip(policy.networks, outputs)):
                dist = network.distribution(out.head, policy.network_masks(k, masks))
                probs = dist.head_probs()[0]  # [E, 1, 3]
                allowed = policy.network_masks(k, masks)
                mixture = _mixture(probs.double(), allowed, 0.3)
                agent = policy.slots[k].agents[0]
                action = rollout.actions[0][t][:, agent]
                expected = mixture[:, 0].gather(-1, action[:, None])[:, 0].log()
                moved = rollout.acting[t][:, agent] & rollout.alive[t][:, agent]
                stored = rollout.log_probs[t][moved, agent].double()
                torch.testing.assert_close(stored, expected[moved], atol=1e-5, rtol=0)
                gaps.append((stored - own[moved, agent].double()).abs())
                checked += int(moved.sum())
    assert checked > 20
    assert torch.cat(gaps).max() > 1e-3  # π is no longer uniform: the stored log-probs are the mixture's, not π's


def test_acting_for_the_user_stays_the_policy_itself() -> None:
    trainer = _trainer(kuhn_poker_v0.env, 0.5)
    obs = make_joint_env(kuhn_poker_v0.env, 4, 0).reset(seed=0)
    with torch.no_grad():
        outputs = trainer.joint_policy.forward([torch.from_numpy(o) for o in obs.obs], torch.from_numpy(obs.alive))
        masks = [None if m is None else torch.from_numpy(m) for m in obs.action_masks]
        _, plain = trainer.joint_policy.sample(outputs, masks, generator=torch.Generator().manual_seed(0))
        _, mixed = trainer.joint_policy.sample(
            outputs, masks, generator=torch.Generator().manual_seed(0), behaviour=trainer.behaviour
        )
    # Without the argument sample() draws from π (the trainer hands its behaviour to the collector only).
    assert not torch.equal(plain, mixed)


def test_worker_processes_collect_the_same_mixture_rollouts_as_one_process() -> None:
    env_fn = kuhn_poker_v0.env
    local = _trainer(env_fn, 0.2, share_parameters=False)
    config = JointTrainerConfig(
        num_envs=4,
        rollout_steps=16,
        minibatch_size=32,
        n_epochs=2,
        seed=7,
        uniform_mix=0.2,
        share_parameters=False,
        collection=CollectionConfig("subprocess", workers=2),
    )
    env = config.collection.make_env(env_fn, config.num_envs, config.seed)
    remote = JointMultiAgentTrainer.from_env(env, config)
    try:
        for _ in range(2):
            a, b = local.collect_rollout(), remote.collect_rollout()
            assert torch.equal(a.actions[0], b.actions[0])
            assert torch.equal(a.log_probs, b.log_probs)
            local.update(a)
            remote.update(b)
    finally:
        remote.close()


def test_host_and_torch_acting_collect_the_same_mixture_rollouts(monkeypatch: pytest.MonkeyPatch) -> None:
    env_fn = lambda: mock_v0.parallel_env(num_agents=3, nvec=(3, 2, 4), max_cycles=7)  # noqa: E731
    host = _trainer(env_fn, 0.25).collect_rollout()
    monkeypatch.setattr(HostActing, "build", staticmethod(lambda policy, rollout, padding=None, behaviour=None: None))
    reference = _trainer(env_fn, 0.25).collect_rollout()
    assert torch.equal(host.actions[0], reference.actions[0])
    torch.testing.assert_close(host.log_probs, reference.log_probs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("value", [1.0, -0.05, 2, True, "0.1"])
def test_a_uniform_mix_outside_zero_to_one_is_refused(value) -> None:
    with pytest.raises(ValueError, match="uniform_mix must be"):
        JointTrainerConfig(uniform_mix=value)


def test_a_uniform_mix_for_box_actions_is_refused_naming_the_agent() -> None:
    env_fn = lambda: simple_spread_v3.parallel_env(max_cycles=5, continuous_actions=True)  # noqa: E731
    with pytest.raises(ValueError, match=r"agent 'agent_0' has a Box action space .*set uniform_mix = 0"):
        _trainer(env_fn, 0.1)


def test_a_recurrent_policy_collects_from_the_mixture_and_trains_on_its_own_rows() -> None:
    def rollout(epsilon: float):
        trainer = _trainer(kuhn_poker_v0.env, epsilon, recurrent="gru", rnn_hidden_size=8, hidden_sizes=(8,))
        return trainer, trainer.collect_rollout()

    mixed_trainer, mixed = rollout(0.4)
    _, plain = rollout(0.0)
    assert mixed_trainer.learner.decoupled
    moved = mixed.acting & mixed.alive
    # The same seed and noise: where both played the same action, the stored log-probs are the mixture's, not π's.
    same = moved & (mixed.actions[0] == plain.actions[0])
    assert same.any() and not torch.allclose(mixed.log_probs[same], plain.log_probs[same])
    stats = mixed_trainer.update(mixed)
    assert all(torch.isfinite(p).all() for p in mixed_trainer.joint_policy.networks[0].parameters())
    assert stats is not None
