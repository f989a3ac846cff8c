"""One writer per run directory: a run holds a kernel lock on its directory for its whole life; a second writer
(another run, a --force, a --resume, psro, nfsp) is refused at once with one line naming the holder, and changes
nothing; a killed run leaves its directory free.

The concurrent runs are real processes (``python -m marljoint``), held mid-iteration by the gate of
``_faulty_envs`` for as long as the test needs, so nothing here depends on timing.
"""

from __future__ import annotations

import csv
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from _product_helpers import run_cli

from marljoint import RunLock, RunLocked
from marljoint.run.lock import LOCK_FILE
from marljoint.run.train import RunError, RunSpec, train_run

ROOT = Path(__file__).resolve().parents[2]
ITERATION = 32  # env steps per iteration: 2 copies x 16 steps
CONFIG = "rollout_steps = 16\nminibatch_size = 32\nn_epochs = 1\nhidden_sizes = [16]\ncheckpoint_every = 1\n"
HANG_GUARD_S = 300.0
"""How long a helper process may take to reach a point before the test gives up (it never decides a result)."""


def _environ(**extra: str) -> dict[str, str]:
    paths = [str(ROOT), str(ROOT / "envs"), str(ROOT / "tests" / "product"), os.environ.get("PYTHONPATH", "")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTY_ENV")}
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in paths if p), **extra}


def _train_args(out: Path, config: Path, *extra: str) -> list[str]:
    return [
        "train", "--env", "_faulty_envs:faulty_mock", "--num-envs", "2", "--total-steps", str(4 * ITERATION),
        "--config", str(config), "--out", str(out), "--quiet", *extra,
    ]  # fmt: skip


