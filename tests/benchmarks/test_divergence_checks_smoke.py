"""Keeps benchmarks/divergence_checks.py runnable: both timings are taken, and the checks are put back after."""

from _benchmark_module import benchmark_module

import marljoint.ppo.learner as learner_module
from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint_envs import mock_v0


def test_updates_are_timed_with_and_without_the_checks_and_the_checks_restored():
    checks = (learner_module.all_finite, learner_module.non_finite_parameter)
    config = JointTrainerConfig(num_envs=2, rollout_steps=8, minibatch_size=8, n_epochs=1, hidden_sizes=[8])
    trainer = JointMultiAgentTrainer.from_env(PettingZooJointEnv(mock_v0.parallel_env, num_envs=2, seed=0), config)
    with benchmark_module("divergence_checks") as module:
        times, steps = module._time_updates(trainer, rounds=2)
        per_minibatch, per_update = module._time_checks(trainer, repeats=20)
    assert steps == 2 and {name: len(values) for name, values in times.items()} == {"with checks": 2, "without": 2}
    assert per_minibatch > 0 and per_update > 0
    assert (learner_module.all_finite, learner_module.non_finite_parameter) == checks
    trainer.close()
