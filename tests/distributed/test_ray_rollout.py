"""Ray rollout workers: the same rollouts and parameters as one process, restarts after a worker dies, errors."""

import functools
import os

import numpy as np
import pytest
import torch
from pettingzoo.utils.wrappers import BaseParallelWrapper
from rollout_checks import FIELDS, assert_same_parameters, assert_same_rollout

from marljoint import EnvCopyError, JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.collect import CollectionConfig, RayCollector, WorkerLostError, split_copies
from marljoint.run.migrations import migrate_collection_keys
from marljoint.trust import SnapshotTrustError, sign
from marljoint_envs import kuhn_poker_v0, mock_v0, variable_agents_v0

pytestmark = pytest.mark.usefixtures("ray_local")


def spread(**kwargs):
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(N=3, max_cycles=10, **kwargs)


def make(env_fn, num_envs=4, num_workers=0, **cfg):
    cfg.setdefault("rollout_steps", 16)
    cfg.setdefault("minibatch_size", 32)
    cfg.setdefault("n_epochs", 2)
    cfg.setdefault("seed", 7)
    cfg.setdefault("torch_threads", 1)  # the learner's bits depend on its thread count: the same on both sides
    collection = CollectionConfig("ray", num_workers) if num_workers else CollectionConfig()
    config = JointTrainerConfig(num_envs=num_envs, collection=collection, **cfg)
    return JointMultiAgentTrainer.from_env(PettingZooJointEnv(env_fn, num_envs=num_envs), config)


def lockstep(local, remote, iterations=3, before=lambda iteration: None):
    """Collects and updates both trainers side by side, checking they stay bit-identical."""
    for iteration in range(iterations):
        before(iteration)
        b = remote.collect_rollout()  # Ray first: a worker meant to die does so before the local copies play
        a = local.collect_rollout()
        assert_same_rollout(a, b)
        local.update(a)
        remote.update(b)
        assert_same_parameters(local, remote)
    assert remote.env_steps == local.env_steps


def run_pair(env_fn, num_envs, num_workers, iterations=3, **cfg):
    local = make(env_fn, num_envs, **cfg)
    remote = make(env_fn, num_envs, num_workers=num_workers, **cfg)
    try:
        lockstep(local, remote, iterations)
    finally:
        remote.close()
    return local, remote


@pytest.mark.parametrize(
    "env_fn,num_envs,num_workers,cfg",
    [
        # agents that die and join mid-episode, a shared network
        (variable_agents_v0.parallel_env, 4, 2, {}),
        # truncation bootstrap, a centralised critic, one network per agent, uneven slices (3 + 2 copies)
        (spread, 5, 2, {"centralized_critic": True, "share_parameters": False}),
        # turn-based AEC env with action masks
        (kuhn_poker_v0.env, 3, 2, {"rollout_steps": 12}),
        # odd layer shapes, where matrix-product kernels sum in another order for another batch size
        (
            functools.partial(mock_v0.parallel_env, obs_dim=7, num_agents=3),
            3,
            2,
            {"share_parameters": False, "hidden_sizes": (512, 7)},
        ),
    ],
    ids=["variable-agents", "spread-independent", "kuhn-aec", "odd-shapes"],
)
def test_ray_workers_give_the_same_rollouts_and_parameters_as_one_process(env_fn, num_envs, num_workers, cfg):
    local, _ = run_pair(env_fn, num_envs, num_workers, **cfg)
    assert local.env_steps == 3 * cfg.get("rollout_steps", 16) * num_envs


def test_training_with_ray_workers_matches_the_in_process_history():
    local = make(variable_agents_v0.parallel_env, 4)
    remote = make(variable_agents_v0.parallel_env, 4, num_workers=2)
    try:
        h_local = local.train(4 * 16 * 3)
        h_remote = remote.train(4 * 16 * 3)
    finally:
        remote.close()
    keys = ("episode_return_mean", "agent_steps", "total_loss", "env_steps")
    table = np.array([[h[k] for k in keys] for h in h_local])
    assert np.isfinite(table).all()
    np.testing.assert_array_equal(table, np.array([[h[k] for k in keys] for h in h_remote]))
    assert_same_parameters(local, remote)


def test_a_killed_worker_is_restarted_from_its_snapshot_and_the_run_stays_identical(ray_local):
    local = make(variable_agents_v0.parallel_env, 4)
    remote = make(variable_agents_v0.parallel_env, 4, num_workers=2)
    try:
        lockstep(local, remote, before=lambda i: i == 2 and ray_local.kill(remote.collector.actors[1]))
        assert remote.collector.restarts == 1
    finally:
        remote.close()


