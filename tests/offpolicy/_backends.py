"""One short off-policy run per algorithm over any JointEnv, and the bit-for-bit comparison of two runs."""

from __future__ import annotations

import functools

from rollout_checks import same_state

from marljoint import PettingZooJointEnv
from marljoint.collect.snapshots import joined_generators, read_state
from marljoint.offpolicy import OffPolicyConfig, OffPolicyTrainer
from marljoint_envs import identity_v0, mock_v0

from ._helpers import TINY

ALGORITHMS = ("vdn", "qmix", "masac", "maddpg")
NUM_ENVS = 4
DISCRETE = functools.partial(mock_v0.parallel_env, num_agents=2, max_cycles=5)
BOX = functools.partial(identity_v0.parallel_env, action_type="box", box_dim=3)
# Discrete actions for the value methods, Box actions for the actor-critics (one network per agent).
ENV_FNS = {"vdn": DISCRETE, "qmix": DISCRETE, "masac": BOX, "maddpg": BOX}
SETTINGS = {
    "vdn": {"exploration_steps": 10_000},
    "qmix": {"exploration_steps": 10_000},
    "masac": {"share_parameters": False},
    "maddpg": {"share_parameters": False},
}


def trainer_on(env, algorithm: str, collection=None) -> OffPolicyTrainer:
    """A tiny trainer of ``algorithm`` over ``env`` (NUM_ENVS copies of ENV_FNS[algorithm], any backend)."""
    settings = {**TINY, "num_envs": NUM_ENVS, **SETTINGS[algorithm]}
    return OffPolicyTrainer(env, OffPolicyConfig(algorithm=algorithm, **settings), collection=collection)


def assert_same_run(a: OffPolicyTrainer, b: OffPolicyTrainer) -> None:
    """Networks, targets, optimisers, replay storage, generators and counters are equal bit for bit."""
    assert a.env_steps == b.env_steps and a.gradient_steps == b.gradient_steps > 0
    state_a, state_b = a.state_dict(), b.state_dict()
    for key in state_a:
        assert same_state(state_a[key], state_b[key]), key
    generators = [copy_generator_states(t) for t in (a, b)]
    assert generators[0] is not None and same_state(*generators)


def copy_generator_states(trainer: OffPolicyTrainer) -> list:
    """Every copy's exploration generator state, in copy order, whichever backend collected."""
    return joined_generators(read_state(trainer.env_state()))


def assert_gives_the_in_process_run(algorithm: str, make_env, collection=None, env_fn=None) -> None:
    """A short run over ``make_env(env_fn, num_envs, seed)`` (collected as ``collection`` says; ``env_fn``
    defaults to ENV_FNS[algorithm]) equals the same run over in-process copies."""
    env_fn = ENV_FNS[algorithm] if env_fn is None else env_fn
    local = trainer_on(PettingZooJointEnv(env_fn, num_envs=NUM_ENVS, seed=0), algorithm)
    local.train(64)
    env = make_env(env_fn, NUM_ENVS, 0)
    try:
        remote = trainer_on(env, algorithm, collection)
        try:
            remote.train(64)
            assert_same_run(local, remote)
        finally:
            remote.close()
    finally:
        env.close()
