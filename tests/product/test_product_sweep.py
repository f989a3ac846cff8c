"""Several runs from one command: seeds side by side, grids of settings (--sweep) and the Optuna search (tune)."""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from marljoint.checkpoint import list_checkpoints, load_checkpoint
from marljoint.cli.sweep import sweep_axis
from marljoint.run.sweep import (
    LOG_FILE,
    RunJob,
    SweepRow,
    cores_per_run,
    fit_to_cores,
    format_table,
    parallel_runs,
    run_jobs,
    summarize,
)
from marljoint.run.train import RunSpec
from marljoint.run.tune import ParamRange
from tests.product._product_helpers import run_cli

# mock_v0 ends an episode every 8 steps, so every tiny run has a final return.
TINY_ENV = [
    "--env", "mock_v0", "--env-kwargs", json.dumps({"max_cycles": 8}), "--num-envs", "2", "--rollout-steps", "16",
    "--total-steps", "64", "--set", "n_epochs=1",
]  # fmt: skip
TINY = [*TINY_ENV, "--set", "hidden_sizes=[8]", "--set", "checkpoint_every=1"]
TIME_COLUMNS = ("wall_time", "sps")


def _train(out: Path, *extra: str) -> list[str]:
    return ["train", *TINY, "--out", str(out), *extra]


def _final_state(run_dir: Path) -> dict:
    return load_checkpoint(list_checkpoints(run_dir / "checkpoints")[-1])["trainer"]


