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


def test_bare_env_rate_in_two_processes(bench):
    assert bench.bare_env_rate_two_processes("simple_spread_v3", 0.3) > 0


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


def test_the_policy_lag_rows_run_with_balanced_workers(bench, monkeypatch, capsys):
    argv = ["throughput.py", "--quick", "--only-overlap", "--balance", "--envs", "simple_spread_v3"]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    out = capsys.readouterr().out
    assert "2 env workers, balanced" in out
    row = next(line for line in out.splitlines() if line.startswith("| simple_spread_v3 |"))
    assert all(float(c.strip().replace(",", "")) > 0 for c in row.strip("|").split("|")[1:])
