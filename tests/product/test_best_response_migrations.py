"""PSRO and NFSP checkpoints of an earlier format: converted by marljoint.run.migrations (for
``PSRO.from_state`` / ``NFSP.from_state``), refused by the core classes with the reader that converts them; their run
directories (``psro.pt`` beside metrics.csv, no config.toml) are refused by ``marljoint psro/nfsp`` in one line."""

from __future__ import annotations

import pytest
from _product_helpers import run_cli

from marljoint import JointTrainerConfig
from marljoint.best_response import NFSP, PSRO, KuhnGame, NfspConfig, PsroConfig
from marljoint.checkpoint import atomic_torch_save, load_checkpoint
from marljoint.run.migrations import (
    migrate_best_response_state,
    migrate_psro_config,
    read_nfsp_checkpoint,
    read_psro_checkpoint,
)
from marljoint.run.recipes import env_factory
from marljoint_envs import kuhn_poker_v0

NFSP_CONFIG = NfspConfig(
    trainer=JointTrainerConfig(num_envs=8, rollout_steps=8, minibatch_size=64, share_parameters=False),
    rollouts_per_iteration=2,
)


def _older_run(out, command):
    """A finished run as an earlier version wrote it: ``COMMAND.pt`` (with a config saved before
    ``normalize_observations`` existed, and psro's ``num_workers``) and metrics.csv, no config.toml."""
    cls, config = (PSRO, PsroConfig(oracle="exact", iterations=1)) if command == "psro" else (NFSP, NFSP_CONFIG)
    run = cls(kuhn_poker_v0.raw_env, config, KuhnGame())
    run.run(iterations=1) if command == "psro" else run.step()
    out.mkdir(parents=True, exist_ok=True)
    path = run.save(out)
    (out / "metrics.csv").write_text("iteration,wall_time,exploitability\n")
    state = load_checkpoint(path)
    del state["config"]["trainer"]["normalize_observations"]  # saved before the setting existed
    if command == "psro":
        state["config"]["num_workers"] = state["config"].pop("task_split")  # its older name
    atomic_torch_save(state, path)
    return state


def test_a_saved_psro_config_with_the_older_name_of_the_task_split_loads():
    old = {**PsroConfig().to_dict(), "num_workers": 3}
    del old["task_split"]
    assert PsroConfig.from_dict(migrate_psro_config(old)).task_split == 3
    current = {"task_split": 2, "trainer": {"normalize_observations": True}}
    assert migrate_psro_config(current) == current


def test_the_state_converted_is_a_copy_and_only_its_config_changes():
    state = {"config": {"trainer": {"seed": 1}}, "iteration": 4}
    assert migrate_best_response_state(state, "nfsp") == {
        "config": {"trainer": {"normalize_observations": False, "seed": 1}},
        "iteration": 4,
    }
    assert state == {"config": {"trainer": {"seed": 1}}, "iteration": 4}
    with pytest.raises(ValueError, match="kind must be 'psro' or 'nfsp', got 'mmd'"):
        migrate_best_response_state(state, "mmd")


@pytest.mark.parametrize("command", ["psro", "nfsp"])
def test_an_older_checkpoint_is_refused_by_the_core_class_naming_the_reader(tmp_path, command):
    _older_run(tmp_path, command)
    cls = PSRO if command == "psro" else NFSP
    missing = r"\['task_split', 'trainer.normalize_observations'\]" if command == "psro" else r"\['trainer.norm"
    with pytest.raises(ValueError, match=rf"earlier format \(its config lacks {missing}.*read_{command}_checkpoint"):
        cls.load(tmp_path, kuhn_poker_v0.raw_env)


@pytest.mark.parametrize("command", ["psro", "nfsp"])
def test_an_older_checkpoint_loads_through_the_run_layer_and_its_directory_is_refused_in_one_line(
    tmp_path, capsys, command
):
    _older_run(tmp_path, command)
    read = read_psro_checkpoint if command == "psro" else read_nfsp_checkpoint
    state = read(tmp_path)
    assert state["config"]["trainer"]["normalize_observations"] is False
    cls = PSRO if command == "psro" else NFSP
    assert cls.from_state(state, env_factory("kuhn_poker_v0", {}), KuhnGame()).iteration == 1
    before = sorted(p.name for p in tmp_path.iterdir())
    for flag in ("--resume", "--force"):
        args = [command, "--env", "kuhn_poker_v0", "--iterations", "2", "--out", str(tmp_path), flag, "--quiet"]
        assert run_cli(args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"holds a {command} run written by an earlier marljoint ({command}.pt)" in err
        assert f"read_{command}_checkpoint" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
