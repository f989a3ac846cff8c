"""The learning-rate schedule derived from the agent count: the rule, its reason, an explicit value winning,
config.toml, the annealed rates a run follows, and the callers that have no run end to anneal towards."""

import functools

import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.ppo.derived import MANY_AGENTS, derive_settings
from marljoint_envs import mock_v0


def _factory(num_agents: int):
    return functools.partial(mock_v0.parallel_env, num_agents=num_agents)


def _spec(num_agents: int):
    return PettingZooJointEnv(_factory(num_agents), num_envs=1).spec


def test_many_agents_anneal_and_fewer_keep_the_constant_rate():
    config, why = derive_settings(_spec(MANY_AGENTS), JointTrainerConfig(anneal_lr=None))
    assert config.anneal_lr is True
    assert why["anneal_lr"].startswith(f"on: {MANY_AGENTS} agents (>= {MANY_AGENTS})")
    config, why = derive_settings(_spec(MANY_AGENTS - 1), JointTrainerConfig(anneal_lr=None))
    assert config.anneal_lr is False
    assert why["anneal_lr"] == f"off: {MANY_AGENTS - 1} agents (< {MANY_AGENTS}), the constant rate"


@pytest.mark.parametrize("value", [True, False])
def test_an_explicit_value_wins_and_the_library_default_is_off(value):
    config, why = derive_settings(_spec(MANY_AGENTS + 1), JointTrainerConfig(anneal_lr=value))
    assert config.anneal_lr is value and "anneal_lr" not in why
    config, why = derive_settings(_spec(MANY_AGENTS + 1), JointTrainerConfig())
    assert config.anneal_lr is False and "anneal_lr" not in why


@pytest.mark.parametrize("bad", ["true", 1, 0.5])
def test_a_value_that_is_not_a_boolean_or_none_is_refused(bad):
    with pytest.raises(ValueError, match=r"anneal_lr must be true, false or None \(derived from the agent count\)"):
        JointTrainerConfig(anneal_lr=bad)


def test_a_string_is_refused_with_the_toml_hint():
    with pytest.raises(ValueError, match="write it without quotes in TOML"):
        JointTrainerConfig(anneal_lr="false")


def _trainer(num_agents: int, **settings) -> JointMultiAgentTrainer:
    config = JointTrainerConfig(num_envs=2, rollout_steps=8, minibatch_size=16, n_epochs=1, seed=3, **settings)
    env = PettingZooJointEnv(_factory(num_agents), num_envs=2, seed=3)
    return JointMultiAgentTrainer.from_env(env, config)


def test_the_derived_schedule_trains_exactly_as_the_same_value_given():
    def run(anneal_lr):
        trainer = _trainer(MANY_AGENTS, anneal_lr=anneal_lr)
        history = trainer.train(48)
        params = [p.detach().clone() for policy in trainer.policies for p in policy.parameters()]
        return params, [row["learning_rate"] for row in history]

    derived, rates = run(None)
    given, given_rates = run(True)
    assert all(torch.equal(a, b) for a, b in zip(derived, given)) and rates == given_rates
    # three iterations of 16 env steps: the scale falls 1, 2/3, 1/3 of the initial rate
    assert rates == pytest.approx([3e-4, 2e-4, 1e-4])
    constant, constant_rates = run(False)
    assert constant_rates == [3e-4] * 3
    assert not all(torch.equal(a, b) for a, b in zip(derived, constant))


def test_iterate_without_the_run_end_names_the_rule_and_the_fix():
    trainer = _trainer(MANY_AGENTS, anneal_lr=None)
    with pytest.raises(ValueError, match=r"anneal_lr is on \(5 agents"):
        trainer.iterate()
    trainer = _trainer(MANY_AGENTS - 1, anneal_lr=None)
    trainer.iterate()
    assert trainer.iteration == 1


def test_marljoint_train_writes_the_rule_with_its_reason_and_resumes_with_the_value(tiny_run):
    spec, text, saved = tiny_run("marljoint_envs.mock_v0", {"num_agents": 6})
    assert spec.trainer.anneal_lr is None
    assert "# derived from the env (on: 6 agents (>= 5)" in text and "\nanneal_lr = true\n" in text
    assert saved.anneal_lr is True


def test_nfsp_takes_the_constant_rate_when_the_rule_is_left_to_it():
    from marljoint.best_response.nfsp import NfspConfig

    assert NfspConfig(trainer=JointTrainerConfig(anneal_lr=None)).trainer.anneal_lr is False
    with pytest.raises(ValueError, match="NFSP runs for as many iterations as it is asked"):
        NfspConfig(trainer=JointTrainerConfig(anneal_lr=True))
