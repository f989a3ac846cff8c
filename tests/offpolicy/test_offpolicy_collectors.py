"""Env copies stepped in this process or in subprocess workers give the same off-policy run, bit for bit."""

import pytest
import torch

from marljoint.env import SubprocessJointEnv

from ._backends import ALGORITHMS, assert_gives_the_in_process_run
from ._helpers import mock_env, tiny_trainer


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_subprocess_workers_give_the_in_process_transitions_and_weights(algorithm):
    assert_gives_the_in_process_run(
        algorithm, lambda env_fn, num_envs, seed: SubprocessJointEnv(env_fn, num_envs, num_workers=2, seed=seed)
    )


def test_a_copys_exploration_does_not_depend_on_the_other_copies():
    # Copy 0 of a 2-copy run and of a 4-copy run draws the same actions (its generator is addressed by its index).
    two, four = tiny_trainer(mock_env(2), num_envs=2), tiny_trainer(mock_env(4), num_envs=4)
    two.collect(), four.collect()
    assert torch.equal(two.buffer.storage.actions[0:8:2], four.buffer.storage.actions[0:16:4])
