"""Env worker processes live exactly as long as the process they work for: they end with it however it ends (the
kernel's parent-death signal, and a watchdog where that is not available), they leave stopping to it (SIGINT and
SIGTERM are ignored), and one that dies is named when the env next talks to it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from marljoint.env import EnvWorkerDied, SubprocessJointEnv
from marljoint.env.lifetime import process_alive
from marljoint_envs import mock_v0

# A process that starts one child bound to it (without the kernel's help: the watchdog alone), prints the child's
# pid and waits to be killed; the child says when it is bound.
_OWNER = textwrap.dedent(
    """
    import multiprocessing as mp, os, sys, time
    from marljoint.env.lifetime import bind_to_owner

    def child(owner):
        bind_to_owner(owner, owner_is_parent=True, kernel=False)
        print("bound", flush=True)
        time.sleep(120)

    if __name__ == "__main__":
        process = mp.get_context(sys.argv[1]).Process(target=child, args=(os.getpid(),))
        process.start()
        print(process.pid, flush=True)
        time.sleep(120)
    """
)


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while process_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_the_watchdog_ends_a_worker_whose_owner_was_killed(tmp_path, method):
    script = tmp_path / "owner.py"
    script.write_text(_OWNER)
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(p) for p in sys.path if p])}
    owner = subprocess.Popen([sys.executable, str(script), method], stdout=subprocess.PIPE, text=True, env=environ)
    try:
        child = int(owner.stdout.readline())
        assert owner.stdout.readline() == "bound\n"
        assert process_alive(child)
        owner.kill()
        assert _gone_within(child, 5.0)
    finally:
        owner.kill()
        owner.communicate(timeout=30)
        if process_alive(child):
            os.kill(child, signal.SIGKILL)


def test_a_zombie_counts_as_gone():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while process_alive(process.pid) and time.monotonic() < deadline:  # exited, not yet reaped
        time.sleep(0.02)
    assert not process_alive(process.pid)
    assert process.poll() == 0
    assert process_alive(os.getpid())


def _actions(env):
    return [np.zeros((env.num_envs, g.size), np.int64) for g in env.spec.groups]


def test_a_killed_worker_is_named_and_the_env_closed():
    env = SubprocessJointEnv(mock_v0.parallel_env, num_envs=4, num_workers=2, seed=0)
    try:
        env.reset()
        env.step(_actions(env))
        pid = env._procs[1].pid
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(
            EnvWorkerDied, match=rf"^env worker 1 \(pid {pid}, env copies 2\.\.3\) was killed by SIGKILL; its env"
        ) as caught:
            env.step(_actions(env))
        assert (caught.value.worker, caught.value.copies, caught.value.exitcode) == (1, (2, 4), -signal.SIGKILL)
        assert env.closed
    finally:
        env.close()


def test_workers_leave_stopping_to_their_owner():
    env = SubprocessJointEnv(mock_v0.parallel_env, num_envs=2, num_workers=2, seed=0)
    try:
        env.reset()
        for proc in env._procs:  # as a terminal's Ctrl-C or a scheduler's SIGTERM reach every process of the job
            os.kill(proc.pid, signal.SIGINT)
            os.kill(proc.pid, signal.SIGTERM)
        time.sleep(0.3)
        env.step(_actions(env))
        assert all(proc.is_alive() for proc in env._procs)
    finally:
        env.close()
    assert not any(proc.is_alive() for proc in env._procs)


@pytest.mark.parametrize(
    "exitcode,how",
    [(-9, "was killed by SIGKILL"), (3, "exited with status 3"), (None, "died"), (-200, "was killed by signal 200")],
)
def test_how_a_worker_ended_is_said_plainly(exitcode, how):
    error = EnvWorkerDied(0, 17, (0, 1), exitcode)
    assert str(error) == f"env worker 0 (pid 17, env copy 0) {how}; its env copies are lost and the env is closed"
