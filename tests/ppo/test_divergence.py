"""Divergence: a non-finite loss or gradient stops the update before any optimizer steps; a non-finite parameter
stops it after the update; the error names the metric, the agent or network and the iteration."""

import math

import pytest
import torch

from marljoint import DivergenceError, JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.ppo.divergence import first_non_finite, non_finite_parameter
from marljoint_envs import mock_v0


def _trainer(**cfg):
    config = JointTrainerConfig(**{"num_envs": 2, "rollout_steps": 16, "minibatch_size": 16, "n_epochs": 2, **cfg})
    env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=config.num_envs, seed=config.seed)
    return JointMultiAgentTrainer.from_env(env, config)


def _parameters(trainer):
    return [p for unit in trainer.learner.units for p in unit.policy.parameters()]


def _state(trainer):
    """Every parameter and every optimizer's state tensor, cloned."""
    params = [p.detach().clone() for p in _parameters(trainer)]
    optim = [
        value.clone()
        for unit in trainer.learner.units
        for optimizer in unit.optimizers()
        for state in optimizer.state_dict()["state"].values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    ]
    return params, optim


def _same(before, after):
    return all(len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b)) for a, b in zip(before, after))


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
def test_a_non_finite_loss_stops_before_any_optimizer_step():
    trainer = _trainer()
    rollout = trainer.collect_rollout()
    rollout.rewards[3, 0, 1] = 3e38  # finite, but its return overflows float32
    rollout.rewards[4, 0, 1] = 3e38
    before = _state(trainer)
    with pytest.raises(DivergenceError, match=r"at iteration 1: (policy|value)_loss of agent 'agent_\d' is (nan|inf)"):
        trainer.update(rollout)
    assert _same(before, _state(trainer))


def test_a_non_finite_gradient_of_a_finite_loss_stops_before_any_step():
    trainer = _trainer()
    rollout = trainer.collect_rollout()

    def nan_gradient(features, alive):
        # sqrt at 0 is finite, its derivative is not: the loss is 0, its gradient NaN.
        return torch.sqrt(features[0].sum() * 0.0)

    before = _state(trainer)
    with pytest.raises(DivergenceError, match=r"gradient norm of actor/agent_0\+agent_1 is nan") as caught:
        trainer.update(rollout, aux_fn=nan_gradient)
    assert _same(before, _state(trainer))
    assert caught.value.metric == "gradient norm of actor/agent_0+agent_1" and caught.value.iteration == 1


def test_a_parameter_made_infinite_by_a_step_is_caught_after_the_update():
    trainer = _trainer(n_epochs=1, minibatch_size=32)  # one step: no later minibatch sees the damage
    for unit in trainer.learner.units:
        for optimizer in unit.optimizers():
            for group in optimizer.param_groups:
                group["lr"] = math.inf
    with pytest.raises(
        DivergenceError, match=r"at iteration 1: parameter \S+ of network agent_0\+agent_1 is (nan|-?inf)"
    ):
        trainer.iterate()
    assert trainer.iteration == 0  # the iteration did not complete


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
def test_the_iteration_named_is_the_one_in_progress():
    trainer = _trainer()
    trainer.iterate()
    trainer.iterate()
    rollout = trainer.collect_rollout()
    rollout.rewards[:, :, 0] = 3e38
    with pytest.raises(DivergenceError, match="at iteration 3:") as caught:
        trainer.update(rollout)
    assert "lower learning_rate" in str(caught.value) and "max_grad_norm" in str(caught.value)


def test_finite_training_takes_the_same_steps_as_before():
    # The check only reads: two runs of the same seed end bit-identical, and the update really moved the weights.
    first, second = _trainer(), _trainer()
    start = [p.detach().clone() for p in _parameters(first)]
    for trainer in (first, second):
        trainer.iterate()
        trainer.iterate()
    for a, b in zip(_parameters(first), _parameters(second)):
        assert torch.equal(a, b)
    assert any(not torch.equal(a, s) for a, s in zip(_parameters(first), start))


def test_first_non_finite_names_the_first_culprit():
    named = [("a", torch.ones(3)), ("mask", torch.ones(2, dtype=torch.bool)), ("b", torch.tensor([1.0, -math.inf]))]
    assert first_non_finite(named) == ("b", -math.inf)
    assert first_non_finite(named[:2]) is None
    layer = torch.nn.Linear(2, 2)
    assert non_finite_parameter([("x", layer)]) is None
    with torch.no_grad():
        layer.bias[1] = math.nan
    name, value = non_finite_parameter([("x", layer)])
    assert name == "parameter bias of network x" and math.isnan(value)


@pytest.mark.parametrize("field", ["learning_rate", "critic_lr"])
def test_an_infinite_learning_rate_is_refused(field):
    with pytest.raises(ValueError, match=f"{field} must be finite, got inf"):
        JointTrainerConfig(**{field: math.inf})
