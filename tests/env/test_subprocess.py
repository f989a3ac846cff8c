"""Worker-process env copies: same streams as in-process, errors re-raised, clean shutdown."""

import functools

import numpy as np
import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv, SubprocessJointEnv
from marljoint.env import check_joint_env, make_joint_env, random_actions
from marljoint_envs import counter_v0, kuhn_poker_v0, variable_agents_v0


def _stream(env, steps=40, seed=3):
    rng = np.random.default_rng(0)
    state = env.reset(seed=seed)
    out = [np.concatenate([o.reshape(-1) for o in state.obs])]
    for _ in range(steps):
        step = env.step(random_actions(env, state, rng))
        out += [np.concatenate([o.reshape(-1) for o in step.obs]), step.rewards.copy(), step.terminated.copy(),
                step.truncated.copy(), step.alive.copy(), step.episode_returns.copy()]
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


def test_trainer_results_match_sync_mode():
    def run(mode):
        cfg = JointTrainerConfig(num_envs=4, rollout_steps=16, minibatch_size=32, n_epochs=1, vector_mode=mode)
        env = make_joint_env(variable_agents_v0.parallel_env, cfg.num_envs, cfg.seed, cfg.vector_mode, cfg.num_env_workers)
        try:
            trainer = JointMultiAgentTrainer.from_env(env, cfg)
            ro = trainer.collect_rollout()
            trainer.update(ro)
            return ro.rewards.clone(), [p.detach().clone() for p in trainer.policies[0].parameters()]
        finally:
            env.close()

    (r1, p1), (r2, p2) = run("sync"), run("subprocess")
    assert torch.equal(r1, r2)
    assert all(torch.equal(a, b) for a, b in zip(p1, p2))


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
        JointTrainerConfig(vector_mode="threads")
    env = SubprocessJointEnv(counter_v0.parallel_env, num_envs=2, num_workers=1)
    try:
        with pytest.raises(RuntimeError, match="before reset"):
            env.step([np.zeros((2, 2), np.int64)])
        env.reset(seed=0)
        with pytest.raises(ValueError, match=r"have shape \(3, 2\), expected \(2, 2\)"):
            env.step([np.zeros((3, 2), np.int64)])
    finally:
        env.close()
