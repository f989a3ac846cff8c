"""A run directory written before the collection layer (with vector_mode / num_env_workers / num_workers / extra in
its config.toml and the noise generators in the trainer's state) still evaluates and resumes, continuing exactly as
the old version's uninterrupted run did."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
from _product_helpers import run_cli

from marljoint.collect import CollectionConfig
from marljoint.run.train import load_run_spec

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "run_before_collection_layer"


def _rows(path):
    with open(path, newline="") as f:
        return [{k: v for k, v in row.items() if k not in ("wall_time", "sps")} for row in csv.DictReader(f)]


def test_an_old_run_directory_evaluates_and_resumes_as_the_old_uninterrupted_run(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE / "split", run)
    assert "vector_mode" in (run / "config.toml").read_text()
    assert load_run_spec(run).trainer.collection == CollectionConfig()
    assert run_cli(["eval", str(run), "--episodes", "2"]) == 0
    resume = ["train", "--out", str(run), "--resume", "--total-steps", "256", "--quiet"]
    assert run_cli(resume) == 2  # its env snapshot predates signed snapshots: resumed only when vouched for
    assert run_cli([*resume, "--trust-snapshot"]) == 0
    got, expected = _rows(run / "metrics.csv"), _rows(FIXTURE / "straight_metrics.csv")
    assert [r["iteration"] for r in got] == [r["iteration"] for r in expected] == ["1", "2", "3", "4"]
    for a, b in zip(got, expected):
        for key, value in b.items():
            # float kernels may differ in the last bits on another CPU: equal up to rounding
            assert np.isclose(float(a[key]), float(value), rtol=1e-4, atol=1e-6, equal_nan=True), key
    assert 'collection = {backend = "local", workers = 2}' in (run / "config.toml").read_text()
