"""PaddedPolicy: a slice of the copies evaluated at its rows of the whole batch gets the whole batch's bits."""

import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.collect import CopyNoise, copy_generators
from marljoint.collect.padded import PaddedPolicy, RowPadding
from marljoint_envs import variable_agents_v0

COPIES = 5


@pytest.fixture(scope="module")
def batch():
    config = JointTrainerConfig(num_envs=COPIES, rollout_steps=4, minibatch_size=10, n_epochs=1, seed=2)
    env = PettingZooJointEnv(variable_agents_v0.parallel_env, num_envs=COPIES, seed=2)
    trainer = JointMultiAgentTrainer.from_env(env, config)
    state = env.reset(seed=2)
    obs = [torch.as_tensor(o) for o in state.obs]
    masks = [None if m is None else torch.as_tensor(m) for m in state.action_masks]
    return trainer.joint_policy, obs, torch.as_tensor(state.alive), masks


@pytest.mark.parametrize("start, stop", [(0, 2), (2, 4), (3, 5), (0, 5)])
def test_padded_rows_sample_bit_identically_to_their_rows_of_the_whole_batch(batch, start, stop):
    policy, obs, alive, masks = batch
    full = policy.forward(obs, alive)
    full_actions, full_log_probs = policy.sample(full, masks, noise=CopyNoise(copy_generators(9, COPIES), 1))
    padded = PaddedPolicy(policy, RowPadding(start, COPIES))
    part = padded.forward([o[start:stop] for o in obs], alive[start:stop])
    part_masks = [None if m is None else m[start:stop] for m in masks]
    noise = CopyNoise(copy_generators(9, stop - start, start), 1)
    actions, log_probs = policy.sample(part, part_masks, noise=noise)
    assert all(torch.equal(a, b[start:stop]) for a, b in zip(actions, full_actions))
    assert torch.equal(log_probs, full_log_probs[start:stop])
    assert torch.equal(policy.values(part), policy.values(full)[start:stop])


def test_without_padding_the_rows_are_the_batch(batch):
    policy, obs, alive, _ = batch
    plain, direct = PaddedPolicy(policy).forward(obs, alive), policy.forward(obs, alive)
    assert all(torch.equal(a.values, b.values) and torch.equal(a.head, b.head) for a, b in zip(plain, direct))


def test_bad_paddings_are_refused(batch):
    policy, obs, alive, _ = batch
    with pytest.raises(ValueError, match=r"0 <= start < total\), got start=5, total=5"):
        PaddedPolicy(policy, (5, 5))
    with pytest.raises(ValueError, match="3 rows from row 3 do not fit in a batch of 5 rows"):
        PaddedPolicy(policy, (3, 5)).forward([o[:3] for o in obs], alive[:3])
    with pytest.raises(TypeError, match="PaddedPolicy wraps a JointPolicy, got ActorCritic"):
        PaddedPolicy(policy.networks[0], (0, 5))
