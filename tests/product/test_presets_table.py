"""Presets and best-response settings are one table of named bundles (marljoint.run.presets.ALL_PRESETS), each
with the command it applies to."""

from __future__ import annotations

import pytest

from marljoint.run.presets import ALL_PRESETS, BEST_RESPONSE_PRESETS, COMMANDS, PRESETS, SELF_PLAY_PRESETS, Preset
from marljoint.run.recipes import GENERAL_RECIPE, OPENSPIEL_RECIPE, RECIPES, recipe_for


def test_one_table_holds_every_bundle_once_with_its_command():
    assert {preset.command for preset in ALL_PRESETS.values()} == set(COMMANDS)
    assert {name for name, p in ALL_PRESETS.items() if p.command == "train"} == set(PRESETS)
    best_response = {
        name.removeprefix("best_response/") for name, p in ALL_PRESETS.items() if p.command == "best_response"
    }
    assert best_response == set(BEST_RESPONSE_PRESETS) == {*RECIPES, "general", "openspiel"}
    self_play = {name.removeprefix("self_play/") for name, p in ALL_PRESETS.items() if p.command == "self_play"}
    assert self_play == set(SELF_PLAY_PRESETS) == {"openspiel"}
    assert all(isinstance(preset, Preset) for preset in ALL_PRESETS.values())


def test_recipe_for_picks_the_env_s_best_response_preset():
    assert recipe_for("kuhn_poker_v0") is ALL_PRESETS["best_response/kuhn_poker_v0"]
    assert recipe_for("openspiel:leduc_poker") is OPENSPIEL_RECIPE is ALL_PRESETS["best_response/openspiel"]
    assert recipe_for("mpe2.simple_push_v3") is GENERAL_RECIPE
    assert OPENSPIEL_RECIPE.trainer == RECIPES["kuhn_poker_v0"].trainer
    assert RECIPES["kuhn_poker_v0"].nfsp_trainer_config().ent_coef == 0.1


def test_a_bundle_names_a_known_command_and_valid_settings():
    with pytest.raises(
        ValueError, match=r"preset 'x': command must be one of \['train', 'best_response', 'self_play'\], got 'psro'"
    ):
        Preset(name="x", env_name=None, command="psro")
    with pytest.raises(ValueError, match="n_epochs must be a positive integer, got 0"):
        Preset(name="x", env_name=None, config_kwargs={"n_epochs": 0})


def test_changes_compare_train_presets_only():
    with pytest.raises(ValueError, match="preset 'general' is for marljoint psro and nfsp; changes"):
        GENERAL_RECIPE.changes()
