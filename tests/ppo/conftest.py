"""Fixtures of the trainer's tests."""

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture
def tiny_run(tmp_path) -> Callable[..., tuple[Any, str, Any]]:
    """Trains a 64-step ``marljoint train`` run of ``env`` (2 copies × 16 steps, 16-row minibatches) into
    ``tmp_path / "run"``; returns ``(its spec before training, its config.toml, the trainer settings a resume
    reads)``. A rule's setting is ``None`` in the spec, resolved in the file."""
    from marljoint.run.train import RunSpec, load_run_spec, train_run

    def run(env: str, env_kwargs: dict[str, Any]) -> tuple[Any, str, Any]:
        spec = RunSpec.from_dict(
            {"env": env, "env_kwargs": env_kwargs, "total_steps": 64, "num_envs": 2, "rollout_steps": 16,
             "minibatch_size": 16}
        )
        train_run(spec, tmp_path / "run", progress=False)
        return spec, (tmp_path / "run" / "config.toml").read_text(), load_run_spec(tmp_path / "run").trainer

    return run
