"""Shared helpers of the product tests: tiny runs that finish in about a second."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from marljoint.checkpoint import list_checkpoints, load_checkpoint
from marljoint.cli import main
from marljoint.run.train import RunSpec
from marljoint_envs import counter_v0

TINY_ENV_KWARGS = {"scenario": "easy", "num_houses": 5, "num_agents": 2, "max_nights": 20}
TINY_CONFIG = "rollout_steps = 16\nminibatch_size = 64\nn_epochs = 2\nhidden_sizes = [16]\ncheckpoint_every = 2\n"


def tiny_config(directory: Path, extra: str = "") -> Path:
    """A --config file for tiny runs (2 envs × 16 steps per iteration)."""
    path = directory / "tiny.toml"
    path.write_text(TINY_CONFIG + extra)
    return path


def train_args(out: Path, config: Path, total_steps: int = 4 * 64, *extra: str) -> list[str]:
    """Arguments of a tiny ``marljoint train`` on bucket_brigade_v0 (4 iterations by default)."""
    return [
        "train",
        "--env",
        "bucket_brigade_v0",
        "--env-kwargs",
        json.dumps(TINY_ENV_KWARGS),
        "--num-envs",
        "4",
        "--total-steps",
        str(total_steps),
        "--config",
        str(config),
        "--out",
        str(out),
        "--quiet",
        *extra,
    ]


def resume_args(out: Path, total_steps: int, *extra: str) -> list[str]:
    """Arguments of ``marljoint train --resume`` for a run made with :func:`train_args`."""
    return ["train", "--out", str(out), "--resume", "--total-steps", str(total_steps), "--quiet", *extra]


def tiny_spec(total_iterations: int, **changes) -> RunSpec:
    """A tiny bucket-brigade run of ``total_iterations`` iterations, checkpointed every second one."""
    values = {
        "env_kwargs": TINY_ENV_KWARGS,
        "num_envs": 4,
        "rollout_steps": 16,
        "minibatch_size": 32,
        "n_epochs": 2,
        "hidden_sizes": [16],
        "total_steps": total_iterations * 4 * 16,
        "checkpoint_every": 2,
        **changes,
    }
    return RunSpec.from_dict(values)


def newest_checkpoint(run_dir: Path) -> dict:
    """The state of ``run_dir``'s newest checkpoint."""
    return load_checkpoint(list_checkpoints(run_dir / "checkpoints")[-1])


def run_cli(args: list[str]) -> int:
    """Runs ``marljoint`` in-process and returns its exit status (SystemExit included)."""
    try:
        return main(args)
    except SystemExit as exc:
        return int(exc.code or 0)


def rendering_counter(render_mode: str | None = None, **kwargs):
    """counter_v0 whose render() returns a small rgb_array frame (for GIF tests)."""
    env = counter_v0.parallel_env(**kwargs)
    frames = {"count": 0}

    def render():
        frames["count"] += 1
        frame = np.zeros((8, 8, 3), np.uint8)
        frame[..., 0] = (frames["count"] * 20) % 256
        return frame

    env.render = render
    env.render_mode = render_mode
    return env


def unpicklable_counter(**kwargs):
    """counter_v0 holding a lock, which pickle refuses (stands in for envs with physics engines or windows)."""
    import threading

    env = counter_v0.parallel_env(num_agents=2, truncate_at=5, **kwargs)
    env.lock = threading.Lock()
    return env


def broken_env():
    """A counter_v0 whose first step raises."""
    from pettingzoo.utils.wrappers import BaseParallelWrapper

    class Broken(BaseParallelWrapper):
        def step(self, actions):
            raise RuntimeError("this env is broken at its first step")

    return Broken(counter_v0.parallel_env())
