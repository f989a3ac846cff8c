"""The reward scale of value runs through ``marljoint train``: ``"auto"`` by default (logged as
``offpolicy/reward_scale``), a fixed factor when set, and one line with exit 2 for a bad value."""

from __future__ import annotations

import pytest
from _product_helpers import newest_checkpoint, run_cli

TRAIN = ["train", "--env", "mock_v0", "--algorithm", "vdn", "--num-envs", "2", "--rollout-steps", "8", "--quiet"]
TRAIN += ["--total-steps", "48"]


def _last_row(run_dir):
    lines = (run_dir / "metrics.csv").read_text().splitlines()
    return dict(zip(lines[0].split(","), lines[-1].split(",")))


def test_a_value_run_scales_by_the_running_reward_std_by_default(tmp_path):
    args = [*TRAIN, "--set", "offpolicy={learning_starts=16, batch_size=8}", "--out", str(tmp_path / "run")]
    assert run_cli(args) == 0
    state = newest_checkpoint(tmp_path / "run")["trainer"]
    assert state["config"]["reward_scale"] == "auto"
    moments = state["algorithm"]["reward_scale"]
    assert moments["count"] == 48
    factor = (moments["sum_squares"] / moments["count"]) ** -0.5
    assert float(_last_row(tmp_path / "run")["offpolicy/reward_scale"]) == pytest.approx(factor, rel=1e-6)


def test_a_fixed_reward_scale_is_logged_as_set(tmp_path):
    args = [*TRAIN, "--set", "offpolicy={learning_starts=16, batch_size=8, reward_scale=0.01}"]
    assert run_cli([*args, "--out", str(tmp_path / "run")]) == 0
    assert float(_last_row(tmp_path / "run")["offpolicy/reward_scale"]) == 0.01


@pytest.mark.parametrize("value", ["'Auto'", "0", "-2.5"])
def test_a_bad_reward_scale_gives_one_line_and_exit_2(value, tmp_path, capsys):
    args = [*TRAIN, "--set", f"offpolicy={{reward_scale={value}}}", "--out", str(tmp_path / "run")]
    assert run_cli(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "offpolicy.reward_scale must be 'auto' or a positive number, got " in err, err
    assert not (tmp_path / "run").exists()
