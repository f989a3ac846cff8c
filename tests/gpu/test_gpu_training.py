"""Training on a CUDA device: the update of every network kind, a short training of each, the split between the
learner on the GPU and the policy acting on a CPU copy, ``marljoint train``/``eval``/``--resume`` of a cuda run
(and its resume on the CPU), and a slow check that cuda and CPU runs learn alike.

Every test here is marked ``gpu`` and skips where torch sees no CUDA device (tests/conftest.py).
"""

from __future__ import annotations

import functools
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces

from marljoint import CollectionConfig, JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv, load_run
from marljoint.checkpoint import list_checkpoints, load_checkpoint
from marljoint.cli import main
from marljoint.redundancy import RedundancyPenalty
from marljoint.run.train import RunSpec, load_run_spec
from marljoint_envs import identity_v0, kuhn_poker_v0, memory_v0, mock_v0, variable_agents_v0

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "env"))
from _custom_envs import ScriptedEnv  # noqa: E402  (the small envs of tests/env)

pytestmark = pytest.mark.gpu

MEMORY = functools.partial(memory_v0.parallel_env, num_agents=2, num_cues=4, delay=3)


def _images():
    """Two agents seeing random 36×36 RGB frames (the smallest the default CNN takes), three actions."""
    return ScriptedEnv(spaces.Box(0, 255, (36, 36, 3), np.uint8), spaces.Discrete(3), episode_length=8)


CASES = {
    "mlp-shared": (mock_v0.parallel_env, {}, None),
    "mlp-per-agent-centralised": (
        variable_agents_v0.parallel_env, {"share_parameters": False, "centralized_critic": True}, None,
    ),
    "split-critic-turn-based": (kuhn_poker_v0.env, {"critic_lr": 1e-3, "rollout_steps": 5}, None),
    "shared-trunk-clipped-vf": (mock_v0.parallel_env, {"share_trunk": True, "clip_range_vf": 0.2}, None),
    "box": (functools.partial(identity_v0.parallel_env, action_type="box"), {}, None),
    "gru": (MEMORY, {"recurrent": "gru", "bptt_length": 4}, None),
    "lstm": (MEMORY, {"recurrent": "lstm", "bptt_length": 4}, None),
    "cnn": (_images, {}, None),
    "redundancy-xcorr": (mock_v0.parallel_env, {}, "xcorr"),
}  # fmt: skip


def _config(**cfg):
    return JointTrainerConfig(**{"num_envs": 4, "rollout_steps": 8, "minibatch_size": 16, "n_epochs": 2, **cfg})


def _trainer(env_fn, config):
    return JointMultiAgentTrainer.from_env(PettingZooJointEnv(env_fn, num_envs=config.num_envs, seed=0), config)


def _penalty(kind):
    return None if kind is None else RedundancyPenalty(kind=kind, coef=0.1)


def _on_cuda(tensors):
    return all(t.device.type == "cuda" for t in tensors)