class _CrashOnce(BaseParallelWrapper):
    """Kills its process at its ``at``-th step if it is the first copy to claim the marker file."""

    def __init__(self, env, marker, at):
        super().__init__(env)
        self.marker, self.at, self.count = marker, at, 0

    def step(self, actions):
        self.count += 1
        if self.count == self.at:
            try:
                os.remove(self.marker)
            except FileNotFoundError:
                pass
            else:
                os._exit(1)
        return super().step(actions)


def crash_once(marker, at):
    return _CrashOnce(variable_agents_v0.parallel_env(), marker, at)


def test_a_worker_dying_mid_rollout_is_replaced_and_its_share_recollected(tmp_path):
    marker = tmp_path / "crash"
    env_fn = functools.partial(crash_once, str(marker), 16 + 5)  # the 6th step of the second rollout
    local = make(env_fn, 4)
    remote = make(env_fn, 4, num_workers=2)
    try:
        # A worker claims the marker and dies; the in-process copies, which play after it, find none.
        lockstep(local, remote, before=lambda i: i == 1 and marker.touch())
        assert not marker.exists() and remote.collector.restarts == 1
    finally:
        remote.close()


def crash_outside(driver_pid):
    if os.getpid() != driver_pid:
        os._exit(1)
    return variable_agents_v0.parallel_env()


def test_a_worker_that_keeps_dying_raises_after_the_allowed_restarts():
    trainer = make(functools.partial(crash_outside, os.getpid()), 2, num_workers=1)
    trainer.collector.max_restarts = 1
    with pytest.raises(WorkerLostError, match=r"rollout worker 0 \(env copies 0\.\.1\) died 2 times"):
        trainer.collect_rollout()
    trainer.close()


class _FailingStep(BaseParallelWrapper):
    def step(self, actions):
        raise ValueError("this env refuses to step")


def fail_outside(driver_pid):
    env = variable_agents_v0.parallel_env()
    return env if os.getpid() == driver_pid else _FailingStep(env)


def test_an_error_raised_by_an_env_in_a_worker_reaches_the_caller_naming_the_copy_and_its_type():
    trainer = make(functools.partial(fail_outside, os.getpid()), 2, num_workers=1)
    try:
        with pytest.raises(EnvCopyError, match=r"^env copy 0 raised ValueError: this env refuses to step \(in step"):
            trainer.collect_rollout()
        assert trainer.collector.restarts == 0
    finally:
        trainer.close()


@pytest.mark.parametrize(
    "resumed_with",
    [{"num_workers": 2}, {"num_workers": 1}, {}, {"collection": CollectionConfig("subprocess", 3)}],
    ids=["ray-2", "ray-1", "local", "subprocess-3"],
)
def test_resuming_from_state_dict_and_env_state_continues_bit_identically(resumed_with):
    first = make(variable_agents_v0.parallel_env, 4, num_workers=2)
    try:
        for _ in range(2):
            first.update(first.collect_rollout())
        state, env_state = first.state_dict(), first.env_state()
        assert set(env_state) == {"workers"} and len(env_state["workers"]) == 2
        expected = first.collect_rollout()
        expected = {name: getattr(expected, name).clone() for name in FIELDS}
    finally:
        first.close()
    second = _resumed(variable_agents_v0.parallel_env, 4, resumed_with)
    try:
        _assert_resumes_to(second, state, env_state, expected)
        with pytest.raises(SnapshotTrustError, match="the env snapshot is not signed"):
            second.load_env_state({"env": b""})
        with pytest.raises(ValueError, match="the env state cannot be unpickled"):
            second.load_env_state({"env": sign(b"")})
        with pytest.raises(ValueError, match="lacks some Ray workers' snapshots"):
            second.load_env_state({"workers": [env_state["workers"][0], None]})
    finally:
        second.close()
        second.env.close()


def test_an_in_process_run_resumes_on_ray_workers_bit_identically():
    first = make(kuhn_poker_v0.env, 5)
    first.update(first.collect_rollout())
    state, env_state = first.state_dict(), first.env_state()
    expected = first.collect_rollout()
    expected = {name: getattr(expected, name).clone() for name in FIELDS}
    second = make(kuhn_poker_v0.env, 5, num_workers=2)
    try:
        _assert_resumes_to(second, state, env_state, expected)
    finally:
        second.close()


def _assert_resumes_to(trainer, state, env_state, expected):
    """Loads a checkpoint into ``trainer``; its next rollout must be ``expected`` bit for bit."""
    trainer.load_state_dict(state)
    trainer.load_env_state(env_state)
    again = trainer.collect_rollout()
    for name in FIELDS:
        assert torch.equal(getattr(again, name), expected[name]), name


