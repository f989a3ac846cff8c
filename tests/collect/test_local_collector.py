"""LocalCollector: the in-process collector the trainer uses, usable with any JointPolicy."""

import torch
from rollout_checks import assert_same_rollout

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.collect import JointRollout, LocalCollector
from marljoint_envs import kuhn_poker_v0


def _trainer():
    config = JointTrainerConfig(num_envs=4, rollout_steps=6, minibatch_size=12, n_epochs=1, seed=2)
    return JointMultiAgentTrainer.from_env(PettingZooJointEnv(kuhn_poker_v0.env, num_envs=4, seed=2), config)


def test_a_collector_on_a_joint_policy_plays_the_trainers_rollouts():
    trainer, other = _trainer(), _trainer()
    collector = LocalCollector(other.env, trainer.joint_policy, seed=2)
    storage = JointRollout.allocate(trainer.spec, 6, 4)
    for _ in range(3):
        expected = trainer.collect_rollout()
        collector.collect_into(storage)
        expected.carried = expected.deferred = None  # linking rollouts is the trainer's; the rows are the same
        assert_same_rollout(expected, storage)
    assert collector.state is not None and len(collector.copy_generators) == 4
    assert all(isinstance(g, torch.Generator) for g in collector.copy_generators)
