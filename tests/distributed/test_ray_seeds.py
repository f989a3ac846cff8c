"""``marljoint train --seeds ... --ray``: each run a Ray task, with the same bits as the seed trained alone."""

from __future__ import annotations

import json

import torch

from marljoint.checkpoint import list_checkpoints, load_checkpoint
from tests.product._product_helpers import run_cli

TINY = [
    "train", "--env", "mock_v0", "--env-kwargs", json.dumps({"max_cycles": 8}), "--num-envs", "2",
    "--rollout-steps", "16", "--total-steps", "64", "--set", "n_epochs=1", "--set", "hidden_sizes=[8]",
]  # fmt: skip


def _final_state(run_dir):
    return load_checkpoint(list_checkpoints(run_dir / "checkpoints")[-1])["trainer"]


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b or a != a and b != b  # nan equals nan here


def test_seeds_on_ray_tasks_match_the_seed_trained_alone(ray_local, tmp_path, capsys):
    assert run_cli([*TINY, "--seeds", "3", "5", "--ray", "--out", str(tmp_path / "ray")]) == 0
    assert "2 seeds: final mean episode return" in capsys.readouterr().out
    assert run_cli([*TINY, "--seed", "5", "--out", str(tmp_path / "alone"), "--quiet"]) == 0
    assert _same(_final_state(tmp_path / "ray" / "seed_5"), _final_state(tmp_path / "alone"))
    assert not _same(_final_state(tmp_path / "ray" / "seed_3"), _final_state(tmp_path / "alone"))
    assert 'backend = "local"' in (tmp_path / "ray" / "seed_5" / "config.toml").read_text()
