"""Checkpoints load without running code from the file: a crafted pickle is refused, real ones load."""

from __future__ import annotations

import pytest
import torch
from _product_helpers import run_cli, tiny_config, train_args

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.checkpoint import CheckpointError, atomic_torch_save, list_checkpoints, load_checkpoint
from marljoint.run.train import load_run_spec, make_env
from marljoint_envs import mock_v0

MARKER = []


class _RunsCode:
    """Unpickling this calls MARKER.append: the kind of object a malicious checkpoint carries."""

    def __reduce__(self):
        return (MARKER.append, ("the file ran code",))


def test_a_checkpoint_that_would_run_code_is_refused_and_runs_nothing(tmp_path):
    path = tmp_path / "ckpt_0000001.pt"
    torch.save({"format": "marljoint-checkpoint-v1", "state": {"trainer": _RunsCode()}}, path)
    with pytest.raises(CheckpointError, match=r"refused to load .*could run code when loaded"):
        load_checkpoint(path)
    assert MARKER == []


def test_a_crafted_checkpoint_in_a_run_directory_fails_eval_with_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli(train_args(out, tiny_config(tmp_path), 2 * 64)) == 0
    newest = list_checkpoints(out / "checkpoints")[-1]
    torch.save({"format": "marljoint-checkpoint-v1", "state": {"trainer": _RunsCode()}}, newest)
    assert run_cli(["eval", str(out), "--episodes", "1"]) == 2
    assert "refused to load" in capsys.readouterr().err
    assert MARKER == []


def test_real_checkpoints_load_safely_and_trainer_load_takes_a_cli_checkpoint(tmp_path):
    out = tmp_path / "run"
    assert run_cli(train_args(out, tiny_config(tmp_path), 2 * 64)) == 0
    newest = list_checkpoints(out / "checkpoints")[-1]
    state = load_checkpoint(newest)  # weights-only, with numpy arrays and the env snapshot as bytes
    assert isinstance(state["env"]["env"], bytes)
    spec = load_run_spec(out)
    env = make_env(spec)
    trainer = JointMultiAgentTrainer.from_env(env, spec.trainer)
    trainer.load(str(newest))
    assert trainer.iteration == 2
    for name, value in trainer.policies[0].state_dict().items():
        assert torch.equal(value, state["trainer"]["policies"][0][name])
    env.close()


def test_a_saved_trainer_loads_safely(tmp_path):
    env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=2)
    trainer = JointMultiAgentTrainer.from_env(env, JointTrainerConfig(num_envs=2, rollout_steps=8, minibatch_size=16))
    trainer.update(trainer.collect_rollout())
    trainer.save(str(tmp_path / "t.pt"))
    again = JointMultiAgentTrainer.from_env(env, trainer.config)
    again.load(str(tmp_path / "t.pt"))
    assert again.iteration == trainer.iteration


def test_atomic_save_output_is_what_load_reads(tmp_path):
    atomic_torch_save({"a": torch.ones(2)}, tmp_path / "x.pt")
    assert torch.equal(load_checkpoint(tmp_path / "x.pt")["a"], torch.ones(2))


def test_load_run_acts_with_the_newest_checkpoint_and_names_what_is_missing(tmp_path):
    import marljoint
    from marljoint.run.train import RunError

    out = tmp_path / "run"
    assert run_cli(train_args(out, tiny_config(tmp_path), 2 * 64)) == 0
    run = marljoint.load_run(out, num_envs=3, seed=1)
    try:
        state = run.env.reset(seed=1)
        actions = run.act(state)
        assert [a.shape[0] for a in actions] == [3] * len(actions)
        assert run.checkpoint == list_checkpoints(out / "checkpoints")[-1]
        newest = load_checkpoint(run.checkpoint)
        for name, value in run.trainer.policies[0].state_dict().items():
            assert torch.equal(value, newest["trainer"]["policies"][0][name])
    finally:
        run.close()
    with pytest.raises(RunError, match="is not a marljoint run directory"):
        marljoint.load_run(tmp_path / "nothing")
    for path in list_checkpoints(out / "checkpoints"):
        path.unlink()
    with pytest.raises(RunError, match="has no checkpoint in checkpoints/; train it first"):
        marljoint.load_run(out)
