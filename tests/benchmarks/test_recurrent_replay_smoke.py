"""Keeps benchmarks/recurrent_replay.py runnable: its inputs, a timed replay and its table on the smallest case (no
timing is asserted; the speeds are what the benchmark reports)."""

import pytest
import torch
from _benchmark_module import benchmark_module


@pytest.fixture(scope="module")
def bench():
    with benchmark_module("recurrent_replay") as module:
        yield module


def test_the_inputs_pad_every_fourth_chunk_and_skip_the_asked_share(bench):
    case = bench.Case(2, 8, 8, 4)
    cells, xs, states, starts, advance = bench.replay_inputs(case, "lstm", "cpu", skip=0.0, start=0.0)
    assert len(cells) == 2 and xs[0].shape == (8, 2, 8, 4) and states[1].shape == (2, 8, 8)
    assert starts[6:, :, ::4].all() and not advance[6:, :, ::4].any()
    assert advance[:, :, 1::4].all() and not starts[:, :, 1::4].any()
    _, _, _, _, skipping = bench.replay_inputs(case, "gru", "cpu", skip=1.0, start=0.0)
    assert not skipping.any()


def test_the_cli_prints_a_row_per_case_and_kind(bench, monkeypatch, capsys):
    monkeypatch.setattr(bench, "CASES", (bench.Case(1, 4, 4, 8), bench.Case(2, 4, 4, 8)))
    threads = torch.get_num_threads()
    try:
        bench.main(["--repeats", "1", "--warmup", "0", "--kinds", "gru", "lstm"])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("| gru", "| lstm"))]
    assert len(rows) == 4 and "| cells ms | fused ms |" in out
