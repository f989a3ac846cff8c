"""Keeps benchmarks/throughput.py runnable: its bare-env helpers and its CLI on the smallest budget (no timing is
asserted; speed targets are read from the benchmark's own output)."""

import math
import re
import sys

import pytest
from _benchmark_module import benchmark_module

pytest.importorskip("mpe2")


@pytest.fixture(scope="module")
def bench():
    with benchmark_module("throughput") as module:
        yield module


def test_bare_env_rate_by_steps_and_by_time_window(bench):
    assert bench.bare_env_rate(bench.ENVS["simple_spread_v3"], 300) > 0
    assert bench.bare_env_rate(bench.ENVS["simple_spread_v3"], 0, seconds=0.2) > 0


@pytest.mark.parametrize("processes", [1, 2])
def test_bare_env_rate_in_k_processes(bench, processes):
    assert bench.bare_env_rate_processes("simple_spread_v3", 0.3, processes) > 0


def test_the_scaling_model_follows_its_formulas(bench):
    # c·T = 50 ms per copy, u = 40 ms, x = 10 ms, s = 1.5, 3,000 agent-steps per iteration, E = 8
    costs = bench.IterationCosts(0.05, 0.04, 0.01, 1.5, 3000.0)
    lag0, spare, shared = bench.modelled_rates(costs, 1, num_envs=8)
    assert lag0 == pytest.approx(3000 / 0.45)  # w = 0.4 (no slowdown with one worker), t = w + x + u
    assert spare == pytest.approx(3000 / 0.4)  # the update hides behind the rollout
    assert shared == pytest.approx(3000 / 0.45)  # one core: nothing to overlap onto
    lag0, spare, shared = bench.modelled_rates(costs, 4, num_envs=8)
    assert lag0 == pytest.approx(3000 / 0.2)  # w = 0.05 * 2 * 1.5 = 0.15
    assert spare == pytest.approx(3000 / 0.15)
    assert shared == pytest.approx(3000 / (0.15 + 0.05 / 4))
    lag0, spare, shared = bench.modelled_rates(costs, 8, num_envs=8)
    assert spare == pytest.approx(3000 / 0.075)  # w = 0.075 > x + u = 0.05
    costs = bench.IterationCosts(0.05, 0.2, 0.01, 1.5, 3000.0)
    assert bench.modelled_rates(costs, 8, num_envs=8)[1] == pytest.approx(3000 / 0.21)  # now the learner's pace


def test_the_model_inputs_come_from_one_worker_and_from_k(bench):
    one = bench.Timings([3000, 3000, 3000], [0.41, 0.42, 0.43], [0.05, 0.04, 0.06], [[0.40], [0.40], [0.42]])
    two = bench.Timings([3000, 3000], [0.27, 0.26], [0.05, 0.05], [[0.25, 0.24], [0.23, 0.25]])
    costs = bench.measured_costs(one, two, 2)
    assert costs.copy_seconds == pytest.approx(0.40 / bench.NUM_ENVS)
    assert costs.update_seconds == pytest.approx(0.05)
    assert costs.exchange_seconds == pytest.approx(0.015)  # median of 0.27 - 0.25 and 0.26 - 0.25
    assert costs.slowdown == pytest.approx(0.25 / 0.20)
    assert costs.agent_steps == 3000
    assert one.full_rate == pytest.approx(9000 / (1.26 + 0.15))


@pytest.mark.slow  # a whole benchmark command end to end: seconds to tens of seconds on 2 cores
def test_cli_prints_every_table(bench, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["throughput.py", "--quick", "--skip-sb3", "--envs", "simple_spread_v3"])
    bench.main()
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| simple_spread_v3 |")]
    assert len(rows) == 3  # raw rates, drift-corrected ratios, then lag 0 against lag 1
    raw = [c.strip() for c in rows[0].strip("|").split("|")]
    # bare R, two processes, rollout, full, 2 workers: measured; SB3 columns: skipped
    assert all(float(c.replace(",", "")) > 0 for c in raw[1:6])
    assert raw[6] == "nan" and raw[7] == "nan"
    corrected = [c.strip() for c in rows[1].strip("|").split("|")]
    assert all(float(c) > 0 for c in corrected[1:4])  # rollout/R, full/R, workers/R
    assert all(math.isnan(float(c)) for c in corrected[4:])
    lagged = [c.strip() for c in rows[2].strip("|").split("|")]
    assert all(float(c.replace(",", "")) > 0 for c in lagged[1:])  # ceiling, lag 0, lag 1 and their ratios
    assert re.search(r"\| 16 \| [0-9.]+ \| [0-9.]+ \|", out)  # the independent-policy table reaches N = 16
    assert "N=8 shared:" in out
    _check_scaling_table(bench, out)


def _check_scaling_table(bench, out):
    """Every K of the scaling table has its model; those up to the cores, their measurements too."""
    table = out[out.index("scaling on simple_spread_v3") :].split("\n\n")[0].splitlines()
    rows = {int(line.split("|")[1]): [c.strip() for c in line.strip("|").split("|")] for line in table
            if re.match(r"\| \d+ \|", line)}
    assert sorted(rows) == sorted({*bench.SCALING_WORKERS, bench.CORES})
    for k, cells in rows.items():
        assert all(float(c) > 0 for c in cells[4:])  # the model's four columns
        if k <= bench.CORES:
            assert float(cells[2]) > 0 and float(cells[3]) > 0
        else:
            assert cells[1].endswith("(K·R)") and cells[2] == cells[3] == "-"


@pytest.mark.slow  # a whole benchmark command end to end: seconds to tens of seconds on 2 cores
def test_the_policy_lag_rows_run_with_balanced_workers(bench, monkeypatch, capsys):
    argv = ["throughput.py", "--quick", "--only-overlap", "--balance", "--envs", "simple_spread_v3"]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    out = capsys.readouterr().out
    assert f"{bench.CORES} env workers, balanced" in out
    row = next(line for line in out.splitlines() if line.startswith("| simple_spread_v3 |"))
    assert all(float(c.strip().replace(",", "")) > 0 for c in row.strip("|").split("|")[1:])


def test_set_changes_every_marljoint_config_and_refuses_a_value_that_is_not_json(bench, monkeypatch, capsys):
    monkeypatch.setattr(bench, "OVERRIDES", {})
    monkeypatch.setattr(sys, "argv", ["throughput.py", "--set", "share_trunk=tru"])
    with pytest.raises(SystemExit):
        bench.main()
    assert "the value must be JSON" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["throughput.py", "--workers", "0"])
    with pytest.raises(SystemExit):
        bench.main()
    assert "--workers must be between 1 and the 8 env copies, got 0" in capsys.readouterr().err
    bench.OVERRIDES["share_trunk"] = True
    assert bench._config(3).share_trunk is True
    assert bench._config(3, share_trunk=False).share_trunk is False  # a measurement's own change wins
