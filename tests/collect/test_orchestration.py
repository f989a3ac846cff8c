"""One orchestration for every multi-process backend: SlicedCollector over any SliceTransport."""

import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.collect import (
    LocalCollector,
    RayCollector,
    SlicedCollector,
    SliceWorker,
    SubprocessCollector,
    WorkerCollector,
    split_copies,
)
from marljoint.collect.subprocess import PipeTransport
from marljoint_envs import variable_agents_v0

COPIES, SEED = 5, 3


class _InProcessTransport:
    """Slices played by SliceWorkers in this process: a transport with no processes at all."""

    def __init__(self, workers):
        self.slices = split_copies(COPIES, workers)
        self.plans = 0

    def adopt(self, plan):
        self.plans += 1
        self.workers = [
            SliceWorker(PettingZooJointEnv(variable_agents_v0.parallel_env, b - a, first_copy=a), SEED, COPIES, plan)
            for a, b in self.slices
        ]

    def play(self, weights, steps, behaviour):
        return [worker.collect(weights, steps, behaviour) for worker in self.workers]

    def state(self):
        return None

    def load_state(self, state):
        pass

    def reslice(self, slices):
        raise AssertionError("not balanced")

    def close(self):
        pass


def test_the_orchestration_over_any_transport_gives_the_one_process_rollout():
    config = JointTrainerConfig(num_envs=COPIES, rollout_steps=6, minibatch_size=10, n_epochs=1, seed=SEED)
    env = PettingZooJointEnv(variable_agents_v0.parallel_env, num_envs=COPIES, seed=SEED)
    policy = JointMultiAgentTrainer.from_env(env, config).joint_policy
    local = LocalCollector(PettingZooJointEnv(variable_agents_v0.parallel_env, num_envs=COPIES), SEED)
    transport = _InProcessTransport(workers=2)
    sliced = SlicedCollector(transport, env.spec, COPIES)
    for _ in range(2):
        want, got = local.collect(policy, 6), sliced.collect(policy, 6)
        for name in ("log_probs", "values", "rewards", "alive", "bootstrap_values"):
            assert torch.equal(getattr(got, name), getattr(want, name)), name
        assert all(torch.equal(a, b) for a, b in zip(got.actions, want.actions))
    assert transport.plans == 1 and sliced.in_workers and len(sliced.busy_seconds) == 2
    assert isinstance(sliced, WorkerCollector)


def test_both_backends_are_the_one_orchestration():
    assert issubclass(SubprocessCollector, SlicedCollector) and issubclass(RayCollector, SlicedCollector)
    assert {"adopt", "play", "state", "load_state", "reslice", "close"} <= set(vars(PipeTransport))


def test_a_collector_of_only_its_workers_refuses_to_act_here():
    class _Refusing(SlicedCollector):
        def _adopt(self, policy):
            return False

    config = JointTrainerConfig(num_envs=COPIES, rollout_steps=2, minibatch_size=10, n_epochs=1)
    env = PettingZooJointEnv(variable_agents_v0.parallel_env, num_envs=COPIES, seed=SEED)
    policy = JointMultiAgentTrainer.from_env(env, config).joint_policy
    with pytest.raises(RuntimeError, match="_Refusing acts in its workers only"):
        _Refusing(_InProcessTransport(1), env.spec, COPIES).collect(policy, 2)
