"""An env that raises in the middle of a run: one line naming the env, the copy, the step and the exception, exit
2, the last completed iteration checkpointed, and ``--resume`` continuing once the env is healthy; in one process
and in env worker processes. ``marljoint --debug`` shows the traceback instead.

The env is ``_faulty_envs:faulty_mock``: mock_v0 whose copy 1 raises ``RuntimeError("sensor unplugged")`` at step
20 of its episode while ``FAULTY_ENV_RAISE_AT`` is set. A run of 2 copies x 16 steps per iteration meets it in
iteration 2.
"""

from __future__ import annotations

import csv
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _faulty_envs import faulty_mock
from _product_helpers import run_cli

from marljoint import EnvCopyError, PettingZooJointEnv, SubprocessJointEnv
from marljoint.checkpoint import list_checkpoints
from marljoint.run.errors import EnvFailure
from marljoint.run.train import RunSpec, train_run

ROOT = Path(__file__).resolve().parents[2]
ENV = "_faulty_envs:faulty_mock"
ITERATION = 32
CONFIG = "rollout_steps = 16\nminibatch_size = 32\nn_epochs = 1\nhidden_sizes = [16]\ncheckpoint_every = 10\n"
FAILURE = "env copy 1 raised RuntimeError: sensor unplugged (in step(), at step 20 of its episode)"


@pytest.fixture()
def faulty(monkeypatch):
    """Copy 1 raises at step 20 of its episode until the test makes the env healthy (``monkeypatch.delenv``)."""
    monkeypatch.setenv("FAULTY_ENV_RAISE_AT", "20")
    monkeypatch.setenv("FAULTY_ENV_COPY", "1")
    return monkeypatch


def _train_args(out: Path, tmp_path: Path, *extra: str) -> list[str]:
    config = tmp_path / "tiny.toml"
    config.write_text(CONFIG)
    return [
        "train", "--env", ENV, "--num-envs", "2", "--total-steps", str(4 * ITERATION), "--config", str(config),
        "--out", str(out), "--quiet", *extra,
    ]  # fmt: skip


def _iterations(run_dir: Path) -> list[int]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [int(row["iteration"]) for row in csv.DictReader(f)]


def _expected_line(out: Path, iteration: int = 2, saved: int = 1) -> str:
    return (
        f"marljoint train: error: env '{ENV}' failed in iteration {iteration}: {FAILURE}; the newest checkpoint is "
        f"from iteration {saved}. Once the env is fixed, continue with: marljoint train --out {out} --resume"
    )


def test_the_command_stops_with_one_line_and_resumes_once_the_env_is_healthy(tmp_path):
    out = tmp_path / "run"
    paths = [str(ROOT), str(ROOT / "envs"), str(ROOT / "tests" / "product")]
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "FAULTY_ENV_RAISE_AT": "20", "FAULTY_ENV_COPY": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "marljoint", *_train_args(out, tmp_path)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [_expected_line(out)]
    assert _iterations(out) == [1]
    # checkpoint_every is 10: this checkpoint was written on the way out
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["ckpt_0000001.pt"]
    assert run_cli(["train", "--out", str(out), "--resume", "--quiet"]) == 0  # healthy here: no --force
    assert _iterations(out) == [1, 2, 3, 4]


