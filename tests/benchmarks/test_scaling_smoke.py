"""Keeps benchmarks/scaling.py runnable: its worker counts, the model's inputs and its CLI on the smallest budget
(no timing is asserted; the figures are read from the benchmark's own output)."""

import csv

import pytest
from _benchmark_module import benchmark_module

pytest.importorskip("mpe2")


@pytest.fixture(scope="module")
def bench():
    with benchmark_module("scaling") as module:
        yield module


def test_worker_counts_double_up_to_the_cores_and_end_at_cores_minus_one(bench):
    assert bench.worker_counts(16, 64) == [1, 2, 4, 8, 15]
    assert bench.worker_counts(64, 64) == [1, 2, 4, 8, 16, 32, 63]
    assert bench.worker_counts(3, 64) == [1, 2]
    assert bench.worker_counts(1, 64) == [1]
    assert bench.worker_counts(16, 8) == [1, 2, 4, 8]  # never more workers than copies


def test_the_model_takes_c_from_one_worker_and_u_x_s_from_k(bench):
    one = bench.Measured(1000.0, 0.40, 0.05, [0.40], 3000.0, 1)
    four = bench.Measured(3000.0, 0.16, 0.02, [0.14, 0.15, 0.12, 0.13], 3000.0, 12)
    costs = bench.costs_of(one, four, 4, 8)
    assert costs.copy_seconds == pytest.approx(0.05)
    assert costs.update_seconds == pytest.approx(0.02)  # K's own update: its learner has K's threads
    assert costs.exchange_seconds == pytest.approx(0.01)
    assert costs.slowdown == pytest.approx(0.15 / 0.10)


def test_the_shapes_are_marljoint_trains_defaults_and_the_comparison_batch(bench):
    defaults = bench.config_for("defaults", 15, 1)
    assert (defaults.num_envs, defaults.n_epochs, defaults.num_minibatches) == (64, 10, 16)
    assert (defaults.collection.workers, defaults.collection.policy_lag, defaults.torch_threads) == (15, 1, "auto")
    comparison = bench.config_for("benchmark", 2, 0)
    assert (comparison.num_envs, comparison.rollout_steps, comparison.minibatches_per_epoch) == (8, 128, 4)


def test_cli_prints_the_table_and_writes_the_csv(bench, tmp_path, capsys):
    out = tmp_path / "scaling.csv"
    bench.main(["--envs", "simple_spread_v3", "--shapes", "benchmark", "--workers", "1", "--iterations", "1",
                "--window", "0.2", "--csv", str(out), "--modes", "workers"])  # fmt: skip
    printed = capsys.readouterr().out
    assert "| env | shape | K workers | learner threads | K-process ceiling | lag 0 | lag 1 |" in printed
    assert "R (one bare process): simple_spread_v3" in printed
    rows = list(csv.DictReader(out.open()))
    assert [(r["env"], r["shape"], r["workers"]) for r in rows] == [("simple_spread_v3", "benchmark", "1")]
    assert float(rows[0]["lag0"]) > 0 and float(rows[0]["lag1"]) > 0


def test_update_costs_prints_one_row_per_number_of_copies(bench, capsys, monkeypatch):
    # One core: a test machine's other jobs would make a threaded update spin (the thread policy's point).
    monkeypatch.setattr(bench, "usable_cores", lambda: 1)
    bench.main(["--envs", "simple_spread_v3", "--update-costs", "1", "--iterations", "0"])
    printed = capsys.readouterr().out
    assert "| copies | rows per agent | 16 minibatches, 1 thread |" in printed
    row = next(line for line in printed.splitlines() if line.startswith("| 1 | 256 |"))
    assert all(float(cell) > 0 for cell in row.split("|")[3:6])


def test_rank_counts_double_up_to_the_cores_and_end_at_the_cores(bench):
    assert bench.rank_counts(16, 64) == [1, 2, 4, 8, 16]
    assert bench.rank_counts(2, 64) == [1, 2]
    assert bench.rank_counts(6, 64) == [1, 2, 4, 6]
    assert bench.rank_counts(16, 4) == [1, 2, 4]  # never more ranks than copies


def test_the_ranks_model_splits_the_rollout_and_adds_one_all_reduce_per_minibatch_step(bench):
    one = bench.rank_model(0.02, 0.5, 0.001, 160, 1, 64, 12288)
    assert one == pytest.approx(12288 / (0.02 * 64 + 0.5))  # one process: no all-reduce
    two = bench.rank_model(0.02, 0.3, 0.001, 160, 2, 64, 12288)
    assert two == pytest.approx(12288 / (0.02 * 32 + 0.3 + 0.16))


def test_the_ranks_rows_run_the_users_command_and_read_its_metrics(bench, tmp_path):
    command = bench.train_command("simple_spread_v3", "benchmark", 4, 2, tmp_path / "run")
    assert command[1:4] == ["-m", "marljoint", "train"] and command[-2:] == ["--ranks", "4"]
    assert "--set=n_epochs=4" in command and command[command.index("--total-steps") + 1] == str(3 * 8 * 128)
    metrics = tmp_path / "metrics.csv"
    metrics.write_text("iteration,wall_time,agent_steps\n1,2.0,1000\n2,3.0,2000\n3,4.5,3000\n")
    assert bench.metrics_rate(metrics) == pytest.approx(2000 / 2.5)  # after the warm-up iteration
    metrics.write_text("iteration,wall_time,agent_steps\n1,2.0,1000\n")
    with pytest.raises(ValueError, match="has 1 iteration"):
        bench.metrics_rate(metrics)


def test_the_device_script_of_the_ranks_parses_and_explains_itself():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "device" / "ranks_scaling.py"
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--parts {cpu,gpu}" in done.stdout and "K = 1, 2, 4, 8, 16 CPU ranks" in done.stdout


def test_the_ranks_table_shows_modelled_rows_beyond_the_cores_unmeasured(bench):
    nan = float("nan")
    rows = [
        bench.RankRow("simple_spread_v3", "defaults", 1, 8000.0, 5000.0, 0.02, 0.5, 0.0, 160, 6000.0),
        bench.RankRow("simple_spread_v3", "defaults", 16, 128000.0, nan, 0.02, 0.3, 0.001, 160, 24000.0),
    ]
    table = bench.rank_table(rows).splitlines()
    assert "| model speed-up |" in table[0]
    assert table[2].startswith("| simple_spread_v3 | defaults | 1 | 8,000 | 5,000 | 0.62 | 0.75 | 1.00 | 1.00 |")
    assert table[3].startswith("| simple_spread_v3 | defaults | 16 | 128,000 | - | - | 0.19 | - | 4.00 |")
