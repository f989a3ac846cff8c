"""PSRO and NFSP checkpoints of an earlier format: converted by marljoint.run.migrations (and so resumed by
``marljoint psro/nfsp --resume``), refused by the core classes with the reader that converts them."""

from __future__ import annotations

import pytest
from _product_helpers import run_cli

from marljoint.best_response import NFSP, PSRO, KuhnGame, PsroConfig
from marljoint.checkpoint import atomic_torch_save, load_checkpoint
from marljoint.run.migrations import (
    migrate_best_response_state,
    migrate_psro_config,
    read_nfsp_checkpoint,
    read_psro_checkpoint,
)
from marljoint.run.recipes import env_factory
from marljoint_envs import kuhn_poker_v0

RUNS = {
    "psro": ["--oracle", "exact", "--iterations", "1"],
    "nfsp": ["--num-envs", "8", "--iterations", "1"],
}


def _older_run(out, command):
    """A finished run whose checkpoint is rewritten as an earlier version saved it."""
    assert run_cli([command, "--env", "kuhn_poker_v0", *RUNS[command], "--out", str(out), "--quiet"]) == 0
    path = out / f"{command}.pt"
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
def test_an_older_checkpoint_resumes_through_the_run_layer(tmp_path, capsys, command):
    _older_run(tmp_path, command)
    read = read_psro_checkpoint if command == "psro" else read_nfsp_checkpoint
    state = read(tmp_path)
    assert state["config"]["trainer"]["normalize_observations"] is False
    cls = PSRO if command == "psro" else NFSP
    assert cls.from_state(state, env_factory("kuhn_poker_v0", {}), KuhnGame()).iteration == 1
    args = [command, "--env", "kuhn_poker_v0", "--iterations", "2", "--out", str(tmp_path), "--resume", "--quiet"]
    assert run_cli(args) == 0, capsys.readouterr().err
    resumed = load_checkpoint(tmp_path / f"{command}.pt")
    assert resumed["iteration"] == 2
    assert "normalize_observations" in resumed["config"]["trainer"]
