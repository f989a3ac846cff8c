"""Worker-process env copies: same streams as in-process, errors re-raised, clean shutdown."""

import functools
import warnings

import numpy as np
import pytest
import torch
from pettingzoo.utils.wrappers import BaseParallelWrapper
from rollout_checks import assert_same_parameters, assert_same_rollout

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
        env = make_joint_env(
            variable_agents_v0.parallel_env, cfg.num_envs, cfg.seed, cfg.vector_mode, cfg.num_env_workers
        )
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


def _spread():
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(N=3, max_cycles=10)


def _trainer(env_fn, mode, num_envs=5, num_env_workers=2, **cfg):
    cfg.setdefault("rollout_steps", 16)
    cfg.setdefault("minibatch_size", 40)
    cfg.setdefault("n_epochs", 2)
    cfg.setdefault("seed", 11)
    config = JointTrainerConfig(num_envs=num_envs, vector_mode=mode, num_env_workers=num_env_workers, **cfg)
    env = make_joint_env(env_fn, config.num_envs, config.seed, config.vector_mode, config.num_env_workers)
    return JointMultiAgentTrainer.from_env(env, config)


def _lockstep(sync, sub, iterations=3):
    for _ in range(iterations):
        a, b = sync.collect_rollout(), sub.collect_rollout()
        assert_same_rollout(a, b)
        sync.update(a)
        sub.update(b)
        assert_same_parameters(sync, sub)
    for x, y in zip(sync._state.obs, sub._state.obs):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(
    "env_fn,cfg",
    [
        # agents dying and joining mid-episode, one shared network
        (variable_agents_v0.parallel_env, {}),
        # centralised critic, one network per agent, truncations, 3 + 2 copies per worker
        (_spread, {"share_parameters": False, "centralized_critic": True}),
        # turn-based AEC env with action masks
        (kuhn_poker_v0.env, {"value_normalization": True}),
    ],
    ids=["variable_agents", "spread", "kuhn"],
)
def test_policies_in_workers_give_the_sync_rollouts_and_parameters(env_fn, cfg):
    sync, sub = _trainer(env_fn, "sync", **cfg), _trainer(env_fn, "subprocess", **cfg)
    try:
        assert sub._collects_in_env_workers()
        _lockstep(sync, sub)
        # the env state the workers left behind is the env's state: a lockstep step continues from it
        state = sub._state
        actions = sub.act(state)
        np.testing.assert_array_equal(sub.env.step(actions).rewards, sync.env.step(sync.act(sync._state)).rewards)
    finally:
        sub.env.close()


def test_a_second_trainer_on_the_same_env_rebuilds_the_workers_copies():
    sync_env = PettingZooJointEnv(variable_agents_v0.parallel_env, num_envs=4)
    sub_env = SubprocessJointEnv(variable_agents_v0.parallel_env, num_envs=4, num_workers=2)
    try:
        for seed in (1, 2):
            cfg = JointTrainerConfig(num_envs=4, rollout_steps=8, minibatch_size=16, n_epochs=1, seed=seed)
            a = JointMultiAgentTrainer.from_env(sync_env, cfg)
            b = JointMultiAgentTrainer.from_env(sub_env, cfg)
            _lockstep(a, b, iterations=2)
    finally:
        sub_env.close()


def test_unpicklable_policies_fall_back_to_stepping_the_env_only():
    sync = _trainer(variable_agents_v0.parallel_env, "sync")
    sub = _trainer(variable_agents_v0.parallel_env, "subprocess")
    try:
        for trainer in (sync, sub):
            trainer.policies[0].probe = lambda x: x  # a local lambda: the module can no longer be pickled
        with pytest.warns(UserWarning, match="cannot be pickled to the env worker processes"):
            assert not sub._collects_in_env_workers()
        # the fallback steps copies in lockstep with one batch of all copies: the same results again
        _lockstep(sync, sub, iterations=2)
    finally:
        sub.env.close()


class _BreaksAtStep3(BaseParallelWrapper):
    def __init__(self, env):
        super().__init__(env)
        self.steps = 0

    def step(self, actions):
        self.steps += 1
        if self.steps == 3:
            raise ValueError("the copy broke at step 3")
        return super().step(actions)


