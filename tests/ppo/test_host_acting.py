"""The rollout's numpy acting step against the torch networks and distributions it stands in for."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mpe2 import simple_spread_v3

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, make_joint_env
from marljoint.collect.acting import HostActing, _UnitActing
from marljoint.env.spaces import ActionLayout, ObservationLayout
from marljoint.policies import ActorCritic
from marljoint_envs import kuhn_poker_v0, mock_v0

FLAT = ObservationLayout("flat", (7,), np.dtype(np.float32))
BYTES = ObservationLayout("image", (4, 3, 2), np.dtype(np.uint8))
LAYOUTS = {
    "discrete": ActionLayout("discrete", (5,), ()),
    "multidiscrete": ActionLayout("multidiscrete", (3, 3), (2,)),
    "multidiscrete-uneven": ActionLayout("multidiscrete", (3, 2, 4), (3,)),
    "box": ActionLayout("box", (), (2,), low=np.full(2, -1.0, np.float32), high=np.ones(2, np.float32)),
}


def _random_mask(rng: np.random.Generator, rows: int, n: int, layout: ActionLayout) -> np.ndarray:
    mask = rng.random((rows, n, layout.mask_size)) < 0.6
    mask[0, 0] = False  # an agent with no allowed action: its heads are left unmasked
    return mask


ACTION_CASES = [(kind, False) for kind in LAYOUTS] + [(kind, True) for kind in LAYOUTS if kind != "box"]


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize(("kind", "masked"), ACTION_CASES)
@pytest.mark.parametrize("observation", [FLAT, BYTES], ids=["flat", "bytes"])
def test_unit_acting_samples_what_the_torch_distribution_samples(
    share: bool, kind: str, masked: bool, observation: ObservationLayout
) -> None:
    layout, n, rows = LAYOUTS[kind], 3, 6
    policy = ActorCritic(observation, layout, n, share, (16, 8), generator=torch.Generator().manual_seed(1))
    if kind == "box":
        with torch.no_grad():
            policy.log_std.copy_(torch.linspace(-1.0, 0.5, policy.log_std.numel()).view_as(policy.log_std))
    rng = np.random.default_rng(0)
    if observation.dtype == np.uint8:
        obs = rng.integers(0, 256, (rows, n, *observation.shape), dtype=np.uint8)
    else:
        obs = rng.normal(size=(rows, n, *observation.shape)).astype(np.float32)
    mask = _random_mask(rng, rows, n, layout) if masked else None
    unit = _UnitActing(policy, 0, np.arange(n), np.arange(n), 0, rows, rows, None)
    noise = torch.rand(unit.noise_shape) if unit.noise_kind == "uniform" else torch.randn(unit.noise_shape)

    with torch.no_grad():
        out = policy(torch.from_numpy(obs))
        dist = policy.distribution(out.head, None if mask is None else torch.from_numpy(mask))
        expected_actions = dist.sample_from_noise(noise.clone())
        expected_log_probs = dist.log_prob(expected_actions)
        actions, log_probs, values = unit.act(obs, None, mask, noise.numpy())

    assert actions.shape == tuple(expected_actions.shape)
    if kind == "box":
        np.testing.assert_allclose(actions, expected_actions.numpy(), rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(actions, expected_actions.numpy())
    np.testing.assert_allclose(log_probs, expected_log_probs.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values, out.values.numpy(), rtol=1e-5, atol=1e-6)
    if masked:
        allowed = mask.reshape(rows * n, -1)
        offsets = np.concatenate(([0], np.cumsum(layout.nvec)[:-1]))
        picks = actions.reshape(rows * n, -1) + offsets
        for row, pick in zip(range(1, rows * n), picks[1:]):  # row 0 has no allowed action
            for head, index in enumerate(pick):
                head_allowed = allowed[row, offsets[head] : offsets[head] + layout.nvec[head]]
                assert allowed[row, index] or not head_allowed.any()


def test_unit_acting_on_a_slice_of_padded_rows_matches_the_unpadded_network() -> None:
    layout, n = LAYOUTS["discrete"], 2
    policy = ActorCritic(FLAT, layout, n, True, (16,), generator=torch.Generator().manual_seed(2))
    obs = np.random.default_rng(1).normal(size=(2, n, 7)).astype(np.float32)
    unit = _UnitActing(policy, 0, np.arange(n), np.arange(n), 3, 2, 8, None)
    noise = torch.rand(unit.noise_shape)
    with torch.no_grad():
        out = policy(torch.from_numpy(obs))
        dist = policy.distribution(out.head)
        expected = dist.sample_from_noise(noise.clone())
        actions, log_probs, values = unit.act(obs, None, None, noise.numpy())
    np.testing.assert_array_equal(actions, expected.numpy())
    np.testing.assert_allclose(log_probs, dist.log_prob(expected).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values, out.values.numpy(), rtol=1e-5, atol=1e-6)
    # Rows outside the slice stay zero: they are the padding that keeps the batch shape of the full set.
    assert not unit.x_np[0, : 3 * n, :7].any() and not unit.x_np[0, 5 * n :, :7].any()


def _rollouts(env_fn, config: JointTrainerConfig, host: bool, monkeypatch: pytest.MonkeyPatch) -> list:
    with monkeypatch.context() as patch:
        if not host:
            patch.setattr(HostActing, "build", staticmethod(lambda policy, rollout, padding=None, behaviour=None: None))
        env = make_joint_env(env_fn, config.num_envs, config.seed)
        trainer = JointMultiAgentTrainer.from_env(env, config)
        out = []
        for _ in range(2):
            rollout = trainer.collect_rollout()
            out.append({name: getattr(rollout, name).clone() for name in ("log_probs", "values", "rewards")})
            out[-1]["actions"] = [a.clone() for a in rollout.actions]
            trainer.update(rollout)
        env.close()
    return out


CASES = {
    "spread-shared": (lambda: simple_spread_v3.parallel_env(max_cycles=10), {}),
    "spread-independent-mappo": (
        lambda: simple_spread_v3.parallel_env(max_cycles=10),
        {"share_parameters": False, "centralized_critic": True},
    ),
    "spread-critic-per-frame": (
        lambda: simple_spread_v3.parallel_env(max_cycles=10),
        {"centralized_critic": True, "critic_per_frame": True, "normalize_observations": True},
    ),
    "spread-continuous": (lambda: simple_spread_v3.parallel_env(max_cycles=10, continuous_actions=True), {}),
    "kuhn-masks": (kuhn_poker_v0.env, {}),
    "mock-multidiscrete": (lambda: mock_v0.parallel_env(num_agents=3, nvec=(3, 2, 4), max_cycles=7), {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_trainer_collects_the_same_rollouts_with_host_and_torch_acting(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_fn, changes = CASES[case]
    config = JointTrainerConfig(num_envs=3, rollout_steps=24, minibatch_size=36, n_epochs=2, seed=5, **changes)
    host = _rollouts(env_fn, config, True, monkeypatch)
    reference = _rollouts(env_fn, config, False, monkeypatch)
    continuous = "continuous" in case
    for got, want in zip(host, reference):
        for a, b in zip(got["actions"], want["actions"]):
            if continuous:
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
            else:
                assert torch.equal(a, b)
        torch.testing.assert_close(got["log_probs"], want["log_probs"], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(got["values"], want["values"], rtol=1e-4, atol=1e-5)
        if not continuous:  # the same actions give the same env trajectory
            assert torch.equal(got["rewards"], want["rewards"])


class _Custom(ActorCritic):
    """A subclass may change what the network computes; it acts through its own torch methods."""


def test_host_acting_is_built_only_for_plain_mlp_networks_on_the_cpu() -> None:
    config = JointTrainerConfig(num_envs=2, rollout_steps=4, minibatch_size=8)
    env = make_joint_env(lambda: mock_v0.parallel_env(num_agents=2), 2, 0)
    trainer = JointMultiAgentTrainer.from_env(env, config)
    rollout = trainer.collect_rollout()
    assert isinstance(HostActing.build(trainer.joint_policy, rollout), HostActing)
    trainer.learner.units[0].policy.__class__ = _Custom
    assert HostActing.build(trainer.joint_policy, rollout) is None
    trainer.learner.units[0].policy.__class__ = ActorCritic
    trainer.learner.units[0].policy.double()
    assert HostActing.build(trainer.joint_policy, rollout) is None
    env.close()


@pytest.mark.parametrize("share", [True, False])
def test_unit_acting_standardises_observations_as_the_network_does(share: bool) -> None:
    layout, n, rows = LAYOUTS["discrete"], 3, 5
    policy = ActorCritic(FLAT, layout, n, share, (16, 8), normalize_observations=True)
    rng = np.random.default_rng(3)
    sample = torch.from_numpy(rng.normal(4.0, 30.0, size=(50, n, 7)))
    policy.update_observation_statistics(sample, torch.ones(50, n, dtype=torch.bool))
    assert policy.obs_normalizer.count.sum() == 50 * n
    obs = rng.normal(4.0, 30.0, size=(rows, n, 7)).astype(np.float32)
    obs[0, 0, 0] = 1e5  # clipped at +10
    unit = _UnitActing(policy, 0, np.arange(n), np.arange(n), 0, rows, rows, None)
    noise = torch.rand(unit.noise_shape)
    with torch.no_grad():
        out = policy(torch.from_numpy(obs))
        expected = policy.distribution(out.head).sample_from_noise(noise.clone())
        actions, _, values = unit.act(obs, None, None, noise.numpy())
    np.testing.assert_array_equal(actions, expected.numpy())
    np.testing.assert_allclose(values, out.values.numpy(), rtol=1e-5, atol=1e-6)  # a numpy sum, as above
