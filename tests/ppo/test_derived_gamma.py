"""The discount derived from the env's episode length: where the length is found, the rule, and how the value
travels (the trainer's config and reasons, config.toml, an explicit value winning)."""

import functools

import pytest
import torch
from pettingzoo.utils.conversions import aec_to_parallel, parallel_to_aec
from pettingzoo.utils.wrappers import BaseParallelWrapper

from marljoint import (
    JointMultiAgentTrainer,
    JointTrainerConfig,
    PettingZooJointEnv,
    episode_limit,
    gamma_for_episodes,
)
from marljoint.policies import ActorCritic
from marljoint.ppo.derived import derive_settings
from marljoint_envs import bucket_brigade_v0, kuhn_poker_v0, mock_v0


class _Wrapped(BaseParallelWrapper):
    """A wrapper that states nothing itself: the limit must be read through it."""


class _Refusing(BaseParallelWrapper):
    """A wrapper whose ``max_cycles`` raises when read (a closed env, a property that needs a reset)."""

    @property
    def max_cycles(self):
        raise RuntimeError("not available")


def _mock(max_cycles=None):
    return mock_v0.parallel_env(num_agents=2, max_cycles=max_cycles)


@pytest.mark.parametrize(
    ("limit", "gamma"), [(1, 0.9), (10, 0.9), (20, 0.95), (25, 0.96), (30, 0.9667), (100, 0.99), (10_000, 0.99)]
)
def test_the_rule_is_one_minus_one_over_the_length_within_its_range(limit, gamma):
    assert gamma_for_episodes(limit) == gamma


def test_no_stated_length_gives_the_long_horizon_and_bad_lengths_are_refused():
    assert gamma_for_episodes(None) == 0.99
    for bad in (0, -3, 2.5, True, "25"):
        with pytest.raises(ValueError, match=r"episode_limit must be a positive integer or None, got"):
            gamma_for_episodes(bad)


def test_the_length_is_found_through_wrappers_and_conversions():
    assert episode_limit(_mock(7)) == 7
    assert episode_limit(_Wrapped(_mock(7))) == 7
    assert episode_limit(parallel_to_aec(_mock(9))) == 9
    assert episode_limit(aec_to_parallel(parallel_to_aec(_mock(11)))) == 11
    assert episode_limit(bucket_brigade_v0.parallel_env(scenario="easy", max_nights=40)) == 40
    # Nothing stated, or nothing readable: unknown.
    assert episode_limit(_mock()) is None
    assert episode_limit(kuhn_poker_v0.env()) is None
    assert episode_limit(_Refusing(_mock())) is None


def test_the_joint_spec_carries_the_length():
    assert PettingZooJointEnv(functools.partial(_mock, 25), num_envs=2).spec.episode_limit == 25
    assert PettingZooJointEnv(_mock, num_envs=1).spec.episode_limit is None


def test_the_trainer_resolves_gamma_with_its_reason_and_an_explicit_value_wins():
    env = PettingZooJointEnv(functools.partial(_mock, 25), num_envs=2, seed=0)
    trainer = JointMultiAgentTrainer.from_env(env, JointTrainerConfig(num_envs=2))
    assert trainer.config.gamma == 0.96
    assert trainer.derived["gamma"].startswith("0.96: 1 - 1/25 for 25-step episodes")
    trainer = JointMultiAgentTrainer.from_env(env, JointTrainerConfig(num_envs=2, gamma=0.5))
    assert trainer.config.gamma == 0.5 and "gamma" not in trainer.derived
    config, why = derive_settings(PettingZooJointEnv(_mock, num_envs=1).spec, JointTrainerConfig(num_envs=1))
    assert config.gamma == 0.99 and why["gamma"] == "0.99: the env states no episode length (max_cycles)"


def test_given_policies_get_the_same_rule():
    env = PettingZooJointEnv(functools.partial(_mock, 20), num_envs=1, seed=0)
    policies = [ActorCritic(env.spec.observations[i], env.spec.actions[i], 1, False, (8,)) for i in range(2)]
    optimizers = [torch.optim.Adam(p.parameters()) for p in policies]
    trainer = JointMultiAgentTrainer(env, JointTrainerConfig(num_envs=1), policies, optimizers)
    assert trainer.config.gamma == 0.95 and "gamma" in trainer.derived


def test_the_derived_value_trains_exactly_as_the_same_value_given():
    def run(gamma):
        config = JointTrainerConfig(num_envs=2, rollout_steps=16, minibatch_size=16, n_epochs=1, seed=3, gamma=gamma)
        env = PettingZooJointEnv(functools.partial(_mock, 25), num_envs=2, seed=3)
        trainer = JointMultiAgentTrainer.from_env(env, config)
        trainer.train(64, keep_history=False)
        return [p.detach().clone() for policy in trainer.policies for p in policy.parameters()]

    derived, given, other = run(None), run(0.96), run(0.99)
    assert all(torch.equal(a, b) for a, b in zip(derived, given))
    assert not all(torch.equal(a, b) for a, b in zip(derived, other))


def test_config_toml_holds_the_derived_gamma_and_a_resumed_run_keeps_it(tiny_run):
    spec, text, saved = tiny_run("marljoint_envs.mock_v0", {"num_agents": 2, "max_cycles": 20})
    assert spec.trainer.gamma is None
    assert "# derived from the env (0.95: 1 - 1/20 for 20-step episodes" in text
    assert "\ngamma = 0.95\n" in text
    assert saved.gamma == 0.95


def test_bucket_brigade_states_its_nights_as_max_cycles_and_setting_it_is_checked():
    env = bucket_brigade_v0.parallel_env(scenario="easy")
    assert env.max_cycles == env.params.max_nights == 100
    env.max_cycles = 30  # what PettingZoo's API test does
    assert env.params.max_nights == 30 and episode_limit(env) == 30
    with pytest.raises(ValueError, match="min_nights"):
        env.max_cycles = env.params.min_nights - 1
