"""The typed sampling-noise protocol: JointPolicy.sample takes any SamplingNoise, and refuses anything else."""

import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.collect import CopyNoise, OverlappedCollector, copy_generators
from marljoint.policies import SamplingNoise
from marljoint_envs import mock_v0, variable_agents_v0


def _policy_and_outputs(env_fn=variable_agents_v0.parallel_env, copies=4):
    config = JointTrainerConfig(num_envs=copies, rollout_steps=4, minibatch_size=8, n_epochs=1, seed=3)
    trainer = JointMultiAgentTrainer.from_env(PettingZooJointEnv(env_fn, num_envs=copies, seed=3), config)
    state = trainer.env.reset(seed=3)
    policy = trainer.joint_policy
    outputs = policy.forward([torch.as_tensor(o) for o in state.obs], torch.as_tensor(state.alive))
    masks = [None if m is None else torch.as_tensor(m) for m in state.action_masks]
    return policy, outputs, masks


class _HalfNoise:
    """Every uniform number 0.5: a SamplingNoise by its draw method alone."""

    def __init__(self) -> None:
        self.requests = []

    def draw(self, requests):
        self.requests.append([(r.noise_kind, tuple(r.noise_shape)) for r in requests])
        return [torch.full(tuple(r.noise_shape), 0.5) for r in requests]


def test_copy_noise_is_a_sampling_noise_and_any_other_source_is_asked_once_per_call():
    policy, outputs, masks = _policy_and_outputs()
    assert isinstance(CopyNoise(copy_generators(0, 4), 1), SamplingNoise)
    source = _HalfNoise()
    actions, log_probs = policy.sample(outputs, masks, noise=source)
    assert len(source.requests) == 1 and len(source.requests[0]) == len(policy.networks)
    assert all(kind == "uniform" and shape[0] == 4 for kind, shape in source.requests[0])
    # Gumbel-max with equal noise everywhere picks the most likely allowed action: the mode.
    modes, mode_log_probs = policy.sample(outputs, masks, deterministic=True)
    assert all(torch.equal(a, b) for a, b in zip(actions, modes))
    assert torch.equal(log_probs, mode_log_probs)


def test_copy_noise_samples_each_row_from_its_copys_generator():
    policy, outputs, masks = _policy_and_outputs()
    together, _ = policy.sample(outputs, masks, noise=CopyNoise(copy_generators(7, 4), 1))
    for e in range(4):
        row = [type(o)(*(None if f is None else f[e : e + 1] for f in o)) for o in outputs]
        alone, _ = policy.sample(
            row, [None if m is None else m[e : e + 1] for m in masks], noise=CopyNoise(copy_generators(7, 1, e), 1)
        )
        assert all(torch.equal(a[e : e + 1], b) for a, b in zip(together, alone))


def test_a_noise_object_without_draw_is_refused_naming_the_fix():
    policy, outputs, masks = _policy_and_outputs()
    with pytest.raises(TypeError, match=r"noise must be a SamplingNoise .*got Generator; pass e\.g\. .*CopyNoise"):
        policy.sample(outputs, masks, noise=torch.Generator())
    with pytest.raises(ValueError, match="sampling needs a generator or a noise source"):
        policy.sample(outputs, masks)


def test_overlapped_collection_refuses_a_collector_without_workers():
    from marljoint.collect import LocalCollector

    env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=2, seed=0)
    with pytest.raises(TypeError, match="OverlappedCollector wraps a collector whose workers play the rollouts"):
        OverlappedCollector(LocalCollector(env, seed=0))
