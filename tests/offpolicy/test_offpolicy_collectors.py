"""Env copies stepped in this process or in subprocess workers give the same off-policy run, bit for bit."""

import functools

import pytest
import torch

from marljoint.env import SubprocessJointEnv
from marljoint_envs import mock_v0

from ._helpers import mock_env, tiny_trainer


@pytest.mark.parametrize("algorithm", ["vdn", "qmix"])
def test_subprocess_workers_give_the_in_process_transitions_and_weights(algorithm):
    env_fn = functools.partial(mock_v0.parallel_env, num_agents=2, max_cycles=5)
    local = tiny_trainer(mock_env(4), num_envs=4, algorithm=algorithm, exploration_steps=10_000)
    local.train(64)
    workers = SubprocessJointEnv(env_fn, num_envs=4, num_workers=2, seed=0)
    try:
        remote = tiny_trainer(workers, num_envs=4, algorithm=algorithm, exploration_steps=10_000)
        remote.train(64)
    finally:
        workers.close()
    for x, y in zip(local.buffer.storage, remote.buffer.storage):
        for a, b in zip(*((x, y) if isinstance(x, tuple) else ((x,), (y,)))):
            assert torch.equal(a, b)
    for a, b in zip(local.algorithm.groups[0].parameters(), remote.algorithm.groups[0].parameters()):
        assert torch.equal(a, b)


def test_a_copys_exploration_does_not_depend_on_the_other_copies():
    # Copy 0 of a 2-copy run and of a 4-copy run draws the same actions (its generator is addressed by its index).
    two, four = tiny_trainer(mock_env(2), num_envs=2), tiny_trainer(mock_env(4), num_envs=4)
    two.collect(), four.collect()
    assert torch.equal(two.buffer.storage.actions[0:8:2], four.buffer.storage.actions[0:16:4])
