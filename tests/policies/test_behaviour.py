"""Behaviour policies: what plays a rollout in the policy's place (UniformMixture), one implementation for the
torch and the numpy acting paths."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.policies import FactoredCategorical, UniformMixture
from marljoint_envs import identity_v0


def _head_log_probs(masked: bool) -> torch.Tensor:
    """``[8, 3, K, max(nvec)]`` log-probabilities of uneven heads (padding entries), some choices masked."""
    nvec = (3, 2, 4)
    generator = torch.Generator().manual_seed(5)
    logits = torch.randn(8, 3, sum(nvec), generator=generator)
    mask = torch.rand(8, 3, sum(nvec), generator=generator) < 0.6 if masked else None
    return FactoredCategorical(logits, nvec, mask)._log_p


@pytest.mark.parametrize("masked", [False, True])
def test_the_mixture_of_a_tensor_and_of_an_array_is_the_same(masked: bool) -> None:
    log_p = _head_log_probs(masked)
    behaviour = UniformMixture(0.3)
    from_torch = behaviour.head_log_probs(log_p)
    from_numpy = behaviour.head_log_probs(log_p.numpy().copy())
    assert isinstance(from_torch, torch.Tensor) and isinstance(from_numpy, np.ndarray)
    assert from_torch.dtype == torch.float32 and from_numpy.dtype == np.float32
    np.testing.assert_allclose(from_numpy, from_torch.numpy(), rtol=1e-6, atol=0)
    fill = torch.finfo(torch.float32).min
    allowed = log_p > fill / 2
    assert torch.equal(from_torch == fill, ~allowed)  # masked and padding entries stay impossible
    # Each head: (1 - ε)·p + ε / (allowed choices) on its allowed choices, summing to 1.
    expected = 0.7 * log_p.double().exp() + 0.3 * allowed.double() / allowed.sum(-1, keepdim=True)
    torch.testing.assert_close(from_torch.double().exp(), expected * allowed, rtol=1e-6, atol=1e-7)


def test_epsilon_zero_plays_the_policy_itself() -> None:
    log_p = _head_log_probs(True)
    assert UniformMixture(0.0).head_log_probs(log_p) is log_p


@pytest.mark.parametrize("epsilon", [-0.1, 1.0, 1.5, True, "0.1"])
def test_an_epsilon_outside_zero_to_one_is_refused(epsilon: object) -> None:
    with pytest.raises(ValueError, match=r"epsilon must be in \[0, 1\), got .*; 0 plays the policy itself"):
        UniformMixture(epsilon)  # type: ignore[arg-type]


def test_a_behaviour_is_a_plain_value() -> None:
    assert UniformMixture(0.25) == UniformMixture(0.25)
    with pytest.raises(AttributeError):
        UniformMixture(0.25).epsilon = 0.5  # type: ignore[misc]


def test_sampling_box_actions_under_a_behaviour_is_refused() -> None:
    env = PettingZooJointEnv(functools.partial(identity_v0.parallel_env, action_type="box", box_dim=2), num_envs=2)
    policy = JointMultiAgentTrainer.from_env(env, JointTrainerConfig(num_envs=2)).joint_policy
    obs = env.reset(seed=0)
    with torch.no_grad():
        outputs = policy.forward([torch.from_numpy(o) for o in obs.obs], torch.from_numpy(obs.alive))
    with pytest.raises(ValueError, match=r"UniformMixture\(epsilon=0.1\) plays categorical actions.*DiagGaussian"):
        policy.sample(outputs, [None], generator=torch.Generator(), behaviour=UniformMixture(0.1))
