"""Env snapshots are unpickled only when signed with the user's key: in the adapter, in env worker processes and
where a collector reads a saved state; and a snapshot the user vouches for is re-signed whole."""

from __future__ import annotations

import builtins
import pickle

import pytest

from marljoint import PettingZooJointEnv, SubprocessJointEnv
from marljoint.collect.snapshots import read_state, trusted_state
from marljoint.trust import SnapshotTrustError, sign, verify
from marljoint_envs import counter_v0


class _WritesMarker:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (builtins.open, (self.marker, "w"))


def _crafted(marker) -> bytes:
    return pickle.dumps({"num_envs": 2, "envs": [_WritesMarker(marker)]})


def test_the_adapter_refuses_unsigned_or_foreign_snapshots_before_unpickling(tmp_path):
    marker = tmp_path / "ran"
    env = PettingZooJointEnv(counter_v0.parallel_env, num_envs=2)
    env.reset(seed=0)
    for crafted in (_crafted(marker), sign(_crafted(marker), key=b"o" * 32)):
        with pytest.raises(SnapshotTrustError, match="could run code"):
            env.set_state(crafted)
        with pytest.raises(SnapshotTrustError, match="could run code"):
            PettingZooJointEnv.state_copies(crafted)
        with pytest.raises(SnapshotTrustError, match="could run code"):
            PettingZooJointEnv.split_state(crafted, [(0, 1), (1, 2)])
        with pytest.raises(SnapshotTrustError, match="could run code"):
            PettingZooJointEnv.join_states([env.get_state(), crafted])
        with pytest.raises(SnapshotTrustError, match="could run code"):
            read_state({"env": crafted})
    assert not marker.exists()
    env.set_state(env.get_state())  # its own snapshots restore


def test_env_workers_refuse_a_crafted_snapshot_inside_a_signed_one(tmp_path):
    marker = tmp_path / "ran"
    env = SubprocessJointEnv(counter_v0.parallel_env, num_envs=4, num_workers=2)
    try:
        env.reset(seed=0)
        genuine = env.worker_states(env.get_state())
        with pytest.raises(SnapshotTrustError, match="signature does not match"):  # refused here, before the workers
            env.set_state(sign(pickle.dumps({"num_envs": 4, "slices": env.slices, "workers": genuine}), b"o" * 32))
        env.set_state(env.snapshot(genuine))
        # The outer layer is this user's, a worker's entry is not: the worker itself refuses it (and, as after any
        # error in a worker, the env is then closed).
        with pytest.raises(SnapshotTrustError, match="the env snapshot is not signed"):
            env.set_state(env.snapshot([genuine[0], _crafted(marker)]))
        assert not marker.exists()
    finally:
        env.close()


def test_a_trusted_state_is_re_signed_down_to_each_workers_snapshot():
    env = SubprocessJointEnv(counter_v0.parallel_env, num_envs=4, num_workers=2)
    try:
        env.reset(seed=0)
        foreign_key = b"f" * 32
        entries = [sign(verify(e), foreign_key) for e in env.worker_states(env.get_state())]
        foreign = sign(pickle.dumps({"num_envs": 4, "slices": env.slices, "workers": entries}), foreign_key)
        with pytest.raises(SnapshotTrustError):
            env.set_state(foreign)
        trusted = trusted_state({"env": foreign})
        assert trusted is not None
        env.set_state(trusted["env"])
        assert trusted_state(None) is None
    finally:
        env.close()
