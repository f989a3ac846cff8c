"""Balanced work: the rule that sizes the workers' slices by their speed, the moves of copies between workers, and
the promise that no move changes a bit of any rollout (subprocess and Ray, recurrent and turn-based, resume)."""

import itertools

import pytest
import torch

from marljoint import CollectionConfig, JointMultiAgentTrainer, JointTrainerConfig
from marljoint.collect import SubprocessCollector, WorkBalancer, proportional_slices
from marljoint.env import SubprocessJointEnv
from marljoint_envs import kuhn_poker_v0, mock_v0, variable_agents_v0


# ------------------------------------------------------------------ the rule
@pytest.mark.parametrize(
    ("num_envs", "speeds", "slices"),
    [
        (16, [1.0, 1.0], [(0, 8), (8, 16)]),
        (16, [1.0, 3.0], [(0, 4), (4, 16)]),
        (5, [1.0, 1.0, 1.0], [(0, 2), (2, 4), (4, 5)]),
        (3, [1.0, 1000.0, 1.0], [(0, 1), (1, 2), (2, 3)]),  # every worker keeps one copy
        (10, [2.0, 1.0, 1.0], [(0, 5), (5, 8), (8, 10)]),
    ],
)
def test_slices_follow_the_speeds_and_every_worker_keeps_a_copy(num_envs, speeds, slices):
    assert proportional_slices(num_envs, speeds) == slices


def test_bad_speeds_and_too_few_copies_are_refused():
    with pytest.raises(ValueError, match=r"every worker's speed must be positive and finite, got \[1.0, 0.0\]"):
        proportional_slices(4, [1.0, 0.0])
    with pytest.raises(ValueError, match="3 env copies cannot be handed to 4 workers"):
        proportional_slices(3, [1.0] * 4)


def test_the_balancer_moves_copies_only_when_it_saves_enough_time():
    balancer = WorkBalancer([(0, 8), (8, 16)], window=2, min_gain=0.1)
    # Equal speeds: nothing to gain, nothing moves.
    assert balancer.observe([1.0, 1.05]) is None and balancer.observe([1.0, 1.0]) is None
    # Worker 1 takes twice as long per copy: after a full window, it gets a third of the copies.
    assert balancer.observe([1.0, 2.0]) is None
    assert balancer.observe([1.0, 2.0]) == [(0, 11), (11, 16)]
    assert balancer.slices == [(0, 11), (11, 16)] and balancer.moves == 1
    # Balanced now (11 copies at 1/8 s, 5 at 1/4 s each): the split stays.
    assert balancer.observe([11 / 8, 5 / 4]) is None and balancer.observe([11 / 8, 5 / 4]) is None
    # A small imbalance below min_gain moves nothing.
    steady = WorkBalancer([(0, 8), (8, 16)], window=1, min_gain=0.2)
    assert steady.observe([1.0, 1.2]) is None


def test_bad_balancer_settings_are_refused():
    with pytest.raises(ValueError, match="the slices must be contiguous non-empty"):
        WorkBalancer([(0, 4), (5, 8)])
    with pytest.raises(ValueError, match="window must be a positive integer, got 0"):
        WorkBalancer([(0, 4), (4, 8)], window=0)
    with pytest.raises(ValueError, match=r"min_gain must be in \[0, 1\), got 1.5"):
        WorkBalancer([(0, 4), (4, 8)], min_gain=1.5)
    with pytest.raises(ValueError, match="2 workers, but 3 busy times were given"):
        WorkBalancer([(0, 4), (4, 8)]).observe([1.0, 1.0, 1.0])


def test_the_config_and_the_env_refuse_what_cannot_be_balanced():
    with pytest.raises(ValueError, match="backend 'local' has none, so use backend 'subprocess' or 'ray'"):
        CollectionConfig(balance=True)
    with pytest.raises(ValueError, match="collection balance must be true or false, got 'yes'"):
        CollectionConfig("subprocess", 2, balance="yes")
    assert "balance" not in CollectionConfig("subprocess", 2).to_dict()
    assert CollectionConfig.from_value(CollectionConfig("ray", 2, balance=True).to_dict()).balance is True
    env = SubprocessJointEnv(mock_v0.parallel_env, num_envs=4, num_workers=2)
    try:
        for bad in ([(0, 4)], [(0, 2), (3, 4)], [(0, 0), (0, 4)], [(0, 2), (2, 5)]):
            with pytest.raises(ValueError, match="reslice needs 2 contiguous non-empty"):
                env.reslice(bad)
    finally:
        env.close()


# ------------------------------------------------------------------ moves change no bit
SPLITS = ([(0, 1), (1, 5)], [(0, 4), (4, 5)], [(0, 2), (2, 5)])