def _marljoint(args: list[str], **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "marljoint", *args],
        env=_environ(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _wait_for(path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"the run ended ({proc.returncode}) before {path.name} appeared: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            pytest.fail(f"{path} did not appear")
        time.sleep(0.05)


def _snapshot(directory: Path) -> dict[Path, bytes]:
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _iterations(run_dir: Path) -> list[int]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [int(row["iteration"]) for row in csv.DictReader(f)]


@pytest.fixture()
def held_run(tmp_path):
    """A ``marljoint train`` process held at step 24 of copy 0 (iteration 2, after iteration 1 is logged and
    checkpointed); yields ``(process, out, gate)``; creating ``gate/release`` lets it finish."""
    config = tmp_path / "tiny.toml"
    config.write_text(CONFIG)
    out, gate = tmp_path / "run", tmp_path / "gate"
    gate.mkdir()
    proc = _marljoint(_train_args(out, config), FAULTY_ENV_GATE=str(gate), FAULTY_ENV_GATE_AT="24")
    try:
        _wait_for(gate / "waiting", proc)
        yield proc, out, gate
    finally:
        if proc.poll() is None:  # a test that needs no more of it
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_second_writers_are_refused_while_a_run_writes_and_change_nothing(held_run, tmp_path, capsys):
    proc, out, gate = held_run
    assert f'"pid": {proc.pid}' in (out / LOCK_FILE).read_text()
    before = _snapshot(out)
    config = tmp_path / "tiny.toml"
    refused = {
        "train": _train_args(out, config),
        "--force": _train_args(out, config, "--force"),
        "--resume": ["train", "--out", str(out), "--resume", "--quiet"],
        "psro": ["psro", "--env", "matrix_game_v0", "--out", str(out), "--iterations", "1", "--quiet"],
        "nfsp": ["nfsp", "--env", "kuhn_poker_v0", "--out", str(out), "--iterations", "1", "--quiet"],
    }
    for name, args in refused.items():
        assert run_cli(args) == 2, name
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, (name, err)
        assert f"{out} is being written by marljoint process {proc.pid} on host " in err, (name, err)
        assert "wait for it to finish, stop it, or choose another --out" in err, (name, err)
    assert _snapshot(out) == before
    (gate / "release").touch()
    assert proc.wait(timeout=HANG_GUARD_S) == 0, proc.stderr.read()
    assert _iterations(out) == [1, 2, 3, 4]
    assert not (out / LOCK_FILE).exists()  # released: the next writer is welcome
    assert run_cli(["train", "--out", str(out), "--resume", "--total-steps", str(5 * ITERATION), "--quiet"]) == 0
    assert _iterations(out) == [1, 2, 3, 4, 5]


def test_the_command_line_refuses_a_concurrent_resume_in_one_line_without_a_traceback(held_run):
    proc, out, _ = held_run
    second = _marljoint(["train", "--out", str(out), "--resume"])
    _, err = second.communicate(timeout=HANG_GUARD_S)
    assert second.returncode == 2
    assert err.strip().splitlines() == [
        f"marljoint train: error: {out} is being written by marljoint process {proc.pid} on host "
        f"{socket.gethostname()}; wait for it to finish, stop it, or choose another --out"
    ]


def test_a_run_killed_mid_iteration_leaves_its_directory_free_and_resumes(held_run, tmp_path):
    proc, out, _ = held_run
    os.kill(proc.pid, signal.SIGKILL)  # in iteration 2, iteration 1 checkpointed
    assert proc.wait(timeout=HANG_GUARD_S) == -signal.SIGKILL
    assert (out / LOCK_FILE).exists()  # the file stays behind; the kernel's lock went with the process
    assert run_cli(["train", "--out", str(out), "--resume", "--quiet"]) == 0
    iterations = _iterations(out)
    assert iterations == sorted(set(iterations)) == [1, 2, 3, 4]


def test_a_child_process_of_the_writer_does_not_keep_the_lock_after_the_writer_dies(tmp_path):
    # Env workers are forked from the run; one that outlives a killed run must not hold its directory.
    script = textwrap.dedent(
        f"""
        import os, sys, time
        from marljoint import RunLock
        RunLock({str(tmp_path / "run")!r}).acquire()
        child = os.fork()
        if child == 0:
            time.sleep({HANG_GUARD_S})
            os._exit(0)
        print(child, flush=True)
        time.sleep({HANG_GUARD_S})
        """
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", script], env=_environ(), stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        child = int(writer.stdout.readline())
        with pytest.raises(RunLocked, match=f"marljoint process {writer.pid} on host"):
            RunLock(tmp_path / "run").acquire()
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=HANG_GUARD_S)
        os.kill(child, 0)  # the child still lives (and holds its copy of the lock file open)
        with RunLock(tmp_path / "run") as lock:
            assert f'"pid": {os.getpid()}' in lock.path.read_text()
    finally:
        os.killpg(writer.pid, signal.SIGKILL)
        writer.stdout.close()


def _held_by_another_thread(run_dir: Path):
    """Holds the lock in a helper thread until the returned event is set."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with RunLock(run_dir, "marljoint train"):
            taken.set()
            done.wait()

    thread = threading.Thread(target=hold)
    thread.start()
    taken.wait()
    return done, thread


def test_the_lock_nests_in_its_thread_and_refuses_other_threads(tmp_path):
    run_dir = tmp_path / "a" / "b" / "run"
    with RunLock(run_dir) as lock:
        with RunLock(run_dir) as inner:  # the same thread: nested, as train_run inside the command line
            assert lock.path.exists()
        inner.release()  # a second release of the inner hold gives back nothing more
        assert lock.path.exists()  # the outer hold still holds
        errors = []
        thread = threading.Thread(target=lambda: errors.append(_try(run_dir)))
        thread.start()
        thread.join()
        assert isinstance(errors[0], RunLocked) and errors[0].holder["pid"] == os.getpid()
    assert not (tmp_path / "a").exists()  # nothing was written: the directories it created are gone


def _try(run_dir: Path) -> BaseException | None:
    try:
        RunLock(run_dir).acquire()
    except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
        return exc
    return None


def test_a_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunError, match="output path .*file exists and is not a directory"):
        RunLock(tmp_path / "file").acquire()


def test_train_run_and_each_seed_directory_are_locked(tmp_path, capsys):
    out = tmp_path / "seeds"
    done, thread = _held_by_another_thread(out / "seed_1")
    try:
        spec = RunSpec.from_dict({"env": "mock_v0", "env_kwargs": {}, "total_steps": 64})
        with pytest.raises(RunLocked, match=rf"seed_1 is being written by marljoint train process {os.getpid()}"):
            train_run(spec, out / "seed_1", progress=False)
        args = ["train", "--env", "mock_v0", "--num-envs", "2", "--rollout-steps", "16", "--total-steps", "32"]
        assert run_cli([*args, "--seeds", "0", "1", "--out", str(out), "--quiet", "--set", "hidden_sizes=[8]"]) == 2
        assert "seed_1 is being written by marljoint train process" in capsys.readouterr().err
        assert not (out / "seed_0").exists()  # refused before any run started, and nothing was written
        assert sorted(p.name for p in (out / "seed_1").iterdir()) == [LOCK_FILE]
    finally:
        done.set()
        thread.join()
