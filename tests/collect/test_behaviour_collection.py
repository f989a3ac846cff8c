"""A behaviour policy is handed to the collector with each rollout: every backend plays it, the policy holds none."""

from __future__ import annotations

import torch
from rollout_checks import assert_same_rollout

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.collect import CollectionConfig, LocalCollector
from marljoint.policies import UniformMixture
from marljoint_envs import kuhn_poker_v0


def _trainer(epsilon: float, **changes) -> JointMultiAgentTrainer:
    config = JointTrainerConfig(
        num_envs=4, rollout_steps=8, minibatch_size=16, n_epochs=1, seed=2, uniform_mix=epsilon, **changes
    )
    env = config.collection.make_env(kuhn_poker_v0.env, config.num_envs, config.seed)
    return JointMultiAgentTrainer.from_env(env, config)


def test_a_collector_plays_the_behaviour_it_is_handed_and_the_policy_holds_none() -> None:
    trainer = _trainer(0.4)
    assert trainer.behaviour == UniformMixture(0.4) and not hasattr(trainer.joint_policy, "uniform_mix")
    expected = trainer.collect_rollout()
    expected.carried = expected.deferred = None  # linking rollouts is the trainer's; the rows are the same
    mixed = LocalCollector(PettingZooJointEnv(kuhn_poker_v0.env, num_envs=4, seed=2), seed=2)
    assert_same_rollout(expected, mixed.collect(trainer.joint_policy, 8, behaviour=UniformMixture(0.4)))
    plain = LocalCollector(PettingZooJointEnv(kuhn_poker_v0.env, num_envs=4, seed=2), seed=2)
    own = plain.collect(trainer.joint_policy, 8)
    assert not torch.equal(own.log_probs, expected.log_probs)  # without it the collector plays the policy


def test_no_mixture_means_no_behaviour_and_plain_ppo() -> None:
    trainer = _trainer(0.0)
    assert trainer.behaviour is None and not trainer.learner.decoupled


def test_overlapped_workers_play_the_behaviour_handed_to_the_collector() -> None:
    local = _trainer(0.3)
    lagged = _trainer(0.3, collection=CollectionConfig("subprocess", workers=2, policy_lag=1))
    try:
        assert lagged.learner.decoupled
        # The first two lagged rollouts are both played with the initial weights.
        for _ in range(2):
            want, got = local.collect_rollout(), lagged.collect_rollout()
            assert torch.equal(want.actions[0], got.actions[0]) and torch.equal(want.log_probs, got.log_probs)
    finally:
        lagged.close()
        lagged.env.close()
