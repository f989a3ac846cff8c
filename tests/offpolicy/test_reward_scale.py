"""The team reward's scale in the TD target: ``"auto"`` divides by the running standard deviation of the stored team
rewards (known answers by hand, batch order, checkpointing), a number stays a fixed factor, bad settings are
refused."""

import math

import pytest
import torch

from marljoint.offpolicy import OffPolicyConfig
from marljoint.offpolicy.reward_scale import RewardScale

from ._helpers import mock_env, tiny_trainer


def test_auto_is_one_over_the_population_std_of_every_reward_observed():
    scale = RewardScale("auto")
    assert scale.factor == 1.0  # nothing observed yet
    scale.observe(torch.tensor([100.0, 300.0]))
    assert scale.std == 100.0 and scale.factor == 0.01
    scale.observe(torch.tensor([500.0]))
    # [100, 300, 500]: mean 300, squared deviations 40000 + 0 + 40000, population variance 80000 / 3.
    assert scale.mean == 300.0 and scale.count == 3
    assert scale.factor == pytest.approx(1.0 / math.sqrt(80000.0 / 3.0), rel=1e-12)


def test_auto_statistics_do_not_depend_on_how_the_rewards_are_batched():
    values = torch.linspace(-3.0, 50.0, 12) ** 2
    whole, pieces = RewardScale("auto"), RewardScale("auto")
    whole.observe(values)
    for piece in values.split([5, 1, 6]):
        pieces.observe(piece)
    assert pieces.count == whole.count and pieces.mean == pytest.approx(whole.mean, rel=1e-12)
    assert pieces.factor == pytest.approx(whole.factor, rel=1e-12)


def test_auto_scales_by_one_while_every_reward_is_alike():
    scale = RewardScale("auto")
    scale.observe(torch.zeros(8))  # a sparse reward not yet reached
    assert scale.factor == 1.0
    scale.observe(torch.tensor([4.0]))  # nine rewards, one of 4: std sqrt(16 * 8 / 81) = 4 * sqrt(8) / 9
    assert scale.factor == pytest.approx(9.0 / (4.0 * math.sqrt(8.0)), rel=1e-12)


def test_a_number_is_a_fixed_factor_that_ignores_the_rewards():
    scale = RewardScale(0.01)
    scale.observe(torch.tensor([1.0, 1000.0]))
    assert scale.factor == 0.01 and scale.count == 0


def test_the_trainer_counts_every_stored_transition_and_checkpoints_the_statistics(tmp_path):
    trainer = tiny_trainer()
    assert OffPolicyConfig().reward_scale == "auto"
    trainer.train(24)  # 3 iterations of 2 copies x 4 steps
    scale = trainer.algorithm.reward_scale
    assert scale.count == 24 and scale.factor != 1.0
    trainer.save(tmp_path / "ckpt.pt")
    resumed = tiny_trainer(mock_env())
    resumed.load(tmp_path / "ckpt.pt")
    assert resumed.algorithm.reward_scale.state_dict() == scale.state_dict()


@pytest.mark.parametrize("value", ["Auto", "none", -1.0, 0, float("nan"), True])
def test_bad_reward_scales_are_refused(value):
    with pytest.raises(ValueError, match=r"reward_scale must be 'auto' or a positive number, got "):
        OffPolicyConfig(reward_scale=value)
