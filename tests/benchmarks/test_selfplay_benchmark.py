"""Keeps the self-play methods of benchmarks/leduc.py runnable on any OpenSpiel game: a tiny budget on Kuhn poker,
the CSV rows and the per-run metrics (nothing about learning is asserted: that is what the benchmark measures)."""

import csv
import math
import sys

import numpy as np
import pytest
from _benchmark_module import benchmark_module

from marljoint.run.registry import known_game


def test_mmd_and_plain_self_play_run_through_the_leduc_script_on_kuhn_poker(tmp_path, monkeypatch, capsys):
    pytest.importorskip("pyspiel")
    with benchmark_module("leduc") as bench:
        out = tmp_path / "kuhn.csv"
        argv = ["leduc.py", "--game", "openspiel:kuhn_poker", "--methods", "mmd", "ppo-selfplay", "--seeds", "0"]
        argv += ["--seconds", "1", "--checkpoints", "1", "60"]
        argv += ["--set", "trainer.num_envs=64", "alpha=0.8", "schedule=constant", "magnet=uniform"]
        monkeypatch.setattr(sys, "argv", argv + ["--out", str(tmp_path / "runs"), "--csv", str(out)])
        bench.main()
        rows = list(csv.DictReader(out.open(newline="")))
        methods = ["mmd", "mmd", "mmd-average", "mmd-average", "mmd-best", "mmd-best", "ppo-selfplay", "ppo-selfplay"]
        assert [r["method"] for r in rows] == methods
        assert all(0.0 < float(r["exploitability"]) < 2.0 for r in rows)
        with (tmp_path / "runs" / "mmd" / "seed0" / "metrics.csv").open(newline="") as f:
            metrics = list(csv.DictReader(f))
        assert list(metrics[0])[:4] == ["iteration", "wall_time", "exploitability", "env_steps"]
        assert float(metrics[1]["mmd/alpha"]) == 0.8  # the settings reached MmdConfig (a constant α)
        assert math.isnan(float(metrics[0]["average_exploitability"]))  # nothing averaged before iteration 1
        averages = {float(r["checkpoint_s"]): float(r["exploitability"]) for r in rows if r["method"] == "mmd-average"}
        assert averages[60.0] == float(metrics[-1]["average_exploitability"])
        scored = [min(float(m["exploitability"]), float(m["average_exploitability"])) for m in metrics[1:]]
        best = [float(m["best_policy_exploitability"]) for m in metrics[1:]]
        assert best == list(np.minimum.accumulate(scored))  # the least exploitable policy so far
        bests = {float(r["checkpoint_s"]): float(r["exploitability"]) for r in rows if r["method"] == "mmd-best"}
        assert bests[60.0] == best[-1] <= averages[60.0]
        with (tmp_path / "runs" / "ppo-selfplay" / "seed0" / "metrics.csv").open(newline="") as f:
            assert "average_exploitability" not in next(csv.DictReader(f))
        argv = ["leduc.py", "--report", "--game", "openspiel:kuhn_poker", "--csv", str(out)]
        monkeypatch.setattr(sys, "argv", argv)
        capsys.readouterr()  # the runs' own lines
        bench.main()
        table = [line.split("|")[1].strip() for line in capsys.readouterr().out.splitlines()[2:]]
        assert table == ["mmd", "mmd-average", "mmd-best", "ppo-selfplay"]


def test_the_average_of_the_self_play_benchmark_is_the_linear_reach_weighted_average(monkeypatch):
    pytest.importorskip("pyspiel")
    with benchmark_module("selfplay") as bench:
        iterates = []
        original = bench.current_tables

        def recording(trainer, game):
            tables = original(trainer, game)
            iterates.append(tables)
            return tables

        monkeypatch.setattr(bench, "current_tables", recording)
        history = bench.run_self_play(
            "openspiel:kuhn_poker", "mmd", 0, 0.5, eval_every=0.0, trainer_changes={"num_envs": 16}
        )
        iterates = iterates[1:]  # the first tabulation scores the initial policies (row 0), outside the average
        game = known_game("openspiel:kuhn_poker")
        by_hand = [
            game.mixture_table([tables[p] for tables in iterates], np.arange(1.0, len(iterates) + 1), p)
            for p in range(2)
        ]
        assert history[-1]["iteration"] == len(iterates) >= 1
        expected = game.nash_conv(by_hand) / 2
        assert history[-1]["average_exploitability"] == pytest.approx(expected, abs=1e-9)