def _resumed(env_fn, num_envs, changes):
    if "collection" in changes:
        cfg = JointTrainerConfig(
            num_envs=num_envs, rollout_steps=16, minibatch_size=32, n_epochs=2, seed=7, torch_threads=1
        )
        cfg = cfg.replace(collection=changes["collection"])
        return JointMultiAgentTrainer.from_env(cfg.collection.make_env(env_fn, num_envs, cfg.seed), cfg)
    return make(env_fn, num_envs, **changes)


def test_env_state_is_none_before_the_first_ray_rollout():
    trainer = make(mock_v0.parallel_env, 2, num_workers=2)
    assert trainer.env_state() is None
    trainer.close()


def test_worker_slices_are_contiguous_and_cover_every_copy():
    assert split_copies(5, 3) == [(0, 2), (2, 3), (3, 5)]
    assert split_copies(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    with pytest.raises(ValueError, match="3 workers need at least as many env copies, got num_envs=2"):
        split_copies(2, 3)
    with pytest.raises(ValueError, match="a positive number of slices, got 0"):
        split_copies(2, 0)


def test_more_workers_than_env_copies_is_refused_when_building_the_trainer():
    with pytest.raises(ValueError, match="need at least as many env copies"):
        make(mock_v0.parallel_env, 2, num_workers=3)


def test_more_workers_than_ray_cpus_is_refused():
    trainer = make(mock_v0.parallel_env, 4, num_workers=3)
    with pytest.raises(ValueError, match="need 3 CPUs, but the Ray cluster has 2"):
        trainer.collect_rollout()


def test_an_env_without_a_factory_is_refused():
    class Bare:
        def __init__(self, env):
            self._env = env
            self.spec, self.num_envs = env.spec, env.num_envs

    env = Bare(PettingZooJointEnv(mock_v0.parallel_env, num_envs=2))
    with pytest.raises(ValueError, match="Bare has no env_fn; build the env with PettingZooJointEnv"):
        JointMultiAgentTrainer.from_env(env, JointTrainerConfig(num_envs=2, collection=CollectionConfig("ray")))


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"num_workers": -1}, "num_workers must be an integer >= 0"),
        ({"num_workers": 1.5}, "num_workers must be an integer >= 0"),
        ({"num_workers": 2, "vector_mode": "subprocess"}, "cannot be combined with vector_mode='subprocess'"),
    ],
)
def test_bad_legacy_ray_settings_are_refused(changes, match):
    with pytest.raises(ValueError, match=match):
        migrate_collection_keys(changes)


def test_workers_are_separate_processes():
    trainer = make(mock_v0.parallel_env, 2, num_workers=2)
    try:
        workers = trainer.collector
        assert isinstance(workers, RayCollector)
        trainer.collect_rollout()
        pids = workers.pids()
        assert len(set(pids)) == 2 and os.getpid() not in pids
    finally:
        trainer.close()


def test_marljoint_train_with_ray_workers_resumes_bit_identically(tmp_path):
    import csv

    from marljoint.cli import main

    def train(out, steps, *extra):
        args = ["train", "--out", str(out), "--total-steps", str(steps), "--checkpoint-every", "1", "--quiet"]
        assert main([*args, *extra]) == 0

    def losses(out):
        with (out / "metrics.csv").open() as f:
            return [(row["env_steps"], row["episode_return_mean"], row["total_loss"]) for row in csv.DictReader(f)]

    setup = ["--env", "variable_agents_v0", "--num-envs", "4", "--rollout-steps", "64", "--num-workers", "2"]
    train(tmp_path / "whole", 1024, *setup)
    train(tmp_path / "halves", 512, *setup)
    assert 'collection = {backend = "ray", workers = 2}' in (tmp_path / "halves" / "config.toml").read_text()
    train(tmp_path / "halves", 1024, "--resume")
    whole = losses(tmp_path / "whole")
    assert len(whole) == 4
    assert losses(tmp_path / "halves") == whole
    # Evaluation of a Ray run plays in-process (a run's num_workers need not fit the evaluation's few copies).
    assert main(["eval", str(tmp_path / "whole"), "--episodes", "1"]) == 0


def test_marljoint_train_ray_flag_defaults_to_two_workers(tmp_path, capsys):
    from marljoint.cli import main

    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--env",
                "mock_v0",
                "--num-envs",
                "2",
                "--ray",
                "--total-steps",
                "64",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    assert 'collection = {backend = "ray", workers = 2}' in (out / "config.toml").read_text()


def test_connect_ray_names_the_address_when_no_cluster_answers(monkeypatch):
    import ray

    from marljoint.distributed import connect_ray

    def refuse(**kwargs):
        raise ConnectionError("could not find any running Ray instance")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(ConnectionError, match=r"no Ray cluster answers at 'ray://head:10001' .*ray start --head"):
        connect_ray("ray://head:10001")