class _EveryRollout:
    """A balancer that moves the copies after every rollout, cycling through :data:`SPLITS`."""

    def __init__(self):
        self.slices = list(SPLITS[-1])
        self.moves = 0
        self._next = itertools.cycle(SPLITS)

    def observe(self, busy_seconds):
        assert len(busy_seconds) == 2 and all(s > 0 for s in busy_seconds)
        self.slices = list(next(self._next))
        self.moves += 1
        return self.slices


def _train(collection, env_fn, iterations=4, moving=False, resume_after=None, **cfg):
    settings = dict(
        num_envs=5, rollout_steps=8, minibatch_size=20, n_epochs=2, hidden_sizes=(16,), seed=4, torch_threads=1
    )
    config = JointTrainerConfig(**{**settings, **cfg}, collection=collection)

    def build():
        trainer = JointMultiAgentTrainer.from_env(collection.make_env(env_fn, config.num_envs, 4), config)
        inner = getattr(trainer.collector, "inner", trainer.collector)
        if moving:
            inner.balancer = _EveryRollout()
        return trainer, inner

    trainer, inner = build()
    try:
        for k in range(iterations):
            if resume_after is not None and k == resume_after:
                saved = (trainer.state_dict(), trainer.env_state())
                trainer.close()
                trainer, inner = build()
                trainer.load_state_dict(saved[0])
                trainer.load_env_state(saved[1])
            trainer.iterate()
        if moving:
            assert inner.balancer.moves >= 1  # (a move of the rollout in flight may still be on its way)
        return [p.detach().clone() for network in trainer.policies for p in network.parameters()]
    finally:
        trainer.close()


def _same(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize(
    ("env_fn", "cfg"),
    [
        (variable_agents_v0.parallel_env, {}),
        (variable_agents_v0.parallel_env, {"recurrent": "gru", "bptt_length": 4}),
        (kuhn_poker_v0.env, {"share_parameters": False}),
    ],
    ids=["dying-agents", "recurrent", "turn-based"],
)
def test_moving_copies_between_subprocess_workers_changes_no_bit(env_fn, cfg):
    local = _train(CollectionConfig(), env_fn, **cfg)
    moved = _train(CollectionConfig("subprocess", 2, balance=True), env_fn, moving=True, **cfg)
    assert _same(local, moved)


def test_moves_with_overlapped_collection_and_across_resume_change_no_bit():
    lagged = CollectionConfig("subprocess", 2, policy_lag=1)
    plain = _train(lagged, variable_agents_v0.parallel_env)
    balanced = lagged.replace(balance=True)
    assert _same(plain, _train(balanced, variable_agents_v0.parallel_env, moving=True))
    assert _same(plain, _train(balanced, variable_agents_v0.parallel_env, moving=True, resume_after=2))


def test_moving_copies_between_ray_actors_changes_no_bit():
    pytest.importorskip("ray")
    local = _train(CollectionConfig(), variable_agents_v0.parallel_env, iterations=3)
    moved = _train(CollectionConfig("ray", 2, balance=True), variable_agents_v0.parallel_env, iterations=3, moving=True)
    assert _same(local, moved)


def test_the_trainer_gets_a_balancer_only_when_asked():
    env = SubprocessJointEnv(mock_v0.parallel_env, num_envs=4, num_workers=2)
    try:
        assert isinstance(SubprocessCollector(env, 0, balance=True).balancer, WorkBalancer)
        assert SubprocessCollector(env, 0).balancer is None
    finally:
        env.close()


class _Recording:
    """A balancer that keeps what it is shown and never moves a copy."""

    def __init__(self):
        self.seen = []

    def observe(self, busy_seconds):
        self.seen.append(list(busy_seconds))


@pytest.mark.parametrize("backend", ["subprocess", "ray"])
def test_each_worker_reports_how_long_its_slice_took(backend):
    if backend == "ray":
        pytest.importorskip("ray")
    collection = CollectionConfig(backend, 2, balance=True)
    config = JointTrainerConfig(num_envs=5, rollout_steps=8, minibatch_size=20, n_epochs=1, collection=collection)
    trainer = JointMultiAgentTrainer.from_env(collection.make_env(variable_agents_v0.parallel_env, 5, 0), config)
    try:
        trainer.collector.balancer = recording = _Recording()
        assert trainer.collector.busy_seconds == []
        for _ in range(2):
            trainer.collect_rollout()
            busy = trainer.collector.busy_seconds
            assert len(busy) == 2 and all(0 < s < 60 for s in busy)
            assert recording.seen[-1] == busy  # the balancer weighs exactly these
        assert len(recording.seen) == 2 and recording.seen[0] != recording.seen[1]
    finally:
        trainer.close()
