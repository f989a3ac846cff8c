"""Keeps benchmarks/generalization.py runnable: every env of its suite builds, a run trains and is evaluated on the
same episodes, finished runs are skipped on a rerun, and the report reads the CSV (tiny budgets; nothing about
learning is asserted here: that is what the benchmark measures)."""

import csv
import sys

import numpy as np
import pytest
from _benchmark_module import benchmark_module

pytest.importorskip("mpe2")


@pytest.fixture(scope="module")
def bench():
    with benchmark_module("generalization") as module:
        yield module


def test_every_env_of_the_suite_builds_and_covers_the_families_the_issue_names(bench):
    assert len(bench.SUITE) >= 6 and {"simple_spread", "bucket_brigade"} <= set(bench.SUITE)
    assert any(t.image for t in bench.SUITE.values()) and any(t.agents_leave for t in bench.SUITE.values())
    for name, task in bench.SUITE.items():
        env = task.factory()
        assert env.possible_agents, name
        env.close()


def test_the_same_episodes_give_the_same_returns(bench):
    task = bench.SUITE["simple_reference"]
    a = bench.evaluate(task, bench.random_actor(0), 3, 100)
    b = bench.evaluate(task, bench.random_actor(0), 3, 100)
    assert np.array_equal(a, b) and a.shape == (3,)


def test_the_cli_trains_evaluates_resumes_and_reports(bench, tmp_path, monkeypatch, capsys):
    out = tmp_path / "runs.csv"
    argv = ["generalization.py", "--envs", "speaker_listener", "--methods", "random", "marljoint"]
    argv += ["--seeds", "0", "1", "--scale", "0.001", "--episodes", "2", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {(r["method"], r["mode"]) for r in rows} == {("random", "sampled"), ("marljoint", "greedy"),
                                                        ("marljoint", "sampled")}
    assert len(rows) == 1 + 2 * 2
    bench.main()  # finished runs are not trained again
    assert len(out.read_text().splitlines()) == 1 + len(rows)
    pytest.importorskip("matplotlib")
    picture = tmp_path / "plot" / "generalization.png"
    monkeypatch.setattr(sys, "argv", ["generalization.py", "--report", "--out", str(out), "--plot", str(picture)])
    bench.main()
    table = capsys.readouterr().out
    assert "| speaker_listener |" in table and "(2)" in table
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_candidate_default_is_recorded_as_its_own_method(bench, tmp_path, monkeypatch):
    out = tmp_path / "runs.csv"
    argv = ["generalization.py", "--envs", "speaker_listener", "--methods", "marljoint", "--seeds", "0"]
    argv += ["--scale", "0.001", "--episodes", "1", "--out", str(out), "--set", "n_epochs=1", "minibatch_size=128"]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    with out.open(newline="") as f:
        methods = {r["method"] for r in csv.DictReader(f)}
    assert methods == {"marljoint[minibatch_size=128,n_epochs=1]"}
    with pytest.raises(SystemExit, match="--set takes KEY=VALUE"):
        bench.parse_changes(["n_epochs"])
