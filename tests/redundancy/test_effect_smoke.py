"""Keeps benchmarks/redundancy_effect.py runnable: its measures on known features, and its CLI on a tiny budget."""

import importlib.util
import json
import math
import pathlib
import sys

import pytest
import torch

pytest.importorskip("mpe2")

_PATH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "redundancy_effect.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("redundancy_effect", _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_measures_on_known_features(bench):
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    y = torch.tensor([1.0, 3.0, 2.0, 4.0], dtype=torch.float64)
    constant = torch.full((4,), 7.0, dtype=torch.float64)
    out = bench.redundancy_measures([torch.stack([x, constant], 1), torch.stack([y, -x], 1)])
    # |corr| matrix [[4/5, 1], [0, 0]]: the constant feature counts as 0 correlation, and is reported.
    assert out["mean_abs_corr"] == pytest.approx((0.8 + 1.0) / 4)
    assert out["xcorr"] == pytest.approx((0.64 + 1.0) / 4)
    assert out["constant_features"] == [1, 0]
    assert out["feature_std"][0] == pytest.approx(math.sqrt(1.25) / 2)
    assert list(out["pairs"]) == ["0-1"]


def test_cli_runs_on_a_tiny_budget(bench, tmp_path, capsys):
    out = tmp_path / "results.json"
    argv = ["--steps", "1024", "--seeds", "0", "--coefs", "0", "1", "--probe-size", "64", "--eval-episodes", "4"]
    results = bench.main([*argv, "--out", str(out)])
    assert json.loads(out.read_text())["config"]["steps"] == 1024
    assert [(r["coef"], r["seed"]) for r in results["runs"]] == [(0.0, 0), (1.0, 0)]
    for run in results["runs"]:
        for key in (*bench.MEASURES, "return"):
            assert math.isfinite(run[key])
        assert len(run["feature_std"]) == 3
        for key in bench.MEASURES:
            assert math.isfinite(run["task_probe"][key])
    checks = results["summary"]["criteria"]["1.0"]
    assert set(checks) == {
        "mean_abs_corr_halved",
        "xcorr_halved",
        "cka_halved",
        "no_variance_collapse",
        "task_probe_mean_abs_corr_halved",
        "task_probe_xcorr_halved",
        "task_probe_cka_halved",
        "task_probe_no_variance_collapse",
        "return_kept",
        "all_held",
    }
    assert "Wall time" in capsys.readouterr().out
    # The λ = 0 runs are reused from the file, and the new coefficient is checked against them.
    again = bench.main([*argv[:5], "2", *argv[7:], "--baseline", str(out)])
    assert [(r["coef"], r["seed"]) for r in again["runs"]] == [(0.0, 0), (2.0, 0)]
    assert again["runs"][0] == {**results["runs"][0], "reused": True}
    assert set(again["summary"]["criteria"]) == {"2.0"}
    with pytest.raises(ValueError, match="the baseline file has steps=1024 but this run uses 2048"):
        bench.main(["--steps", "2048", *argv[2:], "--baseline", str(out)])


def test_a_baseline_made_by_other_code_is_refused(bench):
    earlier = {"code": {**bench.code_fingerprint(), "marljoint_sources_sha256": "0" * 64}, "config": {}, "runs": []}
    with pytest.raises(ValueError, match="the baseline file was made by other code"):
        bench.baseline_runs(bench.BenchmarkConfig(), earlier)


def test_the_task_probe_visits_states_near_the_landmarks(bench):
    """Agents heading for their own landmark end up closer to it than random play leaves them."""

    def own_landmark_distance(probe):
        obs = probe[0]  # [P, 3, 18]; agent i's landmark i sits at 4 + 2i .. 6 + 2i
        return float(torch.stack([obs[:, i, 4 + 2 * i : 6 + 2 * i].norm(dim=-1) for i in range(3)]).mean())

    random_probe = bench.collect_probe(bench.make_spread, 512, 3)
    task_probe = bench.collect_probe(bench.make_spread, 512, 3, policy="task")
    assert own_landmark_distance(task_probe) < 0.6 * own_landmark_distance(random_probe)
    with pytest.raises(ValueError, match="unknown probe policy 'expert'"):
        bench.collect_probe(bench.make_spread, 16, 3, policy="expert")
