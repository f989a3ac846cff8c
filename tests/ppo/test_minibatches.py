"""How an epoch is cut into minibatches: a count per epoch (``num_minibatches``) or a row count
(``minibatch_size``), for feed-forward rows and recurrent chunks."""

import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.run.train import RunSpec
from marljoint_envs import mock_v0


def _trainer(**cfg):
    config = JointTrainerConfig(**{"num_envs": 2, "rollout_steps": 16, "n_epochs": 2, "torch_threads": 1, **cfg})
    env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=config.num_envs, seed=config.seed)
    return JointMultiAgentTrainer.from_env(env, config)


def _parameters(trainer):
    return [p.detach().clone() for unit in trainer.learner.units for p in unit.policy.parameters()]


def test_a_count_of_minibatches_keeps_the_steps_per_update_as_the_rollout_grows():
    small = JointTrainerConfig(num_envs=16, rollout_steps=256, num_minibatches=16)
    large = small.replace(num_envs=64)
    assert (small.rows_per_minibatch, small.minibatches_per_epoch) == (256, 16)
    assert (large.rows_per_minibatch, large.minibatches_per_epoch) == (1024, 16)
    by_rows = JointTrainerConfig(num_envs=64, rollout_steps=256, minibatch_size=256)
    assert (by_rows.rows_per_minibatch, by_rows.minibatches_per_epoch) == (256, 64)


def test_minibatch_size_alone_switches_back_to_row_count_minibatches():
    config = JointTrainerConfig(num_envs=16, rollout_steps=256, num_minibatches=16)
    assert config.replace(minibatch_size=512).num_minibatches is None
    assert config.replace(minibatch_size=512).minibatches_per_epoch == 8
    assert config.replace(minibatch_size=512, num_minibatches=4).rows_per_minibatch == 1024
    # marljoint train's defaults count minibatches; a config layer that gives minibatch_size alone (a preset, a
    # --config file, --set) means minibatches of that many rows.
    assert RunSpec().trainer.num_minibatches == 16
    assert RunSpec.from_dict({"minibatch_size": 64}).trainer.num_minibatches is None


@pytest.mark.parametrize("count,rows,expected_steps", [(4, 32, 4), (3, 32, 3), (64, 32, 32), (1, 32, 1)])
def test_each_epoch_takes_the_counted_minibatches_however_the_rows_divide(count, rows, expected_steps):
    trainer = _trainer(num_minibatches=count, rollout_steps=rows // 2)
    stats = trainer.update(trainer.collect_rollout())
    # Every row is used once per epoch: as many steps as minibatches, never more than rows.
    assert stats.num_mb_steps == 2 * expected_steps


def test_a_count_that_divides_the_rows_trains_exactly_as_the_same_row_count():
    by_count = _trainer(num_minibatches=4)  # 32 rows: minibatches of 8
    by_rows = _trainer(minibatch_size=8)
    for trainer in (by_count, by_rows):
        for _ in range(2):
            trainer.update(trainer.collect_rollout())
    for a, b in zip(_parameters(by_count), _parameters(by_rows)):
        assert torch.equal(a, b)


def test_the_single_minibatch_mode_and_the_cap_apply_to_a_count_too():
    assert _trainer(num_minibatches=4, iterate_all_minibatches=False).update(
        _trainer(num_minibatches=4).collect_rollout()
    ).num_mb_steps == 2
    capped = _trainer(num_minibatches=4, max_minibatches_per_epoch=3)
    assert capped.update(capped.collect_rollout()).num_mb_steps == 6


def test_recurrent_chunks_are_split_into_the_counted_minibatches():
    # 2 copies x 16 steps in chunks of 4: 8 chunks, 4 minibatches of 2 chunks each per epoch.
    trainer = _trainer(num_minibatches=4, recurrent="gru", rnn_hidden_size=8, bptt_length=4)
    assert trainer.update(trainer.collect_rollout()).num_mb_steps == 2 * 4