def test_self_play_in_worker_processes_is_the_in_process_run_bit_for_bit():
    pytest.importorskip("pyspiel")
    with benchmark_module("selfplay") as bench:
        tables = []
        for workers in (0, 2):
            trainer, game, _ = bench.self_play_trainer(
                "openspiel:kuhn_poker", "mmd", 3, {"num_envs": 32}, {}, env_workers=workers
            )
            try:
                backend = trainer.config.collection
                assert (backend.backend, backend.policy_lag) == (("local", 0) if workers == 0 else ("subprocess", 0))
                for _ in range(3):
                    trainer.iterate()
                tables.append(bench.current_tables(trainer, game))
            finally:
                trainer.close()
                trainer.env.close()
        for here, there in zip(*tables):
            np.testing.assert_array_equal(here, there)


def test_the_overlapped_self_play_clock_runs_through_the_scoring(monkeypatch):
    pytest.importorskip("pyspiel")
    import time

    with benchmark_module("selfplay") as bench:
        original = bench.exploitability_of

        def slow(*args, **kwargs):  # a scoring that takes 0.2 s
            time.sleep(0.2)
            return original(*args, **kwargs)

        monkeypatch.setattr(bench, "exploitability_of", slow)
        counts = {}
        for lag in (0, 1):
            history = bench.run_self_play(
                "openspiel:kuhn_poker", "ppo-selfplay", 0, 1.0, eval_every=0.0, trainer_changes={"num_envs": 16},
                env_workers=1, policy_lag=lag,
            )
            assert history[-1]["wall_time"] <= 1.0 + 1e-9
            counts[lag] = history[-1]["iteration"]
        # Scored after every iteration: with policy lag 1 the 0.2 s of each scoring count against the 1 s budget.
        assert counts[1] <= 5 < counts[0]


def test_the_leduc_script_refuses_a_bad_worker_count(monkeypatch):
    with benchmark_module("leduc") as bench:
        monkeypatch.setattr(sys, "argv", ["leduc.py", "--methods", "mmd", "--env-workers", "two"])
        message = r"--env-workers takes 'auto', 0 \(collect in this process\) or a number of workers, got 'two'"
        with pytest.raises(SystemExit, match=message):
            bench.main()


def test_an_ema_magnet_run_reports_the_magnet_as_its_own_row(tmp_path, monkeypatch, capsys):
    pytest.importorskip("pyspiel")
    with benchmark_module("leduc") as bench:
        out = tmp_path / "kuhn.csv"
        argv = ["leduc.py", "--game", "openspiel:kuhn_poker", "--methods", "mmd", "--seeds", "0", "--seconds", "1"]
        argv += ["--checkpoints", "60", "--set", "trainer.num_envs=64", "magnet=ema", "magnet_rate=0.5"]
        monkeypatch.setattr(sys, "argv", argv + ["--out", str(tmp_path / "runs"), "--csv", str(out)])
        bench.main()
        rows = list(csv.DictReader(out.open(newline="")))
        assert [r["method"] for r in rows] == ["mmd", "mmd-average", "mmd-magnet", "mmd-best"]
        with (tmp_path / "runs" / "mmd" / "seed0" / "metrics.csv").open(newline="") as f:
            metrics = list(csv.DictReader(f))
        magnet = [float(m["magnet_exploitability"]) for m in metrics]
        assert magnet[0] == float(metrics[0]["exploitability"])  # the magnet starts as the initial policy
        assert float(rows[2]["exploitability"]) == magnet[-1]
        kinds = ("exploitability", "average_exploitability", "magnet_exploitability")
        assert float(rows[3]["exploitability"]) == min(float(m[k]) for m in metrics[1:] for k in kinds)
        monkeypatch.setattr(sys, "argv", ["leduc.py", "--report", "--game", "openspiel:kuhn_poker", "--csv", str(out)])
        capsys.readouterr()
        bench.main()
        table = [line.split("|")[1].strip() for line in capsys.readouterr().out.splitlines()[2:]]
        assert table == ["mmd", "mmd-average", "mmd-magnet", "mmd-best"]
