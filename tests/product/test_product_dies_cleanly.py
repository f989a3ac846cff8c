"""A run dies cleanly and loses no work, whatever kills it: an env worker killed mid-run ends the run in one line
naming the worker, with the last completed iteration checkpointed and ``--resume`` continuing; a killed learner takes
its env workers with it; a NaN reward keeps the last good checkpoint; SIGTERM abandons a slow measurement and
checkpoints within seconds.

The env is ``_faulty_envs:faulty_mock`` (2 copies x 16 steps per iteration): its faults, switched on by environment
variables at step 20 of an episode, fall in iteration 2.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _product_helpers import run_cli

from marljoint.checkpoint import list_checkpoints
from marljoint.env.lifetime import process_alive
from marljoint.run import loop as run_loop
from marljoint.run.exploitability import ExploitabilityTracker
from marljoint.run.train import RunInterrupted, RunSpec, train_run

ROOT = Path(__file__).resolve().parents[2]
ENV = "_faulty_envs:faulty_mock"
ITERATION = 32
CONFIG = "rollout_steps = 16\nhidden_sizes = [16]\ncheckpoint_every = 10\n"
PPO_CONFIG = "minibatch_size = 32\nn_epochs = 1\n"  # settings only PPO reads (an off-policy run refuses them)
QMIX = ("--algorithm", "qmix", "--set", "offpolicy={learning_starts = 32}")  # trains within the short run
WORKERS = ("--env-workers", "2")


def _train_args(out: Path, tmp_path: Path, *extra: str) -> list[str]:
    config = tmp_path / "tiny.toml"
    config.write_text(CONFIG if "qmix" in extra else CONFIG + PPO_CONFIG)
    return [
        "train", "--env", ENV, "--num-envs", "2", "--total-steps", str(4 * ITERATION), "--config", str(config),
        "--out", str(out), "--quiet", *extra,
    ]  # fmt: skip


def _iterations(run_dir: Path) -> list[int]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [int(row["iteration"]) for row in csv.DictReader(f)]


def _checkpoints(run_dir: Path) -> list[str]:
    return [p.name for p in list_checkpoints(run_dir / "checkpoints")]


def _resume(out: Path, *extra: str) -> int:
    return run_cli(["train", "--out", str(out), "--resume", "--quiet", *extra])


def _gone(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(process_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


class _HeldRun:
    """``marljoint train`` in a process of its own, held in iteration 2 while env copy 0 waits at a gate (in the
    env worker that steps it): the test kills what it likes, then everything it started is cleaned up."""

    def __init__(self, tmp_path: Path, *extra: str, workers: tuple[str, ...] = WORKERS) -> None:
        self.out, self.gate = tmp_path / "run", tmp_path / "gate"
        self.gate.mkdir()
        paths = [str(ROOT), str(ROOT / "envs"), str(ROOT / "tests" / "product")]
        environ = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(paths),
            "FAULTY_ENV_GATE": str(self.gate),
            "FAULTY_ENV_GATE_AT": "20",
        }
        command = [sys.executable, "-m", "marljoint", *_train_args(self.out, tmp_path, *workers, *extra)]
        self.process = subprocess.Popen(command, env=environ, stderr=subprocess.PIPE, text=True)
        self.workers: list[int] = []

    def __enter__(self) -> _HeldRun:
        return self

    def gated_worker(self) -> int:
        """The pid of the env worker held at the gate, once it is there."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.process.stderr.read()
            try:
                return int((self.gate / "waiting").read_text())
            except (FileNotFoundError, ValueError):  # not there yet, or being written
                time.sleep(0.05)
        raise AssertionError("the run never reached the gate")

    def children(self, pid: int | None = None) -> list[int]:
        """The processes the command (or process ``pid``) started."""
        pids = []
        for task in Path(f"/proc/{pid or self.process.pid}/task").iterdir():
            pids += [int(child) for child in (task / "children").read_text().split()]
        self.workers += pids
        return pids

    def __exit__(self, *exc: object) -> None:
        (self.gate / "release").touch()
        for pid in [self.process.pid, *self.workers]:
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)
        self.process.communicate(timeout=60)


