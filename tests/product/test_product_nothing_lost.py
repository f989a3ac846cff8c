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
from marljoint.run.train import RunInterrupted, RunSpec, train_run


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


def test_evaluation_during_training_logs_greedy_returns_keeps_the_best_and_changes_no_training(tmp_path):
    import torch

    from marljoint.checkpoint import load_checkpoint

    base = {
        "env_kwargs": {"scenario": "easy", "num_houses": 5, "num_agents": 2, "max_nights": 20},
        "num_envs": 4,
        "rollout_steps": 16,
        "minibatch_size": 32,
        "hidden_sizes": [16],
        "total_steps": 4 * 64,
        "checkpoint_every": 10,
    }
    plain = train_run(RunSpec.from_dict(base), tmp_path / "plain", progress=False)
    spec = RunSpec.from_dict({**base, "eval_every": 2, "eval_episodes": 3})
    train_run(spec, tmp_path / "eval", progress=False)
    with open(tmp_path / "eval" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    evaluated = [r for r in rows if r["eval/episode_return_mean"] != ""]
    assert [int(r["iteration"]) for r in evaluated] == [2, 4]
    best = max(float(r["eval/episode_return_mean"]) for r in evaluated)
    assert float(evaluated[-1]["eval/best_episode_return_mean"]) == best
    assert {"eval/episode_return/agent_0", "eval/episode_return/agent_1"} <= set(rows[0])
    # the training columns are those of the run without evaluation: evaluating consumes no training randomness
    strip = [{k: v for k, v in r.items() if not k.startswith("eval/") and k not in ("wall_time", "sps")} for r in rows]
    assert strip == _rows(plain.run_dir)
    best_ckpt = load_checkpoint(tmp_path / "eval" / "checkpoints" / "best.pt")
    assert best_ckpt["run"]["best_eval_return"] == best
    newest = load_checkpoint(list_checkpoints(tmp_path / "eval" / "checkpoints")[-1])
    assert best_ckpt["trainer"]["iteration"] in (2, 4)
    if best_ckpt["trainer"]["iteration"] == 4:
        assert torch.equal(best_ckpt["trainer"]["generator"], newest["trainer"]["generator"])


def test_weights_and_biases_logging_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_CODE", "true")
    out = tmp_path / "run"
    args = ["train", "--env", "mock_v0", "--num-envs", "2", "--rollout-steps", "16", "--total-steps", "64"]
    from _product_helpers import run_cli as cli

    assert cli([*args, "--out", str(out), "--wandb", "marljoint-tests", "--quiet"]) == 0
    run_id = (out / "wandb_id").read_text().strip()
    runs = list((out / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))
    assert 'wandb_project = "marljoint-tests"' in (out / "config.toml").read_text()
    # a resume continues the same W&B run
    assert cli(["train", "--out", str(out), "--resume", "--total-steps", "128", "--quiet"]) == 0
    assert (out / "wandb_id").read_text().strip() == run_id


def test_wandb_logging_without_wandb_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)
    from _product_helpers import run_cli as cli

    out = tmp_path / "run"
    args = ["train", "--env", "mock_v0", "--num-envs", "2", "--total-steps", "64", "--out", str(out), "--wandb", "p"]
    assert cli(args) == 2
    assert 'pip install "marljoint[wandb]"' in capsys.readouterr().err
    assert not out.exists()
