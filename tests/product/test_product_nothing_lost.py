"""Nothing a user has is lost: a failed start changes nothing on disk, --force replaces a run only once the new
one runs, a resume without checkpoints is refused, and SIGTERM stops with a checkpoint as Ctrl-C does."""

from __future__ import annotations

import csv
import os
import shutil
import signal

import pytest
from _product_helpers import resume_args, run_cli, tiny_config, train_args

from marljoint.checkpoint import list_checkpoints
from marljoint.train import RunInterrupted, RunSpec, train_run


def _snapshot(directory):
    """Every file under ``directory`` with its bytes."""
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture()
def old_run(tmp_path):
    out = tmp_path / "run"
    assert run_cli(train_args(out, tiny_config(tmp_path), 2 * 64)) == 0
    return out


def test_force_with_a_bad_env_leaves_the_old_run_as_it_was(old_run, tmp_path, capsys):
    before = _snapshot(old_run)
    args = ["train", "--env", "no_such_env_v0", "--out", str(old_run), "--force", "--quiet"]
    assert run_cli(args) == 2
    assert "no_such_env_v0" in capsys.readouterr().err
    assert _snapshot(old_run) == before


def test_force_with_an_env_that_fails_in_its_first_step_leaves_the_old_run_as_it_was(old_run, tmp_path):
    before = _snapshot(old_run)
    spec = RunSpec.from_dict({"env": "_product_helpers:broken_env", "env_kwargs": {}, "total_steps": 64})
    with pytest.raises(Exception, match="broken at its first step"):
        train_run(spec, old_run, force=True, progress=False)
    assert _snapshot(old_run) == before


def test_a_run_that_fails_to_start_creates_no_directory(tmp_path):
    spec = RunSpec.from_dict({"env": "_product_helpers:broken_env", "env_kwargs": {}, "total_steps": 64})
    with pytest.raises(Exception, match="broken at its first step"):
        train_run(spec, tmp_path / "new", progress=False)
    assert not (tmp_path / "new").exists()
    # the corrected rerun needs no --force
    assert run_cli(train_args(tmp_path / "new", tiny_config(tmp_path), 64)) == 0


def test_force_replaces_the_old_run_once_the_new_one_runs(old_run, tmp_path):
    assert run_cli(train_args(old_run, tiny_config(tmp_path), 64, "--force")) == 0
    assert len(list_checkpoints(old_run / "checkpoints")) == 1  # the old run's two are gone
    assert "total_steps = 64" in (old_run / "config.toml").read_text()


def test_a_resume_without_checkpoints_is_refused_and_changes_nothing(old_run, capsys):
    shutil.rmtree(old_run / "checkpoints")
    before = _snapshot(old_run)
    assert run_cli(resume_args(old_run, 4 * 64)) == 2
    err = capsys.readouterr().err
    assert "holds no checkpoint (checkpoints/ is missing or empty)" in err and "--force" in err
    assert _snapshot(old_run) == before


@pytest.mark.parametrize("signum,status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_after_the_iteration_with_a_checkpoint_and_the_resume_is_bit_identical(
    tmp_path, signum, status
):
    spec = RunSpec.from_dict(
        {
            "env_kwargs": {"scenario": "easy", "num_houses": 5, "num_agents": 2, "max_nights": 20},
            "num_envs": 4,
            "rollout_steps": 16,
            "minibatch_size": 32,
            "hidden_sizes": [16],
            "total_steps": 5 * 64,
            "checkpoint_every": 10,
        }
    )
    train_run(spec, tmp_path / "straight", progress=False)

    def pre_empt(row):
        if row["iteration"] == 3:
            os.kill(os.getpid(), signum)

    name = signal.Signals(signum).name
    with pytest.raises(RunInterrupted, match=rf"stopped by {name} after iteration 3, which is checkpointed") as info:
        train_run(spec, tmp_path / "split", progress=False, on_iteration=pre_empt)
    assert info.value.exit_status == status
    assert [p.name for p in list_checkpoints(tmp_path / "split" / "checkpoints")] == ["ckpt_0000003.pt"]
    train_run(spec, tmp_path / "split", resume=True, progress=False)
    assert _rows(tmp_path / "straight") == _rows(tmp_path / "split")


def _rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        return [{k: v for k, v in row.items() if k not in ("wall_time", "sps")} for row in csv.DictReader(f)]
