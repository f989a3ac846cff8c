"""Worker-process env copies: same streams as in-process, errors re-raised, clean shutdown."""

import functools

import numpy as np
import pytest

from marljoint import PettingZooJointEnv, SubprocessJointEnv
from marljoint.env import EnvWorker, check_joint_env, make_joint_env, random_actions
from marljoint.run.migrations import migrate_collection_keys
from marljoint.trust import SnapshotTrustError, sign
from marljoint_envs import counter_v0, kuhn_poker_v0, variable_agents_v0


def _stream(env, steps=40, seed=3):
    rng = np.random.default_rng(0)
    state = env.reset(seed=seed)
    out = [np.concatenate([o.reshape(-1) for o in state.obs])]
    for _ in range(steps):
        step = env.step(random_actions(env, state, rng))
        out += [
            np.concatenate([o.reshape(-1) for o in step.obs]),
            step.rewards.copy(),
            step.terminated.copy(),
            step.truncated.copy(),
            step.alive.copy(),
            step.episode_returns.copy(),
        ]
        out += [f.copy() for f in step.final_obs]
        state = step
    return out


@pytest.mark.parametrize(
    "env_fn",
    [
        functools.partial(counter_v0.parallel_env, terminate_at={"agent_1": 3}, truncate_at=5),
        variable_agents_v0.parallel_env,
        kuhn_poker_v0.env,
    ],
    ids=["counter", "variable_agents", "kuhn"],
)
def test_same_streams_as_in_process(env_fn):
    sync = PettingZooJointEnv(env_fn, num_envs=5)
    sub = SubprocessJointEnv(env_fn, num_envs=5, num_workers=2)
    try:
        for a, b in zip(_stream(sync), _stream(sub)):
            np.testing.assert_array_equal(a, b)
        check_joint_env(sub, num_steps=30)
    finally:
        sub.close()


def test_worker_errors_are_reraised_with_their_message():
    env = SubprocessJointEnv(counter_v0.parallel_env, num_envs=2, num_workers=2)
    try:
        env.reset(seed=0)
        with pytest.raises(ValueError, match=r"out of range for head 0 with 3 choices"):
            env.step([np.full((2, 2), 7, np.int64)])
    finally:
        env.close()


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_workers must be a positive integer"):
        SubprocessJointEnv(counter_v0.parallel_env, num_envs=2, num_workers=0)
    with pytest.raises(ValueError, match="vector_mode must be 'sync' or 'subprocess'"):
        make_joint_env(counter_v0.parallel_env, 2, vector_mode="threads")
    with pytest.raises(ValueError, match="vector_mode must be 'sync' or 'subprocess'"):
        migrate_collection_keys({"vector_mode": "threads"})
    env = SubprocessJointEnv(counter_v0.parallel_env, num_envs=2, num_workers=1)
    try:
        with pytest.raises(RuntimeError, match="before reset"):
            env.step([np.zeros((2, 2), np.int64)])
        env.reset(seed=0)
        with pytest.raises(ValueError, match=r"have shape \(3, 2\), expected \(2, 2\)"):
            env.step([np.zeros((3, 2), np.int64)])
    finally:
        env.close()


def test_a_state_from_another_split_is_refused():
    a = SubprocessJointEnv(counter_v0.parallel_env, num_envs=4, num_workers=2)
    b = SubprocessJointEnv(counter_v0.parallel_env, num_envs=4, num_workers=3)
    try:
        a.reset(seed=0)
        with pytest.raises(ValueError, match=r"split \[\(0, 2\), \(2, 4\)\] over 2 workers, this one splits them"):
            b.set_state(a.get_state())
        with pytest.raises(SnapshotTrustError, match="the env snapshot is not signed"):
            b.set_state(b"not a state")
        with pytest.raises(ValueError, match="the env state cannot be unpickled"):
            b.set_state(sign(b"not a state"))
    finally:
        a.close()
        b.close()


def _step_with(worker, value):
    """Run in a worker: steps the copies with actions ``value`` and says where it runs."""
    out = worker.env.step([np.full((worker.stop - worker.start, 2), value, np.int64)])
    worker.state = out
    return worker.index, worker.start, worker.stop, worker.total


def test_functions_run_in_every_worker_on_its_own_copies_and_the_env_keeps_nothing_else():
    env = SubprocessJointEnv(counter_v0.parallel_env, num_envs=5, num_workers=2)
    twin = PettingZooJointEnv(counter_v0.parallel_env, num_envs=5)
    try:
        env.reset(seed=4)
        twin.reset(seed=4)
        assert env.run_in_workers(_step_with, 0) == [(0, 0, 2, 5), (1, 2, 5, 5)]
        assert env.run_in_workers(_step_with, 0) == [(0, 0, 2, 5), (1, 2, 5, 5)]
        # A worker only steps envs: what a caller's functions keep between calls is theirs to hold.
        assert not hasattr(EnvWorker(0, twin, 0, 5, 5), "store")
        for _ in range(2):
            expected = twin.step([np.zeros((5, 2), np.int64)])
        # the state the function left is published: the main process sees the copies where the workers left them
        for a, b in zip(env.current().obs, expected.obs):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(
            env.step([np.ones((5, 2), np.int64)]).rewards, twin.step([np.ones((5, 2), np.int64)]).rewards
        )
    finally:
        env.close()


def _fails(worker):
    raise ValueError(f"worker {worker.index} refuses")


def test_an_error_in_a_function_run_in_the_workers_is_reraised():
    env = SubprocessJointEnv(counter_v0.parallel_env, num_envs=2, num_workers=2)
    try:
        with pytest.raises(ValueError, match="worker 0 refuses"):
            env.run_in_workers(_fails)
    finally:
        env.close()


def test_the_env_layer_first_copy_seeds_a_slice_as_its_copies_of_the_whole_set():
    whole = PettingZooJointEnv(variable_agents_v0.parallel_env, num_envs=5)
    part = PettingZooJointEnv(variable_agents_v0.parallel_env, num_envs=3, first_copy=2)
    a, b = whole.reset(seed=9), part.reset(seed=9)
    for x, y in zip(a.obs, b.obs):
        np.testing.assert_array_equal(x[2:], y)
    with pytest.raises(ValueError, match="first_copy must be an integer >= 0, got -1"):
        PettingZooJointEnv(counter_v0.parallel_env, num_envs=2, first_copy=-1)