@pytest.mark.parametrize("acting", ["auto", "cuda"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_update_of_every_network_kind_runs_on_cuda(case, acting):
    env_fn, cfg, penalty = CASES[case]
    trainer = _trainer(env_fn, _config(**cfg, device="cuda", acting_device=acting))
    # Only convolutional networks pay for acting on the device at this size (the rule of acting_device="auto").
    expected = "cuda" if acting == "cuda" or case == "cnn" else "cpu"
    assert trainer.config.acting_device == expected
    assert trainer.collector_policy.device.type == expected
    before = [p.detach().clone() for policy in trainer.policies for p in policy.parameters()]
    for _ in range(2):
        rollout, stats, _ = trainer.iterate(aux_fn=_penalty(penalty))
    assert _on_cuda([rollout.rewards, rollout.values, rollout.log_probs, *rollout.obs, *rollout.actions])
    assert _on_cuda([p for policy in trainer.policies for p in policy.parameters()])
    assert stats.num_mb_steps > 0 and math.isfinite(stats.total_loss)
    after = [p for policy in trainer.policies for p in policy.parameters()]
    assert any(not torch.equal(b, a.detach()) for b, a in zip(before, after))
    if penalty is not None:
        assert stats.aux_loss != 0.0


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_short_training_of_every_network_kind_on_cuda(case):
    env_fn, cfg, penalty = CASES[case]
    config = _config(**cfg, device="cuda")
    trainer = _trainer(env_fn, config)
    history = trainer.train(3 * config.num_envs * config.rollout_steps, aux_fn=_penalty(penalty))
    assert len(history) == 3 and trainer.iteration == 3
    assert all(math.isfinite(h["total_loss"]) for h in history)


@pytest.mark.parametrize("case", ["mlp-shared", "mlp-per-agent-centralised", "split-critic-turn-based", "box", "gru"])
def test_the_cpu_copy_acts_exactly_as_a_cpu_trainer(case):
    # The networks are built on the CPU and moved: the copy acting for a cuda learner holds the CPU trainer's
    # initial weights bit for bit, and so collects its first rollout bit for bit.
    env_fn, cfg, _ = CASES[case]
    on_cpu = _trainer(env_fn, _config(**cfg)).collect_rollout()
    split = _trainer(env_fn, _config(**cfg, device="cuda"))
    assert split.config.acting_device == "cpu"
    rollout = split.collect_rollout()
    assert rollout.rewards.device.type == "cuda"
    rollout = rollout.to("cpu")
    for name in ("rewards", "log_probs", "values", "bootstrap_values", "alive", "final_values"):
        assert torch.equal(getattr(rollout, name), getattr(on_cpu, name)), name
    assert all(torch.equal(a, b) for a, b in zip(rollout.actions, on_cpu.actions))


def test_env_workers_act_on_cpu_copies_for_a_cuda_learner_at_lag_1():
    config = _config(device="cuda", collection=CollectionConfig("subprocess", 2, policy_lag=1))
    env = config.collection.make_env(mock_v0.parallel_env, config.num_envs, config.seed)
    trainer = JointMultiAgentTrainer.from_env(env, config)
    try:
        assert trainer.config.acting_device == "cpu" and trainer.collector_policy.device.type == "cpu"
        for _ in range(3):
            rollout, stats, _ = trainer.iterate()
            assert rollout.rewards.device.type == "cuda" and math.isfinite(stats.total_loss)
        weights = trainer.collector_policy.weights()
        assert all(isinstance(v, np.ndarray) for state in weights["policies"] for v in state.values())
    finally:
        trainer.close()
        env.close()


TINY_ENV_KWARGS = {"scenario": "easy", "num_houses": 5, "num_agents": 2, "max_nights": 20}
TINY_CONFIG = "rollout_steps = 16\nminibatch_size = 64\nn_epochs = 2\nhidden_sizes = [16]\ncheckpoint_every = 2\n"


def _cli(args):
    try:
        return main(args)
    except SystemExit as exc:
        return int(exc.code or 0)


def _train(out, config, total_steps, *extra):
    return _cli([
        "train", "--env", "bucket_brigade_v0", "--env-kwargs", json.dumps(TINY_ENV_KWARGS), "--num-envs", "4",
        "--total-steps", str(total_steps), "--config", str(config), "--out", str(out), "--quiet", *extra,
    ])  # fmt: skip


def _resume(out, total_steps, *extra):
    return _cli(["train", "--out", str(out), "--resume", "--total-steps", str(total_steps), "--quiet", *extra])


def _iteration(out):
    return int(load_checkpoint(list_checkpoints(out / "checkpoints")[-1])["trainer"]["iteration"])


@pytest.mark.parametrize("workers", [[], ["--env-workers", "2", "--policy-lag", "1"]], ids=["in-process", "workers"])
def test_a_cuda_run_trains_evaluates_resumes_and_resumes_on_the_cpu(workers, tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_CONFIG)
    out = tmp_path / "run"
    assert _train(out, config, 4 * 64, "--device", "cuda", *workers) == 0
    text = (out / "config.toml").read_text()
    assert '\ndevice = "cuda"\n' in text and '\nacting_device = "cpu"\n' in text
    assert _iteration(out) == 4
    assert _cli(["eval", str(out), "--episodes", "2"]) == 0
    assert _resume(out, 6 * 64) == 0 and _iteration(out) == 6
    assert load_run_spec(out).trainer.device == "cuda"
    assert _resume(out, 8 * 64, "--device", "cpu") == 0 and _iteration(out) == 8
    assert (load_run_spec(out).trainer.device, load_run_spec(out).trainer.acting_device) == ("cpu", "cpu")
    run = load_run(out)
    try:
        assert all(p.device.type == "cpu" for policy in run.trainer.policies for p in policy.parameters())
    finally:
        run.close()


def _final_return(env_fn, config, iterations):
    """The mean episode return over the last quarter of ``iterations`` training iterations."""
    trainer = _trainer(env_fn, config)
    returns = []
    for _ in range(iterations):
        rollout, _, _ = trainer.iterate()
        returns.append(float(rollout.episode_returns.mean()) if len(rollout.episode_returns) else math.nan)
    tail = [r for r in returns[-max(1, iterations // 4) :] if not math.isnan(r)]
    return statistics.fmean(tail)


def _spread():
    mpe2 = pytest.importorskip("mpe2.simple_spread_v3")
    return mpe2.parallel_env()


LEARNING = {
    "simple_spread": (_spread, RunSpec().trainer.replace(num_envs=16, rollout_steps=64), 10),
    "memory_gru": (MEMORY, _config(num_envs=16, rollout_steps=32, minibatch_size=256, n_epochs=4, learning_rate=3e-3,
                                   rnn_hidden_size=32, bptt_length=8, hidden_sizes=(32,), recurrent="gru"), 40),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(LEARNING))
def test_cuda_and_cpu_runs_end_within_their_seeds_spread(task):
    env_fn, config, iterations = LEARNING[task]
    seeds = (0, 1, 2)
    ends = {
        device: [_final_return(env_fn, config.replace(device=device, seed=s), iterations) for s in seeds]
        for device in ("cpu", "cuda")
    }
    spread = max(max(v) - min(v) for v in ends.values())
    gap = abs(statistics.fmean(ends["cuda"]) - statistics.fmean(ends["cpu"]))
    assert gap <= spread + 1e-6, ends
