"""The user's snapshot key and the signatures under it: where the key lives, how it is created, what is refused."""

from __future__ import annotations

import multiprocessing as mp
import os
import stat

import pytest

from marljoint import trust
from marljoint.trust import (
    HOME_VARIABLE,
    SnapshotTrustError,
    TrustKeyError,
    is_signed,
    key_path,
    resign,
    sign,
    user_key,
    verify,
)


def test_the_session_key_lives_in_the_test_directory_never_the_users_own(snapshot_key_home):
    assert key_path() == snapshot_key_home / "snapshot.key"
    assert len(user_key()) == 32 and key_path().is_file()
    assert stat.S_IMODE(key_path().stat().st_mode) == 0o600


def test_the_key_directory_follows_marljoint_home_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv(HOME_VARIABLE, str(tmp_path / "mj"))
    assert key_path() == tmp_path / "mj" / "snapshot.key"
    monkeypatch.delenv(HOME_VARIABLE)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert key_path() == tmp_path / "xdg" / "marljoint" / "snapshot.key"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert key_path() == tmp_path / "home" / ".config" / "marljoint" / "snapshot.key"


def _key_in(home: str, results) -> None:
    os.environ[HOME_VARIABLE] = home
    results.put(user_key())


def test_processes_creating_the_key_at_once_all_get_the_same_one(tmp_path):
    home = str(tmp_path / "fresh")
    context = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    results = context.Queue()
    workers = [context.Process(target=_key_in, args=(home, results)) for _ in range(4)]
    for worker in workers:
        worker.start()
    keys = {results.get(timeout=60) for _ in workers}
    for worker in workers:
        worker.join(timeout=60)
    assert len(keys) == 1 and (tmp_path / "fresh" / "snapshot.key").read_bytes() in keys
    assert [p.name for p in (tmp_path / "fresh").iterdir()] == ["snapshot.key"]  # no temporary file left


def test_signed_bytes_verify_and_anything_else_is_refused():
    payload = b"pickled env copies"
    signed = sign(payload)
    assert is_signed(signed) and not is_signed(payload)
    assert verify(signed) == payload
    with pytest.raises(SnapshotTrustError, match=r"not signed.*--trust-snapshot \(trust_snapshot=True in Python\)"):
        verify(payload)
    with pytest.raises(SnapshotTrustError, match=r"does not match this user's key .*snapshot.key"):
        verify(sign(payload, key=b"o" * 32))
    with pytest.raises(SnapshotTrustError, match="does not match"):
        verify(signed[:-1] + b"X")  # altered after signing


def test_resign_vouches_for_foreign_or_unsigned_bytes():
    foreign = sign(b"theirs", key=b"o" * 32)
    assert verify(resign(foreign)) == b"theirs"
    assert verify(resign(b"unsigned")) == b"unsigned"
    assert verify(resign(sign(b"mine")), key=user_key()) == b"mine"


def _key_home(monkeypatch, tmp_path):
    """A fresh key directory, with no key cached in this process."""
    monkeypatch.setenv(HOME_VARIABLE, str(tmp_path))
    monkeypatch.setattr(trust, "_keys", {})
    monkeypatch.setattr(trust, "_adopted", None)
    return tmp_path / "snapshot.key"


def _private_file(path, data):
    path.write_bytes(data)
    path.chmod(0o600)


@pytest.mark.parametrize(("data", "size"), [(b"short", 5), (b"", 0), (b"k" * 33, 33)])
def test_a_key_file_of_the_wrong_size_is_refused_naming_it(monkeypatch, tmp_path, data, size):
    path = _key_home(monkeypatch, tmp_path)
    _private_file(path, data)
    with pytest.raises(TrustKeyError, match=rf"key file .*snapshot.key holds {size} bytes, not 32: .*delete it"):
        user_key()


def test_a_directory_in_place_of_the_key_is_refused(monkeypatch, tmp_path):
    _key_home(monkeypatch, tmp_path).mkdir()
    with pytest.raises(TrustKeyError, match=r"key file .*snapshot.key is a directory; delete it \(a new key is made"):
        user_key()


@pytest.mark.skipif(os.name == "nt", reason="symbolic links need privileges on Windows")
def test_a_key_that_is_a_symbolic_link_is_refused_even_to_a_good_key(monkeypatch, tmp_path):
    path = _key_home(monkeypatch, tmp_path / "home")
    path.parent.mkdir()
    _private_file(tmp_path / "elsewhere.key", b"k" * 32)
    path.symlink_to(tmp_path / "elsewhere.key")
    with pytest.raises(TrustKeyError, match=r"snapshot.key is a symbolic link \(to .*elsewhere.key\): .*chmod 600"):
        user_key()


