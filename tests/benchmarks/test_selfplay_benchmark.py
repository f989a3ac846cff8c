"""Keeps the self-play methods of benchmarks/leduc.py runnable on any OpenSpiel game: a tiny budget on Kuhn poker,
the CSV rows and the per-run metrics (nothing about learning is asserted: that is what the benchmark measures)."""

import csv
import sys

import pytest
from _benchmark_module import benchmark_module


def test_mmd_and_plain_self_play_run_through_the_leduc_script_on_kuhn_poker(tmp_path, monkeypatch):
    pytest.importorskip("pyspiel")
    with benchmark_module("leduc") as bench:
        out = tmp_path / "kuhn.csv"
        argv = ["leduc.py", "--game", "openspiel:kuhn_poker", "--methods", "mmd", "ppo-selfplay", "--seeds", "0"]
        argv += ["--seconds", "1", "--checkpoints", "1", "60"]
        argv += ["--set", "trainer.num_envs=64", "alpha=0.8", "schedule=constant"]
        monkeypatch.setattr(sys, "argv", argv + ["--out", str(tmp_path / "runs"), "--csv", str(out)])
        bench.main()
        rows = list(csv.DictReader(out.open(newline="")))
        assert [r["method"] for r in rows] == ["mmd", "mmd", "ppo-selfplay", "ppo-selfplay"]
        assert all(0.0 < float(r["exploitability"]) < 2.0 for r in rows)
        with (tmp_path / "runs" / "mmd" / "seed0" / "metrics.csv").open(newline="") as f:
            metrics = list(csv.DictReader(f))
        assert list(metrics[0])[:4] == ["iteration", "wall_time", "exploitability", "env_steps"]
        assert float(metrics[1]["mmd/alpha"]) == 0.8  # the settings reached MmdConfig (a constant α)
