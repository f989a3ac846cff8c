"""Keeps benchmarks/side_by_side.py runnable: its command lines and its timer (no timing is asserted)."""

import sys
from pathlib import Path

import pytest
from _benchmark_module import benchmark_module


@pytest.fixture(scope="module")
def bench():
    with benchmark_module("side_by_side") as module:
        yield module


def test_a_copy_is_pinned_only_for_the_one_core_run_and_gets_its_own_out_and_seed(bench):
    pinned = bench.command("train", Path("/tmp/x"), 3, pin=1)
    assert pinned[:3] == ["taskset", "-c", "1"] and pinned[4:6] == ["train", "--env"]
    free = bench.command("nfsp", Path("/tmp/y"), 1)
    assert free[1] == "nfsp" and free[-4:] == ["--out", "/tmp/y", "--seed", "1"]


def test_commands_run_together_and_a_failure_names_the_command(bench):
    seconds = bench.timed([[sys.executable, "-c", "pass"], [sys.executable, "-c", "pass"]])
    assert len(seconds) == 2 and all(s > 0 for s in seconds)
    with pytest.raises(RuntimeError, match="exited with 3"):
        bench.timed([[sys.executable, "-c", "print('boom'); raise SystemExit(3)"]])
