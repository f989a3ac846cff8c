"""Everything the update touches follows ``config.device``.

Without a GPU, torch's ``meta`` device stands in for one: its tensors hold no data, and any operation that mixes
them with CPU tensors raises. The update runs on meta from the rollout to the optimizer step; only the final read
of its statistics into Python numbers (impossible for data-less tensors) is replaced by a check of where they live.
The checks that must read a value on the host in the middle of an update (an aux loss's finiteness, the target_kl
early stop, the divergence checks of the losses, gradient norms and parameters) are host reads, not device mixing;
they are left out here (the divergence check's inputs are checked to live on the device).
"""

import pytest
import torch

import marljoint.ppo.learner as learner_module
from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.ppo.gae import compute_gae
from marljoint_envs import kuhn_poker_v0, mock_v0, variable_agents_v0

CASES = {
    "shared": (mock_v0.parallel_env, {}),
    "per-agent-centralised": (variable_agents_v0.parallel_env, {"share_parameters": False, "centralized_critic": True}),
    "turn-based-split-critic": (kuhn_poker_v0.env, {"critic_lr": 1e-3, "rollout_steps": 5}),
    "shared-trunk-clipped-vf": (mock_v0.parallel_env, {"share_trunk": True, "clip_range_vf": 0.2}),
}


def _config(**cfg):
    return JointTrainerConfig(**{"num_envs": 4, "rollout_steps": 8, "minibatch_size": 16, "n_epochs": 2, **cfg})


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_update_runs_on_another_device_without_mixing(case, monkeypatch):
    env_fn, cfg = CASES[case]
    config = _config(**cfg)
    env = PettingZooJointEnv(env_fn, num_envs=config.num_envs, seed=0)
    collector = JointMultiAgentTrainer.from_env(env, config)
    collector.update(collector.collect_rollout())
    rollout = collector.collect_rollout()  # with moves carried in, in the turn-based case
    learner = JointMultiAgentTrainer.from_env(env, config.replace(device="meta"))
    assert learner.value_normalizer is None or learner.value_normalizer.mean.device.type == "meta"
    read = {}

    def check_instead_of_reading(stats):
        read.update(stats)
        return {k: ({} if isinstance(v, dict) else [] if v.dim() else 0.0) for k, v in stats.items()}

    monkeypatch.setattr(learner_module, "_to_host", check_instead_of_reading)
    checked = []

    def finite_on_the_device(values):
        checked.append(all(v.device.type == "meta" for v in values))
        return True

    monkeypatch.setattr(learner_module, "all_finite", finite_on_the_device)
    monkeypatch.setattr(learner_module, "non_finite_parameter", lambda networks: None)
    stats = learner.update(rollout.to("meta"))
    assert stats.num_mb_steps > 0 and len(checked) == stats.num_mb_steps and all(checked)
    tensors = [v for k, v in read.items() if not isinstance(v, dict)]
    tensors += [v for k in ("grad_norm", "aux_metrics") for v in read[k].values() if isinstance(v, torch.Tensor)]
    assert read["grad_norm"] and all(t.device.type == "meta" for t in tensors)
    for policy in learner.policies:
        assert all(p.device.type == "meta" for p in policy.parameters())


def test_gae_runs_on_the_device_of_its_inputs():
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    args = (
        rewards,
        torch.tensor([[0.5], [1.0], [1.5]]),
        torch.tensor([[False], [True], [False]]),
        torch.zeros(3, 1, dtype=torch.bool),
        torch.tensor([2.0]),
        0.9,
        0.8,
    )
    cpu = compute_gae(*args)
    meta = compute_gae(*(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args))
    assert all(t.device.type == "meta" and t.shape == c.shape for t, c in zip(meta, cpu))


def test_gae_in_torch_matches_the_numpy_recursion(monkeypatch):
    # The recursion another device runs is the one the CPU runs, written for torch: the same numbers.
    generator = torch.Generator().manual_seed(0)
    shape = (12, 3, 2)
    rewards = torch.randn(shape, generator=generator)
    values = torch.randn(shape, generator=generator)
    terminated = torch.rand(shape, generator=generator) < 0.1
    truncated = torch.rand(shape, generator=generator) < 0.1
    valid = torch.rand(shape, generator=generator) < 0.7
    final = torch.randn(shape, generator=generator)
    boot = torch.randn(shape[1:], generator=generator)
    args = (rewards, values, terminated, truncated, boot, 0.95, 0.9)
    numpy_path = compute_gae(*args, valid=valid, final_values=final)

    class NotCpu:
        type = "elsewhere"

    class Values(torch.Tensor):
        @property
        def device(self):
            return NotCpu()

    torch_path = compute_gae(rewards, values.as_subclass(Values), *args[2:], valid=valid, final_values=final)
    for a, b in zip(numpy_path, torch_path):
        torch.testing.assert_close(a, b.as_subclass(torch.Tensor), rtol=1e-6, atol=1e-6)