@pytest.mark.skipif(os.name == "nt", reason="symbolic links need privileges on Windows")
def test_a_dangling_link_in_place_of_the_key_is_refused_not_followed(monkeypatch, tmp_path):
    path = _key_home(monkeypatch, tmp_path / "home")
    path.parent.mkdir()
    path.symlink_to(tmp_path / "gone.key")
    with pytest.raises(TrustKeyError, match=r"symbolic link \(to .*gone.key, which does not exist\)"):
        user_key()
    assert not (tmp_path / "gone.key").exists()  # no key was written through the link


@pytest.mark.skipif(os.name == "nt", reason="Windows has no POSIX mode bits: the check is skipped there")
@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602, 0o640, 0o604])
def test_a_key_open_to_other_users_is_refused_with_chmod_600(monkeypatch, tmp_path, mode):
    path = _key_home(monkeypatch, tmp_path)
    _private_file(path, b"k" * 32)
    path.chmod(mode)
    with pytest.raises(TrustKeyError, match=rf"snapshot.key has mode {mode:04o}, open to other users: .*chmod 600 "):
        user_key()
    path.chmod(0o600)
    assert user_key() == b"k" * 32


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file away needs root")
def test_a_key_owned_by_another_user_is_refused(monkeypatch, tmp_path):
    path = _key_home(monkeypatch, tmp_path)
    _private_file(path, b"k" * 32)
    os.chown(path, 4242, -1)
    with pytest.raises(TrustKeyError, match=r"snapshot.key is owned by user id 4242, not by you \(0\).*delete it"):
        user_key()


def test_a_key_refused_when_a_snapshot_is_saved_is_reported_as_the_key_not_as_the_env(monkeypatch, tmp_path):
    from marljoint import PettingZooJointEnv
    from marljoint_envs import counter_v0

    env = PettingZooJointEnv(counter_v0.parallel_env, num_envs=1, seed=0)
    env.reset(seed=0)
    _private_file(_key_home(monkeypatch, tmp_path), b"short")
    with pytest.raises(TrustKeyError, match="holds 5 bytes"):
        env.get_state()
    env.close()


def test_a_key_refused_in_an_env_worker_process_is_reported_as_the_key(monkeypatch, tmp_path):
    from marljoint.env import SubprocessJointEnv
    from marljoint_envs import counter_v0

    _private_file(_key_home(monkeypatch, tmp_path), b"short")  # set before the workers start: they read it
    env = SubprocessJointEnv(counter_v0.parallel_env, num_envs=2, num_workers=2, seed=0)
    try:
        env.reset(seed=0)
        with pytest.raises(TrustKeyError, match="snapshot.key holds 5 bytes"):
            env.get_state()
    finally:
        env.close()


def test_without_hard_links_the_key_is_created_exclusively(monkeypatch, tmp_path):
    def no_links(source, target):
        raise OSError("hard links are not supported here")

    monkeypatch.setenv(HOME_VARIABLE, str(tmp_path / "fat"))
    monkeypatch.setattr(trust.os, "link", no_links)
    key = user_key()
    assert (tmp_path / "fat" / "snapshot.key").read_bytes() == key and len(key) == 32
    assert stat.S_IMODE((tmp_path / "fat" / "snapshot.key").stat().st_mode) == 0o600
    assert [p.name for p in (tmp_path / "fat").iterdir()] == ["snapshot.key"]


def test_an_adopted_key_wins_over_the_key_file_so_a_ray_worker_checks_with_the_drivers_key(monkeypatch, tmp_path):
    driver_key = b"d" * 32
    signed_by_driver = sign(b"state", key=driver_key)
    monkeypatch.setenv(HOME_VARIABLE, str(tmp_path))  # a node without the driver's key file
    monkeypatch.setattr(trust, "_keys", {})
    monkeypatch.setattr(trust, "_adopted", None)
    with pytest.raises(SnapshotTrustError):
        verify(signed_by_driver)
    trust.adopt_key(driver_key)
    assert user_key() == driver_key
    assert verify(signed_by_driver) == b"state"


def test_adopting_a_key_that_is_not_32_bytes_is_refused(monkeypatch):
    monkeypatch.setattr(trust, "_adopted", None)
    with pytest.raises(SnapshotTrustError, match="a snapshot key is 32 bytes, got bytes of 5"):
        trust.adopt_key(b"short")
    assert trust._adopted is None
