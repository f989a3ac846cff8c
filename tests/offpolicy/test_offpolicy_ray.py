"""Env copies stepped in Ray actors (RayJointEnv) give the in-process off-policy run bit for bit, resume exactly,
and fail loudly when an actor dies or its env raises."""

import time

import numpy as np
import pytest
from pettingzoo.utils.wrappers import BaseParallelWrapper
from rollout_checks import same_state

from marljoint import EnvCopyError, PettingZooJointEnv, RayJointEnv
from marljoint.collect import WorkerLostError
from marljoint.env import SubprocessJointEnv

from ._backends import (
    ALGORITHMS,
    DISCRETE,
    ENV_FNS,
    NUM_ENVS,
    assert_gives_the_in_process_run,
    assert_same_run,
    trainer_on,
)

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.usefixtures("ray_local")


def ray_env(algorithm, num_workers=2):
    return RayJointEnv(ENV_FNS[algorithm], num_envs=NUM_ENVS, num_workers=num_workers, seed=0)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_ray_actors_give_the_in_process_transitions_and_weights(algorithm):
    assert_gives_the_in_process_run(
        algorithm, lambda env_fn, num_envs, seed: RayJointEnv(env_fn, num_envs, num_workers=2, seed=seed)
    )


@pytest.mark.parametrize("algorithm", ["qmix", "masac"])
def test_a_run_saved_over_ray_actors_resumes_bit_identically(algorithm, tmp_path):
    straight = trainer_on(PettingZooJointEnv(ENV_FNS[algorithm], num_envs=NUM_ENVS, seed=0), algorithm)
    straight.train(96)
    first_env = ray_env(algorithm)
    try:
        first = trainer_on(first_env, algorithm)
        first.train(48)  # mid-episode for some copies, after learning started
        first.save(tmp_path / "ckpt.pt")
    finally:
        first_env.close()
    resumed_env = ray_env(algorithm)
    try:
        resumed = trainer_on(resumed_env, algorithm)
        resumed.load(tmp_path / "ckpt.pt")
        resumed.train(96)
        assert_same_run(straight, resumed)
    finally:
        resumed_env.close()


def test_a_ray_snapshot_restores_into_subprocess_workers_of_the_same_split_and_back():
    env = RayJointEnv(DISCRETE, num_envs=3, num_workers=2, seed=5)
    workers = SubprocessJointEnv(DISCRETE, num_envs=3, num_workers=2, seed=5)
    try:
        env.reset(), workers.reset()
        actions = [np.ones((3, 2), np.int64)]
        for _ in range(2):
            env.step(actions)
        workers.set_state(env.get_state())
        a, b = env.step(actions), workers.step(actions)
        assert all(same_state(x, y) for x, y in zip(a[:-1], b[:-1]))  # final_waiting: None here, all False there
        restored = env.set_state(workers.get_state())
        assert same_state(restored.obs, workers.current().obs)
        one = SubprocessJointEnv(DISCRETE, num_envs=3, num_workers=1, seed=5)
        one.reset()
        with pytest.raises(ValueError, match=r"split \[\(0, 3\)\] over 1 workers, this one splits them"):
            env.set_state(one.get_state())
        one.close()
        assert "RayJointEnv(num_envs=3, num_workers=2" in repr(env) and env.slices == [(0, 2), (2, 3)]
    finally:
        env.close(), workers.close()


def _kill_and_wait(actor, timeout=60.0):
    """Kills a Ray actor and returns once it no longer answers (ray.kill only requests the kill)."""
    ray.kill(actor)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=10)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError(f"the Ray actor {actor} still answers {timeout} s after ray.kill")


def test_a_dead_actor_is_named_and_the_env_closed():
    env = RayJointEnv(DISCRETE, num_envs=2, num_workers=2, seed=0)
    with pytest.raises(RuntimeError, match=r"step\(\) was called before reset\(\)"):
        env.step([np.zeros((2, 2), np.int64)])
    env.reset()
    with pytest.raises(ValueError, match=r"actions for group \['agent_0', 'agent_1'\] have shape \(3, 2\)"):
        env.step([np.zeros((3, 2), np.int64)])
    _kill_and_wait(env.actors[1])
    with pytest.raises(WorkerLostError, match=r"env worker 1 \(the Ray actor stepping env copies 1\.\.1\) died"):
        env.step([np.zeros((2, 2), np.int64)])
    assert env.closed and not env.actors
    with pytest.raises(RuntimeError, match="is closed; build a new env"):
        env.reset()


class _ThirdCopyFails(BaseParallelWrapper):
    """mock_v0 whose copy 2 (first reset with seed 2) raises on its first step."""

    def reset(self, seed=None, options=None):
        if seed is not None and not hasattr(self, "first_seed"):
            self.first_seed = seed
        return super().reset(seed=seed, options=options)

    def step(self, actions):
        if self.first_seed == 2:
            raise ValueError("this copy refuses to step")
        return super().step(actions)


def test_an_env_error_in_an_actor_names_the_global_copy_and_closes_the_env():
    env = RayJointEnv(lambda: _ThirdCopyFails(DISCRETE()), num_envs=3, num_workers=2, seed=0)
    env.reset()
    with pytest.raises(EnvCopyError, match=r"^env copy 2 raised ValueError: this copy refuses to step \(in step"):
        env.step([np.zeros((3, 2), np.int64)])
    assert env.closed


@pytest.mark.parametrize("workers", [0, -1, True, 1.5])
def test_a_bad_number_of_actors_is_refused_before_ray_starts(workers):
    with pytest.raises(ValueError, match=rf"num_workers must be a positive integer, got {workers!r}"):
        RayJointEnv(DISCRETE, num_envs=2, num_workers=workers)
