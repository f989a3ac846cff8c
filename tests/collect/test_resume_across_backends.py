"""A run saved with one collection backend (or number of workers) resumes bit-identically with another."""

import itertools

import pytest
import torch
from rollout_checks import FIELDS

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.collect import CollectionConfig
from marljoint.env import SubprocessJointEnv
from marljoint.run.migrations import migrate_checkpoint
from marljoint_envs import kuhn_poker_v0, variable_agents_v0

BACKENDS = {
    "local": CollectionConfig(),
    "subprocess-2": CollectionConfig("subprocess", 2),
    "subprocess-3": CollectionConfig("subprocess", 3),
}


def _trainer(env_fn, collection):
    config = JointTrainerConfig(num_envs=5, rollout_steps=12, minibatch_size=30, n_epochs=1, seed=4)
    config = config.replace(collection=collection)
    return JointMultiAgentTrainer.from_env(collection.make_env(env_fn, config.num_envs, config.seed), config)


def _rollout(trainer):
    ro = trainer.collect_rollout()
    return {name: getattr(ro, name).clone() for name in FIELDS}


@pytest.mark.parametrize("env_fn", [variable_agents_v0.parallel_env, kuhn_poker_v0.env], ids=["variable", "kuhn"])
@pytest.mark.parametrize("saved_with,resumed_with", list(itertools.permutations(sorted(BACKENDS), 2)))
def test_a_run_resumes_bit_identically_with_another_backend(env_fn, saved_with, resumed_with):
    first = _trainer(env_fn, BACKENDS[saved_with])
    try:
        first.update(first.collect_rollout())
        state, env_state = first.state_dict(), first.env_state()
        expected = _rollout(first)
    finally:
        first.close()
        first.env.close()
    second = _trainer(env_fn, BACKENDS[resumed_with])
    try:
        second.load_state_dict(state)
        second.load_env_state(env_state)
        again = _rollout(second)
    finally:
        second.close()
        second.env.close()
    for name in FIELDS:
        assert torch.equal(again[name], expected[name]), name


def test_the_env_snapshot_cuts_and_joins_at_any_split():
    env = PettingZooJointEnv(variable_agents_v0.parallel_env, num_envs=5)
    env.reset(seed=2)
    snapshot = env.get_state()
    pieces = PettingZooJointEnv.split_state(snapshot, [(0, 2), (2, 5)])
    assert [PettingZooJointEnv.state_copies(p) for p in pieces] == [2, 3]
    part = PettingZooJointEnv(variable_agents_v0.parallel_env, num_envs=3, first_copy=2)
    restored = part.set_state(pieces[1])
    for x, y in zip(restored.obs, env.set_state(snapshot).obs):
        assert (x == y[2:]).all()
    whole = PettingZooJointEnv(variable_agents_v0.parallel_env, num_envs=5)
    again = whole.set_state(PettingZooJointEnv.join_states(pieces))
    for x, y in zip(again.obs, env.set_state(snapshot).obs):
        assert (x == y).all()
    with pytest.raises(ValueError, match=r"slices \[\(0, 6\)\] do not fit the snapshot's 5 copies"):
        PettingZooJointEnv.split_state(snapshot, [(0, 6)])


def test_a_state_of_another_number_of_copies_is_refused():
    small = _trainer(variable_agents_v0.parallel_env, CollectionConfig("subprocess", 2))
    sub = SubprocessJointEnv(variable_agents_v0.parallel_env, num_envs=4, num_workers=3)
    try:
        small.collect_rollout()
        state = small.env_state()
        other = JointMultiAgentTrainer.from_env(sub, small.config.replace(num_envs=4))
        with pytest.raises(ValueError, match="the saved state holds 5 env copies, this collector has 4"):
            other.load_env_state(state)
    finally:
        small.env.close()
        sub.close()


@pytest.mark.parametrize("resumed_with", ["local", "subprocess-3"])
def test_an_old_checkpoint_with_the_noise_generators_in_the_trainer_state_resumes_on_any_backend(resumed_with):
    # Older checkpoints kept the in-process noise generators in state_dict()["copy_generators"] and the env alone
    # in env_state(): the run layer's migration moves them into the env state, for whichever collector resumes.
    first = _trainer(variable_agents_v0.parallel_env, BACKENDS["local"])
    first.update(first.collect_rollout())
    state, env_state = first.state_dict(), first.env_state()
    state["copy_generators"] = env_state.pop("copy_generators")
    expected = _rollout(first)
    checkpoint = migrate_checkpoint({"trainer": state, "env": env_state})
    second = _trainer(variable_agents_v0.parallel_env, BACKENDS[resumed_with])
    try:
        second.load_state_dict(checkpoint["trainer"])
        second.load_env_state(checkpoint["env"])
        again = _rollout(second)
    finally:
        second.env.close()
    for name in FIELDS:
        assert torch.equal(again[name], expected[name]), name
