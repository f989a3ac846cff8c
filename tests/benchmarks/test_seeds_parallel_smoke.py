"""Keeps benchmarks/seeds_parallel.py runnable: its command lines and a tiny comparison (no timing is asserted)."""

import pytest
from _benchmark_module import benchmark_module


@pytest.fixture(scope="module")
def bench():
    with benchmark_module("seeds_parallel") as module:
        yield module


def test_the_default_mode_leaves_jobs_out_and_the_others_give_it(bench, tmp_path):
    auto = bench.command("mock_v0", 64, [0, 1], "auto", tmp_path)
    assert auto[auto.index("train") + 1] == "--env" and "--jobs" not in auto and auto[-7:-5] == ["--seeds", "0"]
    assert bench.command("mock_v0", 64, [0], "2", tmp_path)[-2:] == ["--jobs", "2"]


def test_a_failing_command_is_named_with_its_output(bench, tmp_path):
    with pytest.raises(RuntimeError, match="exited with 2"):
        bench.timed(bench.command("no_such_env_v0", 64, [0], "1", tmp_path))


@pytest.mark.slow  # a whole benchmark command end to end: seconds to tens of seconds on 2 cores
def test_a_tiny_comparison_reports_the_same_bits_and_saves_its_report(bench, tmp_path, capsys):
    args = ["--env", "mock_v0", "--total-steps", "64", "--seeds", "0", "1", "--save", str(tmp_path)]
    assert bench.main(args) == 0
    printed = capsys.readouterr().out
    assert "same bits in every mode: yes" in printed and "default/sequential" in printed
    assert len(list(tmp_path.glob("*.txt"))) == 1
