"""Resuming a run: bit-identical to an uninterrupted one, and safe against a crash while a checkpoint is written."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
from _product_helpers import newest_checkpoint, resume_args, run_cli, tiny_config, tiny_spec, train_args

import marljoint.checkpoint as checkpoint_module
from marljoint.run.train import train_run


def _same_parameters(a, b):
    pa, pb = a["trainer"]["policies"], b["trainer"]["policies"]
    return len(pa) == len(pb) and all(torch.equal(x[k], y[k]) for x, y in zip(pa, pb) for k in x)


def _equal(x, y):
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and torch.equal(x, y)
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(_equal(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)):
        return isinstance(y, (list, tuple)) and len(x) == len(y) and all(_equal(a, b) for a, b in zip(x, y))
    return x == y


def _rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        return [{k: v for k, v in row.items() if k not in ("wall_time", "sps")} for row in csv.DictReader(f)]


def test_n_plus_resume_plus_n_equals_2n_bit_for_bit(tmp_path):
    spec = tiny_spec(6, anneal_lr=True)
    straight = train_run(spec, tmp_path / "straight", progress=False)
    assert straight.env_state_saved
    train_run(spec, tmp_path / "split", progress=False, stop_after=3)  # stops mid-episode
    assert newest_checkpoint(tmp_path / "split")["trainer"]["iteration"] == 2  # the last checkpoint before the stop
    train_run(spec, tmp_path / "split", resume=True, progress=False)
    a, b = newest_checkpoint(tmp_path / "straight"), newest_checkpoint(tmp_path / "split")
    assert a["trainer"]["iteration"] == b["trainer"]["iteration"] == 6
    assert _same_parameters(a, b)
    assert _equal(a["trainer"]["optimizers"], b["trainer"]["optimizers"])
    assert _equal(a["trainer"]["value_normalizer"], b["trainer"]["value_normalizer"])
    assert torch.equal(a["trainer"]["generator"], b["trainer"]["generator"])
    assert _rows(tmp_path / "straight") == _rows(tmp_path / "split")


def test_a_resume_on_env_workers_continues_an_in_process_run_bit_for_bit(tmp_path):
    spec = tiny_spec(6, anneal_lr=True)
    train_run(spec, tmp_path / "straight", progress=False)
    train_run(spec, tmp_path / "split", progress=False, stop_after=3)
    assert run_cli(["train", "--out", str(tmp_path / "split"), "--resume", "--env-workers", "2", "--quiet"]) == 0
    assert 'collection = {backend = "subprocess", workers = 2}' in (tmp_path / "split" / "config.toml").read_text()
    a, b = newest_checkpoint(tmp_path / "straight"), newest_checkpoint(tmp_path / "split")
    assert a["trainer"]["iteration"] == b["trainer"]["iteration"] == 6
    assert _same_parameters(a, b)
    assert _rows(tmp_path / "straight") == _rows(tmp_path / "split")


def test_resume_can_extend_the_budget(tmp_path, capsys):
    config = tiny_config(tmp_path)
    out = tmp_path / "run"
    assert run_cli(train_args(out, config, 2 * 64)) == 0
    assert run_cli(resume_args(out, 4 * 64)) == 0
    assert [int(r["iteration"]) for r in _rows(out)] == [1, 2, 3, 4]
    assert "total_steps = 256" in (out / "config.toml").read_text()


def test_a_failed_checkpoint_write_leaves_the_previous_one_loadable(tmp_path, monkeypatch):
    spec = tiny_spec(4, anneal_lr=True)
    calls = {"n": 0}
    real_replace = os.replace

    def crash_on_second_checkpoint(src, dst):
        if str(dst).endswith(".pt"):
            calls["n"] += 1
            if calls["n"] == 2:
                raise OSError("disk full")
        return real_replace(src, dst)

    monkeypatch.setattr(checkpoint_module.os, "replace", crash_on_second_checkpoint)
    with pytest.raises(OSError, match="disk full"):
        train_run(spec, tmp_path / "run", progress=False)
    monkeypatch.setattr(checkpoint_module.os, "replace", real_replace)
    files = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert files == ["ckpt_0000002.pt"]  # no temporary file left behind, the previous checkpoint intact
    assert newest_checkpoint(tmp_path / "run")["trainer"]["iteration"] == 2
    train_run(spec, tmp_path / "run", resume=True, progress=False)
    train_run(spec, tmp_path / "straight", progress=False)
    assert _same_parameters(newest_checkpoint(tmp_path / "run"), newest_checkpoint(tmp_path / "straight"))


_KILLED_MID_WRITE = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    torch.set_num_threads(1)
    import marljoint.checkpoint as ck
    from marljoint.cli import main

    real_fsync, writes = os.fsync, []

    def fsync_then_die(fd):
        writes.append(fd)
        if len(writes) == 3:  # the second checkpoint's bytes are on disk under the temporary name only
            os.kill(os.getpid(), signal.SIGKILL)
        return real_fsync(fd)

    ck.os.fsync = fsync_then_die
    sys.exit(main(sys.argv[1:]))
    """
)


