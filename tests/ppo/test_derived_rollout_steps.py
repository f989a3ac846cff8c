"""The rollout length derived from the env's episode length: the rule, how the value travels (the trainer's config
and reasons, config.toml, an explicit value winning), and what reading it before it is known says."""

import functools

import pytest
import torch

from marljoint import (
    JointMultiAgentTrainer,
    JointTrainerConfig,
    PettingZooJointEnv,
    rollout_steps_for_episodes,
)
from marljoint.ppo.derived import ROLLOUT_STEPS_RANGE, derive_settings
from marljoint_envs import mock_v0


def _mock(max_cycles=None):
    return mock_v0.parallel_env(num_agents=2, max_cycles=max_cycles)


@pytest.mark.parametrize(
    ("limit", "steps"),
    [(1, 64), (25, 64), (64, 64), (127, 64), (128, 128), (255, 128), (256, 256), (300, 256), (900, 256), (10**6, 256)],
)
def test_the_rule_is_the_largest_power_of_two_within_an_episode_kept_in_its_range(limit, steps):
    assert rollout_steps_for_episodes(limit) == steps
    low, high = ROLLOUT_STEPS_RANGE
    assert low <= steps <= high and steps & (steps - 1) == 0


def test_no_stated_length_gives_the_short_rollout_and_bad_lengths_are_refused():
    assert rollout_steps_for_episodes(None) == ROLLOUT_STEPS_RANGE[0]
    for bad in (0, -3, 2.5, True, "300"):
        with pytest.raises(ValueError, match=r"episode_limit must be a positive integer or None, got"):
            rollout_steps_for_episodes(bad)


def test_the_trainer_resolves_the_rollout_length_with_its_reason_and_an_explicit_value_wins():
    env = PettingZooJointEnv(functools.partial(_mock, 300), num_envs=2, seed=0)
    trainer = JointMultiAgentTrainer.from_env(env, JointTrainerConfig(num_envs=2, rollout_steps=None))
    assert trainer.config.rollout_steps == 256
    assert trainer.derived["rollout_steps"].startswith("256: the largest power of two within one 300-step episode")
    trainer = JointMultiAgentTrainer.from_env(env, JointTrainerConfig(num_envs=2, rollout_steps=32))
    assert trainer.config.rollout_steps == 32 and "rollout_steps" not in trainer.derived
    config, why = derive_settings(
        PettingZooJointEnv(_mock, num_envs=1).spec, JointTrainerConfig(num_envs=1, rollout_steps=None)
    )
    assert config.rollout_steps == 64 and why["rollout_steps"] == "64: the env states no episode length (max_cycles)"


def test_the_library_default_stays_a_number():
    # Python users who never set it keep JointTrainerConfig's 128; only None asks for the rule.
    env = PettingZooJointEnv(functools.partial(_mock, 900), num_envs=1, seed=0)
    trainer = JointMultiAgentTrainer.from_env(env, JointTrainerConfig(num_envs=1))
    assert trainer.config.rollout_steps == 128 and "rollout_steps" not in trainer.derived


def test_an_unresolved_length_is_refused_where_it_is_read_and_bptt_is_checked_once_resolved():
    config = JointTrainerConfig(num_envs=2, rollout_steps=None, bptt_length=100, recurrent="gru")
    with pytest.raises(ValueError, match=r"rollout_steps is None: it is derived from the env's episode length"):
        _ = config.batch_rows
    with pytest.raises(ValueError, match=r"rollout_steps is None: it is derived"):
        _ = JointTrainerConfig(num_envs=2, rollout_steps=None).chunk_length
    with pytest.raises(ValueError, match=r"bptt_length must be an integer from 1 to rollout_steps \(64\)"):
        derive_settings(PettingZooJointEnv(functools.partial(_mock, 25), num_envs=2).spec, config)
    with pytest.raises(ValueError, match=r"rollout_steps must be a positive integer"):
        JointTrainerConfig(rollout_steps=0)


def test_the_derived_value_trains_exactly_as_the_same_value_given():
    def run(rollout_steps):
        config = JointTrainerConfig(
            num_envs=2, rollout_steps=rollout_steps, minibatch_size=64, n_epochs=1, seed=3, max_minibatches_per_epoch=1
        )
        env = PettingZooJointEnv(functools.partial(_mock, 130), num_envs=2, seed=3)
        trainer = JointMultiAgentTrainer.from_env(env, config)
        trainer.train(512, keep_history=False)
        return [p.detach().clone() for policy in trainer.policies for p in policy.parameters()]

    derived, given, other = run(None), run(128), run(64)
    assert all(torch.equal(a, b) for a, b in zip(derived, given))
    assert not all(torch.equal(a, b) for a, b in zip(derived, other))


def test_config_toml_holds_the_derived_length_and_a_resumed_run_keeps_it(tmp_path):
    from marljoint.train import RunSpec, iterations_for, load_run_spec, train_run

    spec = RunSpec.from_dict(
        {
            "env": "marljoint_envs.mock_v0",
            "env_kwargs": {"num_agents": 2, "max_cycles": 200},
            "total_steps": 512,
            "num_envs": 2,
            "minibatch_size": 64,
            "n_epochs": 1,
        }
    )
    assert spec.trainer.rollout_steps is None
    result = train_run(spec, tmp_path / "run", progress=False)
    assert result.iterations == 2 and result.env_steps == 512
    text = (tmp_path / "run" / "config.toml").read_text()
    assert "# derived from the env (128: the largest power of two within one 200-step episode" in text
    assert "\nrollout_steps = 128\n" in text
    resumed = load_run_spec(tmp_path / "run")
    assert resumed.trainer.rollout_steps == 128 and iterations_for(resumed) == 2


def test_a_run_whose_chunks_outgrow_the_derived_rollout_is_refused_with_the_fix(tmp_path):
    from marljoint.train import RunError, RunSpec, train_run

    spec = RunSpec.from_dict(
        {
            "env": "marljoint_envs.mock_v0",
            "env_kwargs": {"num_agents": 2, "max_cycles": 25},
            "num_envs": 2,
            "recurrent": "gru",
            "bptt_length": 100,
        }
    )
    with pytest.raises(RunError, match=r"rollout_steps \(64\).*got 100.*lower bptt_length or raise rollout_steps"):
        train_run(spec, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
