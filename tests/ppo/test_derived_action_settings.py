"""The entropy bonus and learning rate derived from the action spaces: the rule, its reasons, an explicit value
winning, config.toml, and the rule's values training exactly as the same values given."""

import functools

import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.ppo.derived import BOX_ACTION_SETTINGS, DISCRETE_ACTION_SETTINGS, derive_settings
from marljoint_envs import identity_v0, mock_v0


def _factory(action_type: str, num_agents: int = 2):
    if action_type == "discrete":
        return functools.partial(mock_v0.parallel_env, num_agents=num_agents)
    return functools.partial(identity_v0.parallel_env, num_agents=num_agents, action_type=action_type)


def _spec(action_type: str, num_agents: int = 2):
    return PettingZooJointEnv(_factory(action_type, num_agents), num_envs=1).spec


@pytest.mark.parametrize("action_type", ["discrete", "multidiscrete"])
def test_discrete_actions_get_the_bonus_and_the_higher_rate(action_type):
    config, why = derive_settings(_spec(action_type), JointTrainerConfig(ent_coef=None, learning_rate=None))
    assert (config.ent_coef, config.learning_rate) == (0.01, 1e-3)
    assert why["ent_coef"] == "0.01: every agent's actions are discrete"
    assert why["learning_rate"] == "0.001: every agent's actions are discrete"


def test_box_actions_get_no_bonus_and_the_lower_rate_with_the_agents_named():
    config, why = derive_settings(_spec("box", num_agents=5), JointTrainerConfig(ent_coef=None, learning_rate=None))
    assert (config.ent_coef, config.learning_rate) == (0.0, 3e-4)
    assert why["ent_coef"] == "0.0: agents 'agent_0', 'agent_1', 'agent_2' and 2 more act in a Box (continuous actions)"
    assert why["learning_rate"].startswith("0.0003: agents 'agent_0'")


def test_the_two_tables_set_the_same_settings_and_differ_in_each():
    assert DISCRETE_ACTION_SETTINGS.keys() == BOX_ACTION_SETTINGS.keys()
    assert all(DISCRETE_ACTION_SETTINGS[k] != BOX_ACTION_SETTINGS[k] for k in DISCRETE_ACTION_SETTINGS)


def test_explicit_values_win_and_the_library_default_rate_is_kept():
    config, why = derive_settings(_spec("box"), JointTrainerConfig(ent_coef=0.05, learning_rate=1e-2))
    assert (config.ent_coef, config.learning_rate) == (0.05, 1e-2)
    assert "ent_coef" not in why and "learning_rate" not in why
    # The library's default learning rate is a number (3e-4); only ent_coef is left to the rule.
    config, why = derive_settings(_spec("discrete"), JointTrainerConfig())
    assert (config.ent_coef, config.learning_rate) == (0.01, 3e-4) and "learning_rate" not in why


@pytest.mark.parametrize("name", ["ent_coef", "learning_rate"])
def test_bad_values_are_refused_and_none_is_accepted(name):
    JointTrainerConfig(**{name: None})
    with pytest.raises(ValueError, match=rf"{name} must be"):
        JointTrainerConfig(**{name: -1.0})


@pytest.mark.parametrize(
    ("action_type", "values"), [("box", BOX_ACTION_SETTINGS), ("discrete", DISCRETE_ACTION_SETTINGS)]
)
def test_the_derived_values_train_exactly_as_the_same_values_given(action_type, values):
    def run(**settings):
        config = JointTrainerConfig(num_envs=2, rollout_steps=16, minibatch_size=16, n_epochs=2, seed=5, **settings)
        env = PettingZooJointEnv(_factory(action_type), num_envs=2, seed=5)
        trainer = JointMultiAgentTrainer.from_env(env, config)
        trainer.train(64, keep_history=False)
        return [p.detach().clone() for policy in trainer.policies for p in policy.parameters()]

    derived = run(ent_coef=None, learning_rate=None)
    assert all(torch.equal(a, b) for a, b in zip(derived, run(**values)))
    other = run(ent_coef=0.2, learning_rate=5e-3)
    assert not all(torch.equal(a, b) for a, b in zip(derived, other))


def test_marljoint_train_writes_the_derived_values_with_their_reasons(tmp_path):
    from marljoint.run.train import RunSpec, load_run_spec, train_run

    spec = RunSpec.from_dict(
        {
            "env": "marljoint_envs.identity_v0",
            "env_kwargs": {"action_type": "box"},
            "total_steps": 64,
            "num_envs": 2,
            "rollout_steps": 16,
            "minibatch_size": 16,
        }
    )
    assert spec.trainer.learning_rate is None and spec.trainer.ent_coef is None
    train_run(spec, tmp_path / "run", progress=False)
    text = (tmp_path / "run" / "config.toml").read_text()
    assert "# derived from the env (0.0003: agents 'agent_0', 'agent_1' act in a Box (continuous actions))" in text
    assert "\nlearning_rate = 0.0003\n" in text and "\nent_coef = 0.0\n" in text
    saved = load_run_spec(tmp_path / "run").trainer
    assert (saved.learning_rate, saved.ent_coef) == (3e-4, 0.0)


def test_the_mock_env_with_discrete_actions_keeps_the_former_defaults():
    env = PettingZooJointEnv(functools.partial(mock_v0.parallel_env, num_agents=2), num_envs=2, seed=0)
    trainer = JointMultiAgentTrainer.from_env(env, JointTrainerConfig(num_envs=2))
    assert trainer.config.ent_coef == 0.01 and trainer.derived["ent_coef"].endswith("discrete")
