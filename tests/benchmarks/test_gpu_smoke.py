"""Keeps benchmarks/gpu.py runnable here: its rows' configs and its CLI on the CPU with ``--quick`` (no timing is
asserted; the figures are read from the benchmark's own output on the GPU machine)."""

import csv

import pytest
from _benchmark_module import benchmark_module

pytest.importorskip("mpe2")


@pytest.fixture(scope="module")
def bench():
    with benchmark_module("gpu") as module:
        yield module


def test_the_rows_are_marljoint_trains_defaults_with_64_copies_and_the_large_mlp(bench):
    defaults = bench.config_for("cuda", False)
    assert (defaults.num_envs, defaults.rollout_steps, defaults.device, defaults.acting_device) == (
        64, 64, "cuda", "auto",
    )  # fmt: skip
    large = bench.config_for("cuda", False, **bench.LARGE_MLP)
    assert (large.hidden_sizes, large.minibatch_size, large.num_minibatches) == ((512, 512), 4096, None)
    quick = bench.config_for("cpu", True, **bench.LARGE_MLP)
    assert (quick.num_envs, quick.rollout_steps, quick.minibatch_size) == (8, 16, 128)


def test_cli_prints_every_figure_and_writes_the_csv(bench, tmp_path, capsys):
    out = tmp_path / "gpu.csv"
    bench.main(["--device", "cpu", "--quick", "--seconds", "0", "--window", "0.2", "--csv", str(out)])
    printed = capsys.readouterr().out
    assert "| figure | case | agent-steps/s | reference | reference agent-steps/s | ratio | target | meets |" in printed
    rows = list(csv.DictReader(out.open()))
    assert [r["figure"] for r in rows] == ["a", "b", "c", "c", "d"]
    assert all(float(r["rate"]) > 0 and float(r["reference"]) > 0 for r in rows)
    assert [r["target"] for r in rows] == ["", "5.0", "0.5", "0.5", "0.7"]
    assert "bare ceiling" in rows[-1]["reference_case"]
