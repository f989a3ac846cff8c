"""``marljoint train`` writes a complete run directory; ``eval`` and ``plot`` read it."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from _product_helpers import TINY_ENV_KWARGS, run_cli, tiny_config, train_args

from marljoint.collect import CollectionConfig
from marljoint.ppo.metrics import PER_AGENT_STATS
from marljoint.run import _toml
from marljoint.run.evaluate import evaluate_run
from marljoint.run.runlog import Progress, read_metrics
from marljoint.run.stats import confidence_interval
from marljoint.run.train import RunSpec, load_run_spec, train_run

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    config = tiny_config(tmp)
    out = tmp / "run"
    assert run_cli(train_args(out, config, 6 * 64, "--redundancy", "xcorr", "--redundancy-coef", "0.1")) == 0
    return out


def test_run_directory_contents(run_dir):
    names = {p.name for p in run_dir.iterdir()}
    assert {"config.toml", "metrics.csv", "checkpoints", "learning_curve.png"} <= names
    assert [p.name for p in sorted((run_dir / "checkpoints").iterdir())] == [
        "ckpt_0000002.pt",
        "ckpt_0000004.pt",
        "ckpt_0000006.pt",
    ]
    assert (run_dir / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_config_toml_holds_the_full_resolved_config(run_dir):
    values = _toml.loads((run_dir / "config.toml").read_text())
    assert values["env"] == "bucket_brigade_v0"
    assert values["env_kwargs"] == TINY_ENV_KWARGS
    assert values["redundancy"] == "xcorr" and values["redundancy_coef"] == 0.1
    assert values["total_steps"] == 384 and values["num_envs"] == 4 and values["rollout_steps"] == 16
    assert values["clip_range_vf"] == math.inf
    spec = load_run_spec(run_dir)
    assert spec.trainer.hidden_sizes == (16,)


def test_metrics_csv_has_one_row_per_iteration_with_counters(run_dir):
    columns, rows = read_metrics(run_dir / "metrics.csv")
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r["env_steps"] for r in rows] == [64 * k for k in range(1, 7)]
    # Two agents, always alive in bucket brigade: agent steps = env steps × 2.
    assert [r["agent_steps"] for r in rows] == [128 * k for k in range(1, 7)]
    walls = [r["wall_time"] for r in rows]
    assert walls == sorted(walls) and walls[0] > 0
    assert all(r["sps"] > 0 for r in rows)
    for name in PER_AGENT_STATS:
        assert f"{name}/agent_0" in columns and f"{name}/agent_1" in columns
    # One network shared by both agents: its actor's and its critic's gradient norms, under the network's name.
    assert sorted(c for c in columns if c.startswith("grad_norm/")) == [
        "grad_norm/actor/agent_0+agent_1",
        "grad_norm/critic/agent_0+agent_1",
    ]
    assert all(r["aux_loss"] > 0 for r in rows)  # the redundancy penalty was on
    assert all(r["learning_rate"] == pytest.approx(1e-3) for r in rows)


def _documented_metrics() -> list[str]:
    text = (DOCS / "metrics.md").read_text()
    return re.findall(r"^\| `([^`]+)` \|", text, flags=re.MULTILINE)


def _pattern(name: str) -> re.Pattern:
    parts = re.split(r"(<[a-z_]+>)", name)
    regex = "".join("[^/]+" if p.startswith("<") else re.escape(p) for p in parts)
    return re.compile(f"^{regex}$")


def test_the_metrics_table_in_the_docs_matches_what_a_run_writes(run_dir):
    documented = _documented_metrics()
    assert len(documented) == len(set(documented))
    columns, _ = read_metrics(run_dir / "metrics.csv")
    patterns = {name: _pattern(name) for name in documented}
    undocumented = [c for c in columns if not any(p.match(c) for p in patterns.values())]
    assert not undocumented, f"add these to docs/metrics.md: {undocumented}"
    # Written only with RedundancyPenalty(variance_floor=...), which the command line does not set, and only with
    # --eval-every (tested in test_product_nothing_lost.py).
    optional = {"redundancy/variance_hinge", "eval/episode_return_mean", "eval/episode_return/<agent>"}
    optional.add("eval/best_episode_return_mean")
    optional |= {"mmd/alpha", "mmd/kl", "mmd/scale"}  # only with --self-play mmd (tests/best_response/test_mmd.py)
    optional.add("mmd/weight_max")  # only with mmd's opponent_reach (tests/best_response/test_mmd_opponent_reach.py)
    # Only in two-player zero-sum games or with --exploitability-every (test_product_zero_sum_eval.py).
    optional.update(n for n in documented if n.startswith(("exploit/", "eval/vs_random")))
    unused = [n for n, p in patterns.items() if n not in optional and not any(p.match(c) for c in columns)]
    assert not unused, f"docs/metrics.md lists metrics a run does not write: {unused}"


def _text_rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        return [{k: v for k, v in row.items() if k not in ("wall_time", "sps")} for row in csv.DictReader(f)]


def test_a_run_config_reproduces_the_run(run_dir, tmp_path):
    out = tmp_path / "again"
    assert run_cli(["train", "--config", str(run_dir / "config.toml"), "--out", str(out), "--quiet"]) == 0
    assert _text_rows(out) == _text_rows(run_dir)


def test_progress_prints_plain_lines_when_not_a_terminal(tmp_path):
    stream = io.StringIO()
    spec = RunSpec.from_dict(
        {
            "env_kwargs": TINY_ENV_KWARGS,
            "num_envs": 2,
            "rollout_steps": 8,
            "total_steps": 32,
            "hidden_sizes": [8],
            "n_epochs": 1,
        }
    )
    train_run(spec, tmp_path / "run", stream=stream)
    text = stream.getvalue()
    assert "\r" not in text
    assert re.search(r"32/32 steps  [\d,]+ agent-steps/s  ETA 0:00  return", text), text


def test_progress_redraws_one_line_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    progress = Progress(total_steps=100, stream=stream)
    progress.update(50, 1234.0, -3.5)
    progress.update(100, 1500.0, float("nan"))
    progress.close()
    text = stream.getvalue()
    assert text.count("\r[") == 2 and text.endswith("\n")
    assert "[############............] 50/100 steps  1,234 agent-steps/s" in text
    assert "return -3.5" in text.split("\r")[-1]  # the latest finite return stays shown


def test_tensorboard_event_files_when_installed(tmp_path):
    pytest.importorskip("tensorboard")
    spec = RunSpec.from_dict(
        {
            "env_kwargs": TINY_ENV_KWARGS,
            "num_envs": 2,
            "rollout_steps": 8,
            "total_steps": 16,
            "hidden_sizes": [8],
            "n_epochs": 1,
        }
    )
    train_run(spec, tmp_path / "run", progress=False)
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))


def test_eval_reports_each_agent_with_a_confidence_interval(run_dir, capsys):
    assert run_cli(["eval", str(run_dir), "--episodes", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["episodes"] == 3 and result["deterministic"] is True
    assert set(result["returns"]) == {"agent_0", "agent_1", "mean"}
    assert all(math.isfinite(v["mean"]) and v["ci95"] >= 0 for v in result["returns"].values())
    assert run_cli(["eval", str(run_dir), "--episodes", "2", "--sample"]) == 0
    text = capsys.readouterr().out
    assert "2 episodes, sampled actions" in text and "agent_0" in text and "±" in text


def test_eval_is_reproducible_for_a_seed(run_dir):
    a = evaluate_run(run_dir, episodes=3, deterministic=False, seed=3)
    b = evaluate_run(run_dir, episodes=3, deterministic=False, seed=3)
    assert np.array_equal(a.returns, b.returns)


def test_confidence_interval_matches_the_t_distribution():
    mean, half = confidence_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.302652729 * 1.0 / math.sqrt(3))
    assert math.isnan(confidence_interval([5.0])[1])


def test_gif_of_an_env_that_cannot_render_is_a_clear_error(run_dir, capsys, tmp_path):
    assert run_cli(["eval", str(run_dir), "--episodes", "1", "--gif", str(tmp_path / "a.gif")]) == 2
    err = capsys.readouterr().err
    assert "error" in err and "render" in err and "Traceback" not in err


@pytest.mark.parametrize("recurrent", [None, "gru"])
def test_gif_of_an_env_that_renders(tmp_path, capsys, recurrent):
    settings = {} if recurrent is None else {"recurrent": recurrent, "rnn_hidden_size": 8}
    spec = RunSpec.from_dict(
        {
            "env": "_product_helpers:rendering_counter",
            "env_kwargs": {"truncate_at": 4},
            "num_envs": 2,
            "rollout_steps": 8,
            "total_steps": 16,
            "hidden_sizes": [8],
            **settings,
        }
    )
    train_run(spec, tmp_path / "run", progress=False)
    gif = tmp_path / "episode.gif"
    assert run_cli(["eval", str(tmp_path / "run"), "--episodes", "2", "--gif", str(gif)]) == 0
    from PIL import Image

    with Image.open(gif) as image:
        assert image.n_frames == 4  # the reset frame and the frames after the three steps before the end
    pytest.importorskip("imageio_ffmpeg")
    video = tmp_path / "episode.mp4"
    assert run_cli(["eval", str(tmp_path / "run"), "--episodes", "2", "--video", str(video)]) == 0
    assert f"video written to {video}" in capsys.readouterr().out
    head = video.read_bytes()[:12]
    assert head[4:8] == b"ftyp" and video.stat().st_size > 100  # an MP4 container


def test_a_long_evaluation_shows_progress_and_stops_at_max_steps(tmp_path, capsys):
    spec = RunSpec.from_dict(
        {
            "env": "counter_v0",
            "env_kwargs": {"truncate_at": 100_000},
            "num_envs": 2,
            "rollout_steps": 8,
            "total_steps": 16,
            "hidden_sizes": [8],
        }
    )
    train_run(spec, tmp_path / "run", progress=False)
    assert run_cli(["eval", str(tmp_path / "run"), "--episodes", "1", "--max-steps", "20000"]) == 2
    err = capsys.readouterr().err
    assert "eval: 10,000 of at most 20,000 steps, 0/1 episodes ended" in err
    assert err.strip().splitlines()[-1].startswith("marljoint eval: error: only 0 of 1 episodes ended within 20000")


def test_plot_compares_runs(run_dir, tmp_path, capsys):
    out = tmp_path / "cmp.png"
    assert run_cli(["plot", str(run_dir), str(run_dir), "--labels", "a", "b", "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert run_cli(["plot", str(run_dir), "--metric", "nope", "--out", str(out)]) == 2
    assert "has no column 'nope'" in capsys.readouterr().err


def test_env_workers_give_the_same_run_as_one_process(run_dir, tmp_path):
    out = tmp_path / "workers"
    args = ["train", "--config", str(run_dir / "config.toml"), "--env-workers", "2", "--out", str(out), "--quiet"]
    assert run_cli(args) == 0
    spec = load_run_spec(out)
    assert spec.trainer.collection == CollectionConfig("subprocess", workers=2)
    assert _text_rows(out) == _text_rows(run_dir)


def test_env_workers_and_ray_workers_are_refused_together(tmp_path, capsys):
    args = ["train", "--env", "mock_v0", "--env-workers", "2", "--num-workers", "2", "--out", str(tmp_path / "x")]
    assert run_cli([*args, "--quiet"]) == 2
    assert "--env-workers (worker processes on this machine) and --ray/--num-workers" in capsys.readouterr().err