def test_env_errors_inside_a_workers_rollout_are_reraised():
    sub = _trainer(lambda: _BreaksAtStep3(counter_v0.parallel_env()), "subprocess", num_envs=2)
    try:
        with pytest.raises(ValueError, match="the copy broke at step 3"):
            sub.collect_rollout()
    finally:
        sub.env.close()


@pytest.mark.parametrize("policies_in_workers", [True, False])
def test_resume_from_saved_state_continues_bit_identically(policies_in_workers):
    def fresh():
        trainer = _trainer(variable_agents_v0.parallel_env, "subprocess")
        if not policies_in_workers:
            trainer.policies[0].probe = lambda x: x  # unpicklable: the workers step the env only
        return trainer

    reference = _trainer(variable_agents_v0.parallel_env, "sync")
    for _ in range(2):
        reference.update(reference.collect_rollout())
    first = fresh()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            for _ in range(2):
                first.update(first.collect_rollout())
            saved, env_saved = first.state_dict(), first.env_state()
        finally:
            first.env.close()
        resumed = fresh()
        try:
            resumed.load_state_dict(saved)
            resumed.load_env_state(env_saved)
            _lockstep(reference, resumed, iterations=2)
        finally:
            resumed.env.close()


def test_a_state_from_another_split_is_refused():
    a = SubprocessJointEnv(counter_v0.parallel_env, num_envs=4, num_workers=2)
    b = SubprocessJointEnv(counter_v0.parallel_env, num_envs=4, num_workers=3)
    try:
        a.reset(seed=0)
        with pytest.raises(ValueError, match=r"split \[\(0, 2\), \(2, 4\)\] over 2 workers, this one splits them"):
            b.set_state(a.get_state())
        with pytest.raises(ValueError, match="the env state cannot be unpickled"):
            b.set_state(b"not a state")
    finally:
        a.close()
        b.close()


def test_learner_weights_travel_as_numpy_and_load_exactly():
    # A pipe would move every torch tensor into its own shared-memory segment each iteration; numpy arrays are
    # pickled as bytes. A tensor numpy cannot hold (bfloat16, a lazy conjugate) stays a tensor.

    source = _trainer(_spread, "sync", value_normalization=True)
    target = _trainer(_spread, "sync", value_normalization=True, seed=12)
    source.update(source.collect_rollout())
    weights = source.joint_policy.weights()
    leaves = [v for state in weights["policies"] for v in state.values()]
    leaves += list(weights["value_normalizer"].values())
    assert leaves and all(isinstance(v, np.ndarray) for v in leaves)
    for array in leaves:
        array.flags.writeable = False  # as Ray's object store hands them over
    target.joint_policy.load_weights(weights)
    assert_same_parameters(source, target)
    for key, value in source.value_normalizer.state_dict().items():
        torch.testing.assert_close(target.value_normalizer.state_dict()[key], value, rtol=0, atol=0)

    from marljoint.policies.joint import _as_numpy, _as_torch

    odd = {"half": torch.arange(4, dtype=torch.bfloat16), "conj": torch.tensor([1 + 2j, 3 - 1j]).conj()}
    shipped = _as_numpy(odd)
    assert all(isinstance(v, torch.Tensor) for v in shipped.values())
    back = _as_torch(shipped)
    for key, value in odd.items():
        assert torch.equal(back[key].resolve_conj(), value.resolve_conj())


def test_spawned_workers_give_the_sync_results():
    # spawn is the default start method on macOS and Windows: the workers import everything afresh and get the env
    # factory and the networks by pickling.
    cfg = JointTrainerConfig(num_envs=4, rollout_steps=8, minibatch_size=16, n_epochs=1, seed=3)
    sync = JointMultiAgentTrainer.from_env(PettingZooJointEnv(variable_agents_v0.parallel_env, num_envs=4), cfg)
    env = SubprocessJointEnv(variable_agents_v0.parallel_env, num_envs=4, num_workers=2, start_method="spawn")
    try:
        sub = JointMultiAgentTrainer.from_env(env, cfg)
        assert sub._collects_in_env_workers()
        _lockstep(sync, sub, iterations=2)
    finally:
        env.close()