@pytest.mark.parametrize("algorithm", [(), QMIX], ids=["ppo", "qmix"])
def test_a_killed_env_worker_ends_the_run_in_one_line_and_the_run_resumes(tmp_path, algorithm):
    with _HeldRun(tmp_path, *algorithm) as run:
        pid = run.gated_worker()
        os.kill(pid, signal.SIGKILL)
        _, err = run.process.communicate(timeout=60)
    assert run.process.returncode == 2
    assert err.strip().splitlines() == [
        f"marljoint train: error: env worker 0 (pid {pid}, env copy 0) was killed by SIGKILL in iteration 2; the "
        f"newest checkpoint, from iteration 1, is kept. Continue with: marljoint train --out {run.out} --resume"
    ]
    # checkpoint_every is 10: this checkpoint was written on the way out
    assert _checkpoints(run.out) == ["ckpt_0000001.pt"]
    assert _resume(run.out, *WORKERS) == 0
    assert _iterations(run.out) == [1, 2, 3, 4]


def test_a_killed_learner_takes_its_env_workers_with_it(tmp_path):
    with _HeldRun(tmp_path) as run:
        gated = run.gated_worker()
        workers = run.children()  # the two env workers (and multiprocessing's resource tracker)
        assert gated in workers and len(workers) >= 2
        os.kill(run.process.pid, signal.SIGKILL)
        assert _gone(workers, 5.0), [pid for pid in workers if process_alive(pid)]


def test_a_killed_seeds_command_takes_its_runs_with_it(tmp_path):
    with _HeldRun(tmp_path, "--seeds", "0", "1", "--jobs", "2", workers=()) as command:
        gated = command.gated_worker()  # a run's own process, started by the fork server
        processes = [grandchild for child in command.children() for grandchild in command.children(child)]
        assert gated in processes
        os.kill(command.process.pid, signal.SIGKILL)
        assert _gone(processes, 5.0), [pid for pid in processes if process_alive(pid)]


@pytest.mark.parametrize("collection", [(), WORKERS, QMIX], ids=["in-process", "env-workers", "qmix"])
def test_a_nan_reward_keeps_the_last_good_checkpoint_and_the_run_resumes(tmp_path, monkeypatch, capsys, collection):
    monkeypatch.setenv("FAULTY_ENV_NAN_AT", "20")
    monkeypatch.setenv("FAULTY_ENV_COPY", "1")
    out = tmp_path / "run"
    assert run_cli(_train_args(out, tmp_path, *collection)) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"marljoint train: error: env '{ENV}' failed in iteration 2: agent 'agent_0' (env copy 1): the env returned "
        "a non-finite reward (nan); fix the env, or clip rewards with supersuit.clip_reward_v0; the newest checkpoint "
        f"is from iteration 1. Once the env is fixed, continue with: marljoint train --out {out} --resume"
    )
    assert _checkpoints(out) == ["ckpt_0000001.pt"]
    monkeypatch.delenv("FAULTY_ENV_NAN_AT")
    assert _resume(out, *(WORKERS if collection == WORKERS else ())) == 0
    assert _iterations(out) == [1, 2, 3, 4]


def _slow(seconds: float = 60.0):
    """A measurement that would take a minute, during which SIGTERM arrives (as from a scheduler)."""

    def measure(*args, **kwargs):
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        time.sleep(seconds)
        raise AssertionError("the measurement was not abandoned")

    return measure


def _spec(**changes) -> RunSpec:
    values = {
        "env": "mock_v0",
        "env_kwargs": {"max_cycles": 8},
        "num_envs": 2,
        "rollout_steps": 16,
        "minibatch_size": 32,
        "n_epochs": 1,
        "hidden_sizes": [16],
        "total_steps": 4 * ITERATION,
        "checkpoint_every": 10,
        **changes,
    }
    return RunSpec.from_dict(values)


