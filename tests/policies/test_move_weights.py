"""JointPolicy.move_weights_towards: the in-place step of a policy's parameters towards another's."""

import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint_envs import mock_v0


def _policy(seed):
    config = JointTrainerConfig(num_envs=2, rollout_steps=4, minibatch_size=8, n_epochs=1, hidden_sizes=(8,), seed=seed)
    trainer = JointMultiAgentTrainer.from_env(PettingZooJointEnv(mock_v0.parallel_env, num_envs=2, seed=0), config)
    return trainer.joint_policy


def _parameters(policy):
    return [p.detach().clone() for network in policy.networks for p in network.parameters()]


def _buffers(policy):
    return [b.detach().clone() for network in policy.networks for b in network.buffers()]


def _pair():
    target, source = _policy(0), _policy(1)
    with torch.no_grad():  # distinct buffers too, so that copying them is visible
        for buffer in (b for network in source.networks for b in network.buffers() if b.is_floating_point()):
            buffer.add_(0.25)
    return target, source


def test_rate_one_is_copy_weights_from():
    target, source = _pair()
    copied = source.copy_to("cpu")
    copied.copy_weights_from(source)
    target.move_weights_towards(source, 1.0)
    for a, b in zip(_parameters(target) + _buffers(target), _parameters(copied) + _buffers(copied)):
        assert torch.equal(a, b)


def test_rate_zero_leaves_the_parameters_and_copies_the_buffers():
    target, source = _pair()
    before = _parameters(target)
    target.move_weights_towards(source, 0.0)
    assert all(torch.equal(a, b) for a, b in zip(_parameters(target), before))
    assert all(torch.equal(a, b) for a, b in zip(_buffers(target), _buffers(source)))


def test_rate_one_half_is_the_midpoint():
    target, source = _pair()
    mine, theirs = _parameters(target), _parameters(source)
    assert not all(torch.equal(a, b) for a, b in zip(mine, theirs))
    target.move_weights_towards(source, 0.5)
    for moved, a, b in zip(_parameters(target), mine, theirs):
        torch.testing.assert_close(moved, 0.5 * a + 0.5 * b, rtol=0, atol=1e-7)


@pytest.mark.parametrize("rate", [-0.1, 1.5, float("nan"), True, "0.5"])
def test_a_rate_outside_zero_one_is_refused(rate):
    target, source = _pair()
    with pytest.raises(ValueError, match=r"rate must be a number in \[0, 1\], got .*; e.g. rate=0.05"):
        target.move_weights_towards(source, rate)
