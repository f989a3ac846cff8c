"""Overlapped collection (policy_lag=1): the schedule it promises, the same bits on every backend and across
resume, and the settings it refuses."""

import copy

import pytest
import torch

from marljoint import CollectionConfig, JointMultiAgentTrainer, JointTrainerConfig
from marljoint.collect import OverlappedCollector
from marljoint_envs import kuhn_poker_v0, variable_agents_v0


def build(collection, seed=2, env_fn=variable_agents_v0.parallel_env, **cfg):
    # One learner thread on every backend: the learner's bits depend on its thread count.
    settings = dict(
        num_envs=4, rollout_steps=12, minibatch_size=24, n_epochs=2, hidden_sizes=(16,), seed=seed, torch_threads=1
    )
    config = JointTrainerConfig(**{**settings, **cfg}, collection=collection)
    return JointMultiAgentTrainer.from_env(collection.make_env(env_fn, config.num_envs, seed), config)


def parameters(trainer):
    return [p.detach().clone() for network in trainer.policies for p in network.parameters()]


def same(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def lagged_run(collection, iterations=4, resume=None, **cfg):
    """Parameters after ``iterations``; ``resume``: a second trainer (this collection) takes over after 2."""
    trainer = build(collection, **cfg)
    try:
        for k in range(iterations):
            if resume is not None and k == 2:
                saved = (trainer.state_dict(), trainer.env_state())
                trainer.close()
                trainer = build(resume, seed=7, **cfg)
                trainer.load_state_dict(saved[0])
                trainer.load_env_state(saved[1])
            trainer.iterate()
        return parameters(trainer)
    finally:
        trainer.close()


def test_each_rollout_is_collected_with_the_weights_from_before_the_previous_update():
    lagged = lagged_run(CollectionConfig("subprocess", 2, policy_lag=1))
    # The same schedule by hand, collecting in step: rollout k + 1 is taken before update k, and each update is the
    # decoupled one that policy lag 1 uses.
    trainer = build(CollectionConfig("subprocess", 2))
    trainer.learner.decoupled = True
    try:
        rollout = copy.deepcopy(trainer.collect_rollout())
        for _ in range(4):
            following = copy.deepcopy(trainer.collect_rollout())
            trainer.update(rollout)
            rollout = following
        assert same(lagged, parameters(trainer))
    finally:
        trainer.close()
    assert not same(lagged, lagged_run(CollectionConfig("subprocess", 2)))  # lag 0 differs: the lag is real


def test_a_lagged_update_centres_its_trust_region_on_the_weights_it_starts_from():
    # One epoch of one minibatch: the statistics are those of the ratio before the step. Under lag 1 the rollout
    # is a whole update old; against its behaviour log-probs a fast learner's ratios already leave the clip range,
    # against the proximal policy (the decoupled objective) they start at 1.
    settings = dict(learning_rate=0.05, n_epochs=1, minibatch_size=48)
    lag = CollectionConfig("subprocess", 2, policy_lag=1)
    clipped = {}
    for decoupled in (True, False):
        trainer = build(lag, **settings)
        trainer.learner.decoupled = decoupled
        try:
            stats = [trainer.update(trainer.collect_rollout()) for _ in range(5)][1:]  # the first is not stale yet
        finally:
            trainer.close()
        clipped[decoupled] = [max(s.clip_fraction) for s in stats]
        if decoupled:
            assert all(max(s.approx_kl) < 1e-6 for s in stats), [s.approx_kl for s in stats]
    assert clipped[True] == [0.0] * 4 and max(clipped[False]) > 0.2, clipped
    assert build(lag).learner.decoupled and not build(CollectionConfig("subprocess", 2)).learner.decoupled


def test_a_lagged_run_resumes_exactly_with_the_rollout_it_had_collected_ahead():
    lag = CollectionConfig("subprocess", 2, policy_lag=1)
    assert same(lagged_run(lag), lagged_run(lag, resume=lag))
    assert same(lagged_run(lag), lagged_run(lag, resume=CollectionConfig("subprocess", 3, policy_lag=1)))


def test_ray_and_subprocess_workers_give_the_same_lagged_bits():
    pytest.importorskip("ray")
    assert same(lagged_run(CollectionConfig("subprocess", 2, policy_lag=1)),
                lagged_run(CollectionConfig("ray", 2, policy_lag=1)))


@pytest.mark.parametrize(
    ("env_fn", "cfg"),
    [(kuhn_poker_v0.env, {}), (variable_agents_v0.parallel_env, {"recurrent": "gru", "bptt_length": 4})],
)
def test_turn_based_games_and_recurrent_policies_lag_deterministically(env_fn, cfg):
    lag = CollectionConfig("subprocess", 2, policy_lag=1)
    first = lagged_run(lag, env_fn=env_fn, **cfg)
    assert same(first, lagged_run(lag, env_fn=env_fn, **cfg))
    assert same(first, lagged_run(lag, resume=lag, env_fn=env_fn, **cfg))


def test_the_trainer_gets_an_overlapped_collector_and_bad_lags_are_refused():
    trainer = build(CollectionConfig("subprocess", 2, policy_lag=1))
    try:
        assert isinstance(trainer.collector, OverlappedCollector)
    finally:
        trainer.close()
    with pytest.raises(ValueError, match="collection policy_lag must be 0 or 1, got 2"):
        CollectionConfig("subprocess", 2, policy_lag=2)
    with pytest.raises(ValueError, match="backend 'local' collects in this process, so use backend 'subprocess'"):
        CollectionConfig(policy_lag=1)


def test_closing_the_env_while_a_rollout_is_collected_ahead_waits_for_it():
    collection = CollectionConfig("subprocess", 2, policy_lag=1)
    trainer = build(collection)
    trainer.iterate()  # leaves the next rollout in flight
    trainer.env.close()  # the caller's thread: waits for the workers' exchange instead of cutting into it
    assert trainer.env.closed


def test_the_rollout_being_trained_on_is_never_the_one_being_filled():
    trainer = build(CollectionConfig("subprocess", 2, policy_lag=1))
    try:
        collector = trainer.collector
        returned = [collector.collect(trainer.joint_policy, 12) for _ in range(3)]
        kept = [copy.deepcopy(r.rewards) for r in returned[-1:]]
        collector._settle()  # the rollout collected ahead has been written meanwhile
        assert returned[0] is not returned[1] and returned[1] is not returned[2]
        assert returned[0] is returned[2]  # two buffers, alternating
        assert torch.equal(returned[-1].rewards, kept[0])
    finally:
        trainer.close()