@pytest.mark.parametrize("measurement", ["evaluation", "exploitability"])
def test_sigterm_abandons_a_slow_measurement_and_checkpoints_within_seconds(tmp_path, monkeypatch, measurement):
    real_play = run_loop.play_episodes
    if measurement == "evaluation":
        monkeypatch.setattr(run_loop, "play_episodes", _slow())
        spec = _spec(eval_every=2, eval_episodes=2)
    else:
        monkeypatch.setattr(ExploitabilityTracker, "measure", _slow())
        spec = _spec(exploitability_every=2)
    started = time.monotonic()
    with pytest.raises(RunInterrupted, match=r"stopped by SIGTERM after iteration 2, which is checkpointed") as info:
        train_run(spec, tmp_path / "run", progress=False)
    assert time.monotonic() - started < 30  # the measurement alone would take 60 s
    assert info.value.exit_status == 143
    assert _checkpoints(tmp_path / "run") == ["ckpt_0000002.pt"]
    assert _iterations(tmp_path / "run") == [1, 2]
    monkeypatch.setattr(run_loop, "play_episodes", real_play)
    monkeypatch.setattr(ExploitabilityTracker, "measure", lambda *args: {})  # the real one trains best responses
    result = train_run(spec, tmp_path / "run", resume=True, progress=False)
    assert result.iterations == 4


def test_the_command_exits_143_when_sigterm_abandons_an_evaluation(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run_loop, "play_episodes", _slow())
    out = tmp_path / "run"
    config = tmp_path / "tiny.toml"
    config.write_text(CONFIG)
    args = ["train", "--env", "mock_v0", "--env-kwargs", '{"max_cycles": 8}', "--num-envs", "2", "--total-steps",
            str(4 * ITERATION), "--config", str(config), "--out", str(out), "--quiet", "--eval-every", "1"]  # fmt: skip
    assert run_cli(args) == 143
    assert capsys.readouterr().err.strip().splitlines() == [
        f"marljoint train: stopped by SIGTERM after iteration 1, which is checkpointed. Continue with: marljoint "
        f"train --out {out} --resume"
    ]
    assert _checkpoints(out) == ["ckpt_0000001.pt"]


def test_a_stop_request_interrupts_only_what_may_be_abandoned():
    with run_loop.StopRequests() as stops:
        os.kill(os.getpid(), signal.SIGTERM)  # outside: only noted, the iteration goes on
        assert stops.signal_name == "SIGTERM"
        with pytest.raises(run_loop.StopRequested):  # made already: nothing more is started
            with stops.interruptible():
                raise AssertionError("entered after the request")
    with run_loop.StopRequests() as stops:
        with pytest.raises(run_loop.StopRequested, match="SIGTERM"):
            with stops.interruptible():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(30)


def test_a_lost_ray_worker_ends_the_run_the_same_way(tmp_path, monkeypatch):
    from marljoint import JointMultiAgentTrainer
    from marljoint.collect import WorkerLostError
    from marljoint.run.train import WorkerFailure

    collect = JointMultiAgentTrainer.collect_rollout

    def lose_a_worker(self, *args, **kwargs):
        if self.iteration == 1:
            raise WorkerLostError("rollout worker 1 (env copies 1..1) died 3 times in a row")
        return collect(self, *args, **kwargs)

    monkeypatch.setattr(JointMultiAgentTrainer, "collect_rollout", lose_a_worker)
    out = tmp_path / "run"
    with pytest.raises(WorkerFailure) as caught:
        train_run(_spec(), out, progress=False)
    assert str(caught.value) == (
        "rollout worker 1 (env copies 1..1) died 3 times in a row in iteration 2; the newest checkpoint, from "
        f"iteration 1, is kept. Continue with: marljoint train --out {out} --resume"
    )
    assert caught.value.iteration == 1 and isinstance(caught.value.__cause__, WorkerLostError)
    assert _checkpoints(out) == ["ckpt_0000001.pt"]
    monkeypatch.undo()
    assert train_run(_spec(), out, resume=True, progress=False).iterations == 4
