"""LocalCollector: the in-process collector the trainer uses, usable with any JointPolicy; the Collector protocol."""

import pytest
import torch
from rollout_checks import FIELDS, assert_same_rollout

from marljoint import Collector, JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv, SubprocessJointEnv
from marljoint.collect import JointRollout, LocalCollector, RayCollector, SubprocessCollector, rollout_storage
from marljoint_envs import kuhn_poker_v0


def _trainer():
    config = JointTrainerConfig(num_envs=4, rollout_steps=6, minibatch_size=12, n_epochs=1, seed=2)
    return JointMultiAgentTrainer.from_env(PettingZooJointEnv(kuhn_poker_v0.env, num_envs=4, seed=2), config)


def test_a_collector_on_a_joint_policy_plays_the_trainers_rollouts():
    trainer, other = _trainer(), _trainer()
    collector = LocalCollector(other.env, seed=2)
    assert collector.state() is None
    for _ in range(3):
        expected = trainer.collect_rollout()
        got = collector.collect(trainer.joint_policy, 6)
        expected.carried = expected.deferred = None  # linking rollouts is the trainer's; the rows are the same
        assert_same_rollout(expected, got)
    assert collector.current is not None and len(collector.copy_generators) == 4
    assert all(isinstance(g, torch.Generator) for g in collector.copy_generators)


def test_a_restored_collector_continues_bit_identically_and_refuses_what_no_collector_wrote():
    trainer = _trainer()
    first = LocalCollector(PettingZooJointEnv(kuhn_poker_v0.env, num_envs=4), seed=2)
    first.collect(trainer.joint_policy, 6)
    saved = first.state()
    assert set(saved) == {"env", "copy_generators"}
    expected = first.collect(trainer.joint_policy, 6)
    expected = {name: getattr(expected, name).clone() for name in FIELDS}
    second = LocalCollector(PettingZooJointEnv(kuhn_poker_v0.env, num_envs=4), seed=2)
    second.load_state(saved)
    again = second.collect(trainer.joint_policy, 6)
    for name in FIELDS:
        assert torch.equal(getattr(again, name), expected[name]), name
    with pytest.raises(ValueError, match="lacks some Ray workers' snapshots"):
        second.load_state({"workers": [None] * 3})
    with pytest.raises(ValueError, match=r"not a collector state: it has the keys \['envs'\]"):
        second.load_state({"envs": b""})


def test_the_storage_is_reused_while_its_shape_fits():
    spec = _trainer().spec
    storage = JointRollout.allocate(spec, 6, 4)
    assert rollout_storage(storage, spec, 6, 4, torch.device("cpu")) is storage
    assert rollout_storage(storage, spec, 7, 4, torch.device("cpu")) is not storage
    assert rollout_storage(None, spec, 6, 4, torch.device("cpu")).steps == 6


def test_every_backend_is_a_collector():
    env = PettingZooJointEnv(kuhn_poker_v0.env, num_envs=2)
    sub = SubprocessJointEnv(kuhn_poker_v0.env, num_envs=2, num_workers=2)
    try:
        collectors = [
            LocalCollector(env, seed=0),
            SubprocessCollector(sub, seed=0),
            RayCollector(kuhn_poker_v0.env, env.spec, 2, 2, seed=0),  # Ray starts with the first rollout
        ]
        assert all(isinstance(c, Collector) and c.num_envs == 2 for c in collectors)
        assert not isinstance(env, Collector)
    finally:
        sub.close()