def test_a_process_killed_while_writing_a_checkpoint_resumes_from_the_previous_one(tmp_path):
    config = tiny_config(tmp_path)
    out = tmp_path / "run"
    args = train_args(out, config, 6 * 64)
    proc = subprocess.run([sys.executable, "-c", _KILLED_MID_WRITE, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    names = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert "ckpt_0000002.pt" in names and "ckpt_0000004.pt" not in names
    assert any(n.endswith(".tmp") for n in names)  # the half-written file, ignored
    assert run_cli(resume_args(out, 6 * 64)) == 0
    assert run_cli(train_args(tmp_path / "straight", config, 6 * 64)) == 0
    assert _same_parameters(newest_checkpoint(out), newest_checkpoint(tmp_path / "straight"))
    assert _rows(out) == _rows(tmp_path / "straight")


def test_an_env_that_cannot_be_pickled_falls_back_with_a_message(tmp_path, capsys):
    spec = tiny_spec(2, env="_product_helpers:unpicklable_counter", env_kwargs={}, anneal_lr=True)
    result = train_run(spec, tmp_path / "run", progress=False)
    assert not result.env_state_saved
    assert "not bit-identical" in capsys.readouterr().err
    train_run(
        tiny_spec(4, env="_product_helpers:unpicklable_counter", env_kwargs={}, anneal_lr=True),
        tmp_path / "run",
        resume=True,
        progress=False,
    )
    assert "not bit-identical" in capsys.readouterr().err
    assert newest_checkpoint(tmp_path / "run")["trainer"]["iteration"] == 4


def test_mpe2_envs_resume_bit_for_bit_despite_their_pygame_objects(tmp_path):
    pytest.importorskip("mpe2")
    spec = tiny_spec(4, env="mpe2.simple_spread_v3", env_kwargs={"N": 2, "max_cycles": 10}, num_envs=2, anneal_lr=True)
    train_run(spec, tmp_path / "straight", progress=False)
    train_run(spec, tmp_path / "split", progress=False, stop_after=3)
    result = train_run(spec, tmp_path / "split", resume=True, progress=False)
    assert result.env_state_saved
    assert _same_parameters(newest_checkpoint(tmp_path / "straight"), newest_checkpoint(tmp_path / "split"))
    assert _rows(tmp_path / "straight") == _rows(tmp_path / "split")


def test_ctrl_c_says_how_to_resume(tmp_path):
    from marljoint.run.train import RunInterrupted

    def interrupt(row):
        if row["iteration"] == 3:
            raise KeyboardInterrupt

    with pytest.raises(RunInterrupted, match=r"interrupted at iteration 3; the newest checkpoint is from iteration 2"):
        train_run(tiny_spec(4, anneal_lr=True), tmp_path / "run", progress=False, on_iteration=interrupt)
    train_run(tiny_spec(4, anneal_lr=True), tmp_path / "run", resume=True, progress=False)
    assert [int(r["iteration"]) for r in _rows(tmp_path / "run")] == [1, 2, 3, 4]