def _same_tensors(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_tensors(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same_tensors(x, y) for x, y in zip(a, b))
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


def _metrics(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv") as file:
        return [{k: v for k, v in row.items() if k not in TIME_COLUMNS} for row in csv.DictReader(file)]


def test_a_seed_is_bit_identical_alone_one_after_another_and_side_by_side(tmp_path, capsys):
    assert run_cli(_train(tmp_path / "alone", "--seed", "5", "--quiet")) == 0
    assert run_cli(_train(tmp_path / "parallel", "--seeds", "3", "5", "--jobs", "2")) == 0
    printed = capsys.readouterr().out.splitlines()
    assert run_cli(_train(tmp_path / "sequential", "--seeds", "3", "5", "--jobs", "1", "--quiet")) == 0
    # One line per finished run, then the summary; the progress went to each run's own log.
    assert sorted(line.split()[0] for line in printed[:2]) == [str(tmp_path / "parallel" / f"seed_{s}") for s in (3, 5)]
    assert "2 seeds: final mean episode return" in printed[2] and "(95% CI)" in printed[2]
    assert "64/64 steps" in (tmp_path / "parallel" / "seed_5" / LOG_FILE).read_text()
    alone = tmp_path / "alone"
    for run in (tmp_path / "parallel" / "seed_5", tmp_path / "sequential" / "seed_5"):
        assert _same_tensors(_final_state(run), _final_state(alone))
        assert _metrics(run) == _metrics(alone)
        assert "torch_threads = 1\n" in (run / "config.toml").read_text()
    assert not _same_tensors(_final_state(tmp_path / "parallel" / "seed_3"), _final_state(alone))


def test_env_workers_auto_sizes_each_run_to_its_share_of_the_cores(tmp_path, monkeypatch):
    # 8 cores, 2 runs at a time: each run has 4, so 3 env workers and 1 learner thread (alone: 4 workers, one per
    # env copy, and 4 threads).
    for module in ("marljoint.run.sweep", "marljoint.threads"):
        monkeypatch.setattr(f"{module}.usable_cores", lambda: 8)
    out = tmp_path / "seeds"
    args = _train(out, "--num-envs", "4", "--seeds", "0", "1", "--jobs", "2", "--env-workers", "auto", "--quiet")
    assert run_cli(args) == 0
    for seed in (0, 1):
        config = (out / f"seed_{seed}" / "config.toml").read_text()
        assert 'backend = "subprocess", workers = 3' in config and "torch_threads = 1\n" in config


def test_a_failing_run_is_reported_and_the_others_finish(tmp_path, capsys):
    # max_cycles=0 passes every check before the runs start and fails when each run builds its env.
    out = tmp_path / "grid"
    sweep = ["--sweep", "env_kwargs={max_cycles=8},{max_cycles=0}", "--seeds", "3", "5", "--jobs", "2"]
    assert run_cli(["train", *TINY[4:], "--env", "mock_v0", "--out", str(out), *sweep]) == 1
    captured = capsys.readouterr()
    failures = [line for line in captured.err.splitlines() if " failed: " in line]
    assert len(failures) == 2 and all("env_kwargs={max_cycles=0}" in line for line in failures)
    assert all("max_cycles" in line and line.endswith(f"{LOG_FILE})") for line in failures)
    assert captured.err.splitlines()[-1] == "marljoint: 2 of 4 runs failed; the others finished"
    assert "Traceback" in (out / "env_kwargs={max_cycles=0}" / "seed_3" / LOG_FILE).read_text()
    table = captured.out.splitlines()
    assert table[-2].split()[-3:] == ["0", "(2", "failed)"] and table[-3].split()[-1] == "2"
    assert all((out / "env_kwargs={max_cycles=8}" / f"seed_{s}" / "metrics.csv").is_file() for s in (3, 5))


def test_sigterm_stops_the_runs_side_by_side_each_after_a_checkpoint(tmp_path, capsys):
    import os
    import signal
    import threading
    import time

    out = tmp_path / "seeds"
    args = _train(out, "--total-steps", "1e7", "--seeds", "0", "1", "--jobs", "2")

    def stop_when_both_checkpointed():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if all(list_checkpoints(out / f"seed_{s}" / "checkpoints") for s in (0, 1)):
                os.kill(os.getpid(), signal.SIGTERM)  # as a cluster stops a job: this process only
                return
            time.sleep(0.2)

    threading.Thread(target=stop_when_both_checkpointed, daemon=True).start()
    assert run_cli(args) == 143
    err = capsys.readouterr().err
    assert err.count("stopped by SIGTERM after iteration") == 2 and "interrupted; each stopped run" in err
    for seed in (0, 1):
        iteration = int(err.split(f"seed_{seed} stopped by SIGTERM after iteration ")[1].split(",")[0])
        assert len(_metrics(out / f"seed_{seed}")) == iteration
        assert list_checkpoints(out / f"seed_{seed}" / "checkpoints")[-1].name == f"ckpt_{iteration:07d}.pt"


def test_run_directories_that_hold_runs_are_refused_before_anything_trains(tmp_path, capsys):
    out = tmp_path / "seeds"
    assert run_cli(_train(out / "seed_5", "--seed", "5", "--quiet")) == 0
    before = (out / "seed_5" / "metrics.csv").read_text()
    assert run_cli(_train(out, "--seeds", "3", "5")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "seed_5 already holds a run (1 of the 2 run directories do); pass --resume" in err
    assert not (out / "seed_3").exists() and (out / "seed_5" / "metrics.csv").read_text() == before
    assert run_cli(_train(tmp_path / "one", "--jobs", "2")) == 2
    assert "--jobs N sets how many runs of --seeds or --sweep train at a time" in capsys.readouterr().err


def test_resume_of_a_seeds_directory_continues_each_run_side_by_side(tmp_path, capsys):
    out = tmp_path / "seeds"
    assert run_cli(_train(out, "--seeds", "3", "5", "--jobs", "1", "--quiet")) == 0
    resume = ["train", "--out", str(out), "--resume", "--total-steps", "128", "--seeds", "3", "5", "--jobs", "2"]
    assert run_cli(resume) == 0
    assert capsys.readouterr().out.count("final mean episode return") == 3
    assert all(len(_metrics(out / f"seed_{s}")) == 4 for s in (3, 5))
    straight = tmp_path / "straight"
    assert run_cli(["train", *TINY, "--total-steps", "128", "--seed", "5", "--out", str(straight), "--quiet"]) == 0
    assert _same_tensors(_final_state(out / "seed_5"), _final_state(straight))
    assert "resuming at iteration 2" in (out / "seed_5" / LOG_FILE).read_text()


def test_a_sweep_trains_the_grid_and_prints_one_table(tmp_path, capsys):
    out = tmp_path / "grid"
    sweep = ["--sweep", "learning_rate=1e-3,3e-4", "--sweep", "hidden_sizes=[8],[8,8]", "--jobs", "1"]
    assert run_cli(["train", *TINY_ENV, "--out", str(out), *sweep]) == 0
    printed = capsys.readouterr().out
    table = [line for line in printed.splitlines() if not line.startswith(str(out))]
    assert table[0].split()[:2] == ["learning_rate", "hidden_sizes"] and len(table) == 5
    assert table[4].split()[:2] == ["3e-4", "[8,8]"] and table[4].split()[-1] == "1"
    run_dir = out / "learning_rate=3e-4,hidden_sizes=[8,8]" / "seed_0"
    config = (run_dir / "config.toml").read_text()
    assert "learning_rate = 0.0003\n" in config and "hidden_sizes = [8, 8]\n" in config
    with open(out / "sweep.csv") as file:
        rows = list(csv.DictReader(file))
    assert [(r["learning_rate"], r["hidden_sizes"], r["n"]) for r in rows] == [
        ("1e-3", "[8]", "1"), ("1e-3", "[8,8]", "1"), ("3e-4", "[8]", "1"), ("3e-4", "[8,8]", "1"),
    ]  # fmt: skip
    assert all(math.isfinite(float(r["final_return_mean"])) for r in rows)
    resume = ["train", "--out", str(out), "--resume", "--total-steps", "96", *sweep, "--quiet"]
    assert run_cli(resume) == 0
    assert len(_metrics(run_dir)) == 3
    pytest.importorskip("matplotlib")
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--sweep", "learning_rate"], "expected KEY=V1,V2,... such as learning_rate=1e-3,3e-4"),
        (["--sweep", "learning_rate=1e-3,,3e-4"], "empty value in 'learning_rate=1e-3,,3e-4'"),
        (["--sweep", "learning_rate=1e-3,0.001"], "learning_rate lists the value 0.001 twice"),
        (["--sweep", "learnin_rate=1e-3,3e-4"], "unknown setting 'learnin_rate'; valid settings"),
        (["--sweep", "learning_rate=1e-3", "--sweep", "learning_rate=3e-4"], "--sweep learning_rate is given twice"),
        (["--sweep", "seed=1,2"], "give the seeds with --seeds"),
        (["--sweep", "learning_rate=1e-3,3e-4", "--learning-rate", "1e-3"], "and --learning-rate both set"),
        (["--sweep", "n_epochs=1,2"], "--sweep n_epochs=... and --set n_epochs=... both set n_epochs; give it in"),
        (["--sweep", "env_kwargs={max_cycles=4},{max_cycles=8}"], "and --env-kwargs both set env_kwargs"),
        (["--sweep", "learning_rate=1e-3,-1"], "learning_rate=-1/seed_0: invalid trainer setting"),
        (["--seeds", "1", "2", "--jobs", "0"], "argument --jobs: must be a positive integer, got 0"),
        (["--seeds", "1", "2", "--env", "no_such_env_v0"], "unknown env 'no_such_env_v0'"),
    ],
)
def test_bad_sweeps_end_with_one_line_and_write_nothing(tmp_path, capsys, extra, message):
    assert run_cli(_train(tmp_path / "out", *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("marljoint")
    assert not (tmp_path / "out").exists()


def test_sweep_values_are_read_as_set_reads_them():
    key, values = sweep_axis("hidden_sizes=[64, 64], [128,128] ,[32]")
    assert key == "hidden_sizes" and values == [("[64, 64]", [64, 64]), ("[128,128]", [128, 128]), ("[32]", [32])]
    assert sweep_axis("device=cpu,'a,b'")[1] == [("cpu", "cpu"), ("'a,b'", "a,b")]
    assert sweep_axis("centralized_critic=true,false")[1] == [("true", True), ("false", False)]
    with pytest.raises(argparse.ArgumentTypeError, match=r"n_epochs lists the value 2 twice"):
        sweep_axis("n_epochs=2,1,2")


def test_runs_at_a_time_and_their_share_of_the_cores():
    assert parallel_runs(3, cores=2) == 3 and parallel_runs(5, cores=2) == 2 and parallel_runs(1, cores=16) == 1
    assert parallel_runs(5, jobs=4) == 4 and parallel_runs(40, cores=16) == 16 and parallel_runs(32, cores=16) == 32
    assert cores_per_run(2, cores=16) == 8 and cores_per_run(4, cores=2) == 1
    with pytest.raises(ValueError, match=r"jobs must be a positive integer, got 0; give --jobs 1"):
        parallel_runs(3, jobs=0)
    with pytest.raises(ValueError, match=r"runs must be at least 1, got 0"):
        parallel_runs(0)
    workers = RunSpec.from_dict({"collection": {"backend": "subprocess", "workers": 3}})
    assert fit_to_cores(workers, 8).trainer.torch_threads == 5
    assert fit_to_cores(RunSpec(), 8).trainer.torch_threads == 1  # collects in-process: one core
    assert fit_to_cores(RunSpec.from_dict({"torch_threads": 3}), 8).trainer.torch_threads == 3


def test_run_jobs_refuses_an_unknown_engine_and_no_parallelism():
    with pytest.raises(ValueError, match=r"engine='threads' is not one of \['process', 'ray'\]"):
        run_jobs([], engine="threads")
    with pytest.raises(ValueError, match=r"parallel must be a positive integer, got 0"):
        run_jobs([], parallel=0)


def test_the_table_counts_failed_runs_apart():
    spec = RunSpec()
    jobs = [RunJob(spec, Path(f"r{k}"), setting={"lr": lr}) for k, lr in enumerate(["1", "1", "2"])]
    from marljoint.run.sweep import RunOutcome

    rows = summarize([RunOutcome(jobs[0], 1.0, 0.0), RunOutcome(jobs[1], math.nan, 0.0, "boom"),
                      RunOutcome(jobs[2], 3.0, 0.0)])  # fmt: skip
    assert [(r.setting, r.mean, r.n, r.failed) for r in rows] == [({"lr": "1"}, 1.0, 1, 1), ({"lr": "2"}, 3.0, 1, 0)]
    assert format_table(rows).splitlines()[1].split() == ["1", "1", "±", "nan", "1", "(1", "failed)"]
    assert format_table([SweepRow({}, 2.0, 0.5, 3, 0)]).splitlines()[1].split() == ["2", "±", "0.5", "3"]


def test_tune_searches_with_optuna_and_writes_its_trials(tmp_path, capsys):
    pytest.importorskip("optuna")
    out = tmp_path / "tune"
    args = ["tune", *TINY, "--out", str(out), "--param", "learning_rate=log:1e-4:1e-2", "--param", "ent_coef=0:0.05"]
    assert run_cli([*args, "--trials", "2", "--seeds", "0", "1", "--jobs", "1"]) == 0
    printed = capsys.readouterr().out
    trials = [line for line in printed.splitlines() if line.startswith("trial ")]
    assert len(trials) == 2 and all("final mean episode return" in line and "(n=2)" in line for line in trials)
    assert "best: trial" in printed and "--set learning_rate=" in printed
    with open(out / "tune.csv") as file:
        rows = list(csv.DictReader(file))
    assert [r["trial"] for r in rows] == ["0", "1"]
    for row in rows:
        assert 1e-4 <= float(row["learning_rate"]) <= 1e-2 and 0 <= float(row["ent_coef"]) <= 0.05
        config = (out / f"trial_{row['trial']}" / "seed_1" / "config.toml").read_text()
        assert f"learning_rate = {float(row['learning_rate'])!r}\n" in config


@pytest.mark.parametrize(
    ("param", "message"),
    [
        ("learning_rate=1e-2:1e-4", "needs finite bounds LOW < HIGH, got 0.01:0.0001; swap them"),
        ("learning_rate=log:0:1e-2", "a log range needs LOW > 0, got 0"),
        ("n_epochs=int:1:2.5", "an int range needs integral bounds, got 1:2.5"),
        ("learning_rate", "expected KEY=LOW:HIGH, KEY=log:LOW:HIGH or KEY=int:LOW:HIGH"),
        ("learning_rate=log:a:b", "expected numbers in KEY=LOW:HIGH"),
    ],
)
def test_tune_refuses_bad_ranges_in_one_line(tmp_path, capsys, param, message):
    assert run_cli(["tune", *TINY, "--out", str(tmp_path / "t"), "--param", param]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    with pytest.raises(ValueError, match=message.split(",")[0].replace("(", r"\(")):
        ParamRange.parse(param)


def test_tune_refuses_a_parameter_also_given_and_names_the_extra_without_optuna(tmp_path, capsys, monkeypatch):
    args = ["tune", *TINY, "--out", str(tmp_path / "t"), "--param", "learning_rate=log:1e-4:1e-2"]
    assert run_cli([*args, "--learning-rate", "1e-3"]) == 2
    assert "--param learning_rate=... and --learning-rate both set learning_rate" in capsys.readouterr().err
    assert run_cli([*args, "--sweep", "ent_coef=0,0.01"]) == 2
    assert (
        "marljoint tune draws its own settings and starts fresh; drop --resume and --sweep" in capsys.readouterr().err
    )
    assert run_cli([*args[:-1], "seed=int:0:9"]) == 2
    assert "--param seed=...: give the seeds with --seeds" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"scale must be one of \['linear', 'log', 'int'\], got 'exp'"):
        ParamRange("learning_rate", 1e-4, 1e-2, "exp")
    monkeypatch.setitem(sys.modules, "optuna", None)
    assert run_cli(args) == 2
    err = capsys.readouterr().err
    assert err == 'marljoint tune: error: marljoint tune needs Optuna: pip install "marljoint[tune]"\n'
    assert not (tmp_path / "t").exists()


def test_the_examples_in_the_docstrings_hold():
    import doctest

    import marljoint.run.sweep
    import marljoint.run.tune

    for module in (marljoint.run.sweep, marljoint.run.tune):
        assert doctest.testmod(module).failed == 0