def test_env_workers_report_the_copy_and_the_run_resumes(faulty, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli(_train_args(out, tmp_path, "--env-workers", "2")) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [_expected_line(out)]
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["ckpt_0000001.pt"]
    faulty.delenv("FAULTY_ENV_RAISE_AT")
    assert run_cli(["train", "--out", str(out), "--resume", "--quiet", "--env-workers", "2"]) == 0
    assert _iterations(out) == [1, 2, 3, 4]


def test_a_failure_after_a_checkpoint_writes_no_second_one(faulty, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli(_train_args(out, tmp_path, "--checkpoint-every", "1")) == 2
    assert capsys.readouterr().err.strip().splitlines() == [_expected_line(out)]
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["ckpt_0000001.pt"]


def test_debug_shows_the_traceback_of_the_env_and_of_the_worker(faulty, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli(["--debug", *_train_args(out, tmp_path, "--env-workers", "2")]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert "In the env worker process:" in err and 'raise RuntimeError("sensor unplugged")' in err
    assert err.strip().splitlines()[-1] == _expected_line(out)
    assert run_cli(["--debug", *_train_args(tmp_path / "local", tmp_path)]) == 2
    err = capsys.readouterr().err
    assert 'raise RuntimeError("sensor unplugged")' in err and "In the env worker process:" not in err


def test_a_failure_in_the_first_iteration_writes_nothing(faulty, tmp_path, capsys):
    faulty.setenv("FAULTY_ENV_RAISE_AT", "3")
    out = tmp_path / "run"
    assert run_cli(_train_args(out, tmp_path)) == 2
    message = FAILURE.replace("step 20", "step 3")
    expected = f"marljoint train: error: env '{ENV}' failed in iteration 1: {message}; nothing was written to {out}"
    assert capsys.readouterr().err.strip().splitlines() == [expected]
    assert not out.exists()


def test_train_run_raises_env_failure_with_the_env_error_as_its_cause(faulty, tmp_path):
    spec = RunSpec.from_dict(
        {"env": ENV, "env_kwargs": {}, "total_steps": 4 * ITERATION, "num_envs": 2, "rollout_steps": 16, "n_epochs": 1}
    )
    with pytest.raises(EnvFailure, match=r"failed in iteration 2: env copy 1 raised RuntimeError") as caught:
        train_run(spec, tmp_path / "run", progress=False)
    assert caught.value.iteration == 1
    cause = caught.value.__cause__
    assert isinstance(cause, EnvCopyError) and (cause.copy, cause.call, cause.step) == (1, "step", 20)
    assert isinstance(cause.__cause__, RuntimeError)


def _actions(env) -> list[np.ndarray]:
    return [np.zeros((env.num_envs, g.size), np.int64) for g in env.spec.groups]


def test_the_joint_env_names_the_copy_and_the_step(faulty):
    env = PettingZooJointEnv(faulty_mock, num_envs=3)
    env.reset(seed=0)
    for _ in range(19):
        env.step(_actions(env))
    with pytest.raises(EnvCopyError, match=r"^env copy 1 raised RuntimeError: sensor unplugged \(in step\(\), at "):
        env.step(_actions(env))


def test_a_reset_that_raises_is_named_too(monkeypatch):
    def broken_reset(self, seed=None, options=None):
        raise ValueError("no map loaded")

    monkeypatch.setattr("_faulty_envs.FaultyMock.reset", broken_reset)
    env = PettingZooJointEnv(faulty_mock, num_envs=2)
    with pytest.raises(EnvCopyError, match=r"^env copy 0 raised ValueError: no map loaded \(in reset\(\), when start"):
        env.reset(seed=0)


def test_a_worker_names_the_global_copy_sends_its_traceback_and_stops(faulty):
    faulty.setenv("FAULTY_ENV_COPY", "3")
    env = SubprocessJointEnv(faulty_mock, num_envs=4, num_workers=2, seed=0)
    try:
        env.reset()
        for _ in range(19):
            env.step(_actions(env))
        with pytest.raises(EnvCopyError, match=r"^env copy 3 raised RuntimeError: sensor unplugged") as caught:
            env.step(_actions(env))
        assert 'raise RuntimeError("sensor unplugged")' in caught.value.traceback
        assert env.closed  # the other worker stopped too
    finally:
        env.close()


def test_the_env_error_crosses_a_pipe_intact():
    error = EnvCopyError(3, "step", 12, "RuntimeError", "boom", "trace")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.copy, copy.call, copy.step, copy.error_type, copy.error_message, copy.traceback) == (
        3, "step", 12, "RuntimeError", "boom", "trace",
    )  # fmt: skip
    assert str(copy) == "env copy 3 raised RuntimeError: boom (in step(), at step 12 of its episode)"
