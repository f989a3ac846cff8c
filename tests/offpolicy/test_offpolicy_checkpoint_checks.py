"""What an off-policy trainer checks in a checkpoint before it uses it: the replay buffer's transitions against the
env's, and the env snapshot's signature (``trust_snapshot`` re-signs one the user vouches for)."""

import pytest
import torch

from marljoint.trust import SnapshotTrustError, resign

from ._helpers import mock_env, tiny_trainer


@pytest.fixture(scope="module")
def saved():
    trainer = tiny_trainer(algorithm="qmix")
    trainer.train(32)
    return trainer.state_dict(), trainer.env_state()


def _with_buffer_field(state, name, change):
    transitions = dict(state["buffer"]["transitions"])
    transitions[name] = change(transitions[name])
    return {**state, "buffer": {**state["buffer"], "transitions": transitions}}


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        (
            "obs",
            lambda obs: (torch.zeros((obs[0].shape[0], 2, 5)),),
            r"replay buffer holds obs of group 'agent_0' of shape \(2, 5\) torch.float32 per transition, but this "
            r"env's are \(2, 4\) torch.float32; it was saved from another env",
        ),
        (
            "next_obs",
            lambda obs: (obs[0].double(),),
            r"next_obs of group 'agent_0' of shape \(2, 4\) torch.float64 .* are \(2, 4\) torch.float32",
        ),
        ("actions", lambda a: a.float(), r"holds actions of shape \(2,\) torch.float32 .* are \(2,\) torch.int64"),
        ("next_masks", lambda m: (m[0], m[0]), r"holds next_masks of 2 agent groups, but this env has 1"),
    ],
)
def test_a_replay_buffer_of_another_env_is_refused_naming_what_differs(saved, name, change, message):
    state, _ = saved
    trainer = tiny_trainer(algorithm="qmix")
    before = [p.clone() for p in trainer.algorithm.networks[0].parameters()]
    with pytest.raises(ValueError, match=message):
        trainer.load_state_dict(_with_buffer_field(state, name, change))
    assert trainer.buffer is None  # refused before anything was restored
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.algorithm.networks[0].parameters()))


def test_a_matching_replay_buffer_loads(saved):
    trainer = tiny_trainer(algorithm="qmix")
    trainer.load_state_dict(saved[0])
    assert len(trainer.buffer) == 32


def test_a_foreign_env_snapshot_is_refused_unless_trusted(saved):
    state, env_state = saved
    foreign = {**env_state, "env": resign(env_state["env"], key=b"someone else's key 32 bytes long")}
    trainer = tiny_trainer(mock_env(), algorithm="qmix")
    trainer.load_state_dict(state)
    with pytest.raises(SnapshotTrustError, match=r"does not match this user's key .*trust_snapshot=True"):
        trainer.load_env_state(foreign)
    trainer.load_env_state(foreign, trust_snapshot=True)
    trainer.train(48)
    assert trainer.env_steps == 48


def _older_format(state):
    """``state`` as trainers wrote it before their rollouts were collected through marljoint.collect: moves held
    as ``pending_moves``, no legal actions at the decisions in the replay buffer."""
    older = {k: v for k, v in state.items() if k != "carried"}
    older["pending_moves"] = {"held": {}, "waiting": torch.zeros(2, 2, dtype=torch.bool)}
    transitions = {k: v for k, v in state["buffer"]["transitions"].items() if k != "masks"}
    return {**older, "buffer": {**state["buffer"], "transitions": transitions}}


def test_a_state_of_the_older_format_is_refused_in_one_line_and_migrated(saved):
    from marljoint.run.migrations import migrate_checkpoint, migrate_offpolicy_state

    older = _older_format(saved[0])
    with pytest.raises(ValueError, match=r"holds no 'carried' moves \(an older format, with 'pending_moves'\); load"):
        tiny_trainer(algorithm="qmix").load_state_dict(older)
    migrated = migrate_offpolicy_state(older)
    assert migrated["carried"] is None and "pending_moves" not in migrated
    assert all(m.all() for m in migrated["buffer"]["transitions"]["masks"])  # every action counts as legal
    resumed = tiny_trainer(algorithm="qmix")
    resumed.load_state_dict(migrate_checkpoint({"trainer": older, "env": saved[1]})["trainer"])
    resumed.load_env_state(saved[1])
    resumed.train(48)
    assert resumed.gradient_steps > 0 and len(resumed.buffer) == 48
