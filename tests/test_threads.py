"""The thread policy: every process computes on the cores it may use, a collecting process on one thread, and the
learner on the cores the env workers leave free."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import marljoint.ppo.derived
import marljoint.threads
from marljoint import CollectionConfig, JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.env import SubprocessJointEnv
from marljoint.threads import THREAD_ENV_VARS, auto_workers, learner_threads, limit_threads, usable_cores
from marljoint_envs import mock_v0


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    environment = {name: os.environ.get(name) for name in THREAD_ENV_VARS}
    yield
    torch.set_num_threads(before)
    for name, value in environment.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _cores(monkeypatch, count):
    monkeypatch.setattr(marljoint.threads, "usable_cores", lambda: count)
    monkeypatch.setattr(marljoint.ppo.derived, "usable_cores", lambda: count)


def test_the_learner_takes_the_cores_the_workers_leave_and_one_when_it_collects():
    assert learner_threads(15, collects=False, cores=16)[0] == 1
    assert learner_threads(4, collects=False, cores=16)[0] == 12
    assert learner_threads(8, collects=False, cores=4)[0] == 1  # more workers than cores: still one
    threads, reason = learner_threads(0, collects=True, cores=64)
    assert threads == 1 and "collects the rollouts itself" in reason
    assert "less the 4 that the env workers take" in learner_threads(4, collects=False, cores=16)[1]


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: learner_threads(-1, collects=False, cores=4), "workers must be an integer >= 0, got -1"),
        (lambda: learner_threads(2, collects=False, cores=0), "cores must be a positive integer, got 0"),
        (lambda: limit_threads(0), "count must be a positive integer, got 0"),
        (lambda: limit_threads(True), "count must be a positive integer, got True"),
    ],
)
def test_bad_counts_are_refused_naming_the_value(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_auto_workers_leave_a_core_for_the_learner_and_hold_a_copy_each():
    assert auto_workers(64, cores=16) == 15
    assert auto_workers(4, cores=16) == 4
    assert auto_workers(64, cores=2) == 1
    assert auto_workers(64, cores=1) == 0


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs os.sched_setaffinity (Linux)")
def test_usable_cores_reads_the_processes_cpu_affinity():
    first = min(os.sched_getaffinity(0))
    code = "import marljoint.threads as t; print(t.usable_cores())"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {first}),
    )  # fmt: skip
    assert out.stdout.strip() == "1"
    assert usable_cores() == len(os.sched_getaffinity(0))


def test_limit_threads_sets_torch_and_the_thread_pools_environment(restore_threads):
    torch.set_num_threads(2)
    limit_threads(1)
    assert torch.get_num_threads() == 1
    assert all(os.environ[name] == "1" for name in THREAD_ENV_VARS)


def _trainer(monkeypatch, cores, **cfg):
    _cores(monkeypatch, cores)
    config = JointTrainerConfig(**{"num_envs": 2, "rollout_steps": 4, "n_epochs": 1, **cfg})
    env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=2, seed=0)
    return JointMultiAgentTrainer.from_env(env, config)


def test_auto_gives_one_thread_to_a_learner_that_collects_in_process(monkeypatch, restore_threads):
    torch.set_num_threads(2)
    trainer = _trainer(monkeypatch, 16)
    assert JointTrainerConfig().torch_threads == "auto"
    assert trainer.config.torch_threads == 1 and torch.get_num_threads() == 1
    assert "collects the rollouts itself" in trainer.derived["torch_threads"]


def test_auto_gives_the_learner_the_cores_its_workers_leave(monkeypatch, restore_threads):
    _cores(monkeypatch, 4)
    config = JointTrainerConfig(num_envs=2, rollout_steps=4, n_epochs=1, collection=CollectionConfig("subprocess", 2))
    env = config.collection.make_env(mock_v0.parallel_env, 2, 0)
    try:
        trainer = JointMultiAgentTrainer.from_env(env, config)
        assert trainer.config.torch_threads == 2 and torch.get_num_threads() == 2
        assert trainer.derived["torch_threads"].startswith("2: the 4 cores")
        # The workers that play the rollouts compute on one thread each, whatever the learner's count.
        trainer.collect_rollout()
        counts = env.run_in_workers(_worker_threads)
        assert counts == [(1, "1"), (1, "1")]
    finally:
        env.close()


def _worker_threads(worker):
    return torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")


def test_env_workers_compute_on_one_thread(restore_threads):
    torch.set_num_threads(2)
    env = SubprocessJointEnv(mock_v0.parallel_env, num_envs=2, num_workers=2, seed=0)
    try:
        assert env.run_in_workers(_worker_threads) == [(1, "1"), (1, "1")]
    finally:
        env.close()


def test_an_explicit_count_wins_and_one_above_the_cores_warns(monkeypatch, restore_threads):
    trainer = _trainer(monkeypatch, 4, torch_threads=3)
    assert trainer.config.torch_threads == 3 and torch.get_num_threads() == 3 and "torch_threads" not in trainer.derived
    with pytest.warns(UserWarning, match="torch_threads=6 is more than the 4 cores this process may use"):
        _trainer(monkeypatch, 4, torch_threads=6)


def test_none_leaves_torchs_own_setting(monkeypatch, restore_threads):
    torch.set_num_threads(2)
    trainer = _trainer(monkeypatch, 16, torch_threads=None)
    assert trainer.config.torch_threads is None and torch.get_num_threads() == 2


@pytest.mark.parametrize("value", ["many", 0, 2.0, True])
def test_torch_threads_must_be_a_count_auto_or_none(value):
    with pytest.raises(ValueError, match="torch_threads must be a positive integer, 'auto' .* or None"):
        JointTrainerConfig(torch_threads=value)
