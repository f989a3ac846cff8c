"""The one table of defaults (marljoint.run.defaults): every setting has exactly one product default, the command's
defaults and help are the table's, and a fresh run's config.toml writes them."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest

from marljoint import JointTrainerConfig
from marljoint.cli import build_parser
from marljoint.run.defaults import (
    DEFAULT_TRAINER,
    DERIVED_RULES,
    PRODUCT_CHANGES,
    defaults_table,
    library_default,
    product_default,
)
from marljoint.run.spec import OPTIONAL_SETTINGS
from marljoint.run.train import RunSpec, read_config_file
from tests.product._product_helpers import run_cli

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
# Resolved when the trainer is built (from the env or the machine), so a run's config.toml holds the resolved value.
RESOLVED = {
    "gamma", "ent_coef", "learning_rate", "anneal_lr", "normalize_observations", "torch_threads", "acting_device"
}


def _plain(value):
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def test_every_setting_has_exactly_one_row():
    names = [row.setting for row in defaults_table()]
    assert len(names) == len(set(names))
    # The config.toml keys, in their order; algorithm and offpolicy are written only when set.
    assert names == list(RunSpec(algorithm="vdn", offpolicy={"batch_size": 32}).to_dict())
    assert [name for name in names if name not in OPTIONAL_SETTINGS] == list(RunSpec().to_dict())


def test_product_defaults_are_the_run_spec_defaults():
    fresh = RunSpec().to_dict()
    for row in defaults_table():
        value = getattr(RunSpec(), row.setting) if row.setting in OPTIONAL_SETTINGS else fresh[row.setting]
        assert _plain(row.product) == _plain(value), row.setting


def test_library_defaults_are_the_trainer_config_defaults_and_changes_say_why():
    library = JointTrainerConfig().to_dict()
    for row in defaults_table():
        if row.setting in library:
            assert _plain(row.library) == _plain(library[row.setting]), row.setting
        differs = row.product != row.library
        assert differs == bool(row.why) == (row.setting in PRODUCT_CHANGES), row.setting
    assert DEFAULT_TRAINER == {name: value for name, (value, _) in PRODUCT_CHANGES.items()}
    assert set(DERIVED_RULES) <= {row.setting for row in defaults_table()}


def test_unknown_setting_is_refused_by_name():
    with pytest.raises(KeyError, match="no setting 'epochs'; the settings are the config.toml keys"):
        product_default("epochs")
    with pytest.raises(KeyError, match="no setting 'lr'"):
        library_default("lr")


def test_the_command_options_default_to_the_table_and_say_so():
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    options = {
        "num_envs": "--num-envs",
        "rollout_steps": "--rollout-steps",
        "seed": "--seed",
        "checkpoint_every": "--checkpoint-every",
        "keep_checkpoints": "--keep-checkpoints",
        "eval_episodes": "--eval-episodes",
        "redundancy_coef": "--redundancy-coef",
    }
    actions = {action.option_strings[0]: action for action in train._actions if action.option_strings}
    for setting, flag in options.items():
        # No argparse default: an option not given leaves the setting to the table (or to --config).
        assert actions[flag].default is None, flag
        assert f"default {product_default(setting)}" in actions[flag].help, flag


def test_the_docs_list_every_product_change_and_nothing_else():
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) == 4 and re.fullmatch(r"`\w+`", cells[0]) and cells[1]:
            rows[cells[0].strip("`")] = cells
    changed = {name: cells for name, cells in rows.items() if cells[1] != cells[2] and name in library_names()}
    assert set(changed) == set(PRODUCT_CHANGES)
    for name, (value, _) in PRODUCT_CHANGES.items():
        assert changed[name][1] == f"`{library_default(name)}`", name
        assert changed[name][2] == ("derived from the env" if value is None else f"`{value}`"), name


def library_names():
    return {f.name for f in dataclasses.fields(JointTrainerConfig)}


def test_a_fresh_run_writes_the_product_defaults(tmp_path):
    # A small rollout keeps the test fast; every other setting is left to the table.
    given = ["--env", "mock_v0", "--total-steps", "1", "--num-envs", "2", "--rollout-steps", "16"]
    out = tmp_path / "run"
    assert run_cli(["train", *given, "--out", str(out), "--quiet"]) == 0
    written = read_config_file(out / "config.toml")
    assert (written["num_envs"], written["rollout_steps"]) == (2, 16)
    for row in defaults_table():
        if row.setting in RESOLVED or row.setting in ("env", "env_kwargs", "total_steps", "num_envs", "rollout_steps"):
            continue
        value = written.get(row.setting, "absent")
        if isinstance(row.product, float) and math.isinf(row.product):
            assert math.isinf(value), row.setting
        elif row.setting == "collection":
            assert value == {"backend": "local", "workers": 2}
        else:
            unset = row.product is None or row.setting in OPTIONAL_SETTINGS
            assert _plain(value) == _plain(row.product) or (value == "absent" and unset), row.setting
    assert written["learning_rate"] == 1e-3  # mock_v0's discrete actions, by the rule the table names
    assert written["anneal_lr"] is False  # mock_v0 has two agents, below the rule's five
    assert dataclasses.asdict(RunSpec().trainer)["learning_rate"] is None
