"""The subprocess collector: policies run in a SubprocessJointEnv's workers, with the in-process results."""

import warnings

import numpy as np
import pytest
import torch
from pettingzoo.utils.wrappers import BaseParallelWrapper
from rollout_checks import assert_same_parameters, assert_same_rollout

from marljoint import EnvCopyError, JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv, SubprocessJointEnv
from marljoint.collect import CollectionConfig, LocalCollector, SubprocessCollector, make_collector
from marljoint.trust import SnapshotTrustError, sign
from marljoint_envs import counter_v0, kuhn_poker_v0, variable_agents_v0


def _collection(mode, workers=2):
    return CollectionConfig("subprocess", workers) if mode == "subprocess" else CollectionConfig()


def test_trainer_results_match_sync_mode():
    def run(mode):
        cfg = JointTrainerConfig(
            num_envs=4, rollout_steps=16, minibatch_size=32, n_epochs=1, collection=_collection(mode), torch_threads=1
        )
        env = cfg.collection.make_env(variable_agents_v0.parallel_env, cfg.num_envs, cfg.seed)
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


def _spread():
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(N=3, max_cycles=10)


def _trainer(env_fn, mode, num_envs=5, num_env_workers=2, **cfg):
    cfg.setdefault("rollout_steps", 16)
    cfg.setdefault("minibatch_size", 40)
    cfg.setdefault("n_epochs", 2)
    cfg.setdefault("seed", 11)
    cfg.setdefault("torch_threads", 1)  # the learner's bits depend on its thread count: the same in both modes
    config = JointTrainerConfig(num_envs=num_envs, collection=_collection(mode, num_env_workers), **cfg)
    env = config.collection.make_env(env_fn, config.num_envs, config.seed)
    return JointMultiAgentTrainer.from_env(env, config)


def _lockstep(sync, sub, iterations=3):
    for _ in range(iterations):
        a, b = sync.collect_rollout(), sub.collect_rollout()
        assert_same_rollout(a, b)
        sync.update(a)
        sub.update(b)
        assert_same_parameters(sync, sub)
    for x, y in zip(_current(sync).obs, _current(sub).obs):
        np.testing.assert_array_equal(x, y)


def _current(trainer):
    """Where the trainer's next rollout starts, as the env shows it."""
    collector = trainer.collector
    return collector.env.current() if isinstance(collector, SubprocessCollector) else collector.current


@pytest.mark.parametrize(
    "env_fn,cfg",
    [
        # agents dying and joining mid-episode, one shared network
        (variable_agents_v0.parallel_env, {}),
        # centralised critic, one network per agent, truncations, 3 + 2 copies per worker
        (_spread, {"share_parameters": False, "centralized_critic": True}),
        # a shared centralised critic run once per frame: its n_g-wide value head on 5 rows, then on 3 and 2
        (_spread, {"centralized_critic": True, "critic_per_frame": True}),
        # turn-based AEC env with action masks
        (kuhn_poker_v0.env, {"value_normalization": True}),
    ],
    ids=["variable_agents", "spread", "spread_critic_per_frame", "kuhn"],
)
def test_policies_in_workers_give_the_sync_rollouts_and_parameters(env_fn, cfg):
    sync, sub = _trainer(env_fn, "sync", **cfg), _trainer(env_fn, "subprocess", **cfg)
    try:
        _lockstep(sync, sub)
        assert sub.collector.in_workers
        # the env state the workers left behind is the env's state: a lockstep step continues from it
        actions = sub.act(_current(sub))
        np.testing.assert_array_equal(sub.env.step(actions).rewards, sync.env.step(sync.act(_current(sync))).rewards)
    finally:
        sub.env.close()


def test_a_second_trainer_on_the_same_env_rebuilds_the_workers_copies():
    sync_env = PettingZooJointEnv(variable_agents_v0.parallel_env, num_envs=4)
    sub_env = SubprocessJointEnv(variable_agents_v0.parallel_env, num_envs=4, num_workers=2)
    try:
        for seed in (1, 2):
            cfg = JointTrainerConfig(
                num_envs=4, rollout_steps=8, minibatch_size=16, n_epochs=1, seed=seed, torch_threads=1
            )
            a = JointMultiAgentTrainer.from_env(sync_env, cfg)
            b = JointMultiAgentTrainer.from_env(sub_env, cfg.replace(collection=CollectionConfig("subprocess")))
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
            sub.collect_rollout()
        assert sub.collector.in_workers is False
        sync.collect_rollout()
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
        # Named as the env copy that raised, with the env's exception type and message.
        with pytest.raises(EnvCopyError, match=r"env copy 0 raised ValueError: the copy broke at step 3 \(in step"):
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
    cfg = JointTrainerConfig(num_envs=4, rollout_steps=8, minibatch_size=16, n_epochs=1, seed=3, torch_threads=1)
    sync = JointMultiAgentTrainer.from_env(PettingZooJointEnv(variable_agents_v0.parallel_env, num_envs=4), cfg)
    env = SubprocessJointEnv(variable_agents_v0.parallel_env, num_envs=4, num_workers=2, start_method="spawn")
    try:
        sub = JointMultiAgentTrainer.from_env(env, cfg.replace(collection=CollectionConfig("subprocess")))
        _lockstep(sync, sub, iterations=2)
        assert sub.collector.in_workers
    finally:
        env.close()


def test_a_local_collector_over_a_subprocess_env_steps_in_the_workers_with_the_same_results():
    sync = _trainer(variable_agents_v0.parallel_env, "sync")
    env = SubprocessJointEnv(variable_agents_v0.parallel_env, num_envs=5, num_workers=2)
    try:
        sub = JointMultiAgentTrainer.from_env(env, sync.config)
        assert isinstance(sub.collector, LocalCollector)
        _lockstep(sync, sub, iterations=2)
    finally:
        env.close()


def test_backends_that_do_not_fit_the_env_are_refused():
    env = PettingZooJointEnv(counter_v0.parallel_env, num_envs=2)
    with pytest.raises(ValueError, match="backend 'subprocess' plays the rollouts in a SubprocessJointEnv's workers"):
        make_collector(env, CollectionConfig("subprocess"), seed=0)
    with pytest.raises(TypeError, match="the subprocess collector needs a SubprocessJointEnv, got PettingZooJointEnv"):
        SubprocessCollector(env, seed=0)


def test_a_state_no_collector_could_have_written_is_refused():
    sub = _trainer(counter_v0.parallel_env, "subprocess", num_envs=2)
    try:
        with pytest.raises(ValueError, match="lacks some Ray workers' snapshots"):
            sub.load_env_state({"workers": [None, None]})
        with pytest.raises(SnapshotTrustError, match="the env snapshot is not signed"):
            sub.load_env_state({"env": b"not a state"})
        with pytest.raises(ValueError, match="the env state cannot be unpickled"):
            sub.load_env_state({"env": sign(b"not a state")})
    finally:
        sub.env.close()
