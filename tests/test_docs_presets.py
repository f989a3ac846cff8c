"""docs/learning.md says, for every preset, what it changes from the defaults: the table must name every change."""

from pathlib import Path

from marljoint.run.presets import PRESETS

DOC = Path(__file__).resolve().parents[1] / "docs" / "learning.md"


def _rows() -> list[str]:
    text = DOC.read_text()
    section = text.split("## What the presets change", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| `")]


def test_every_change_of_every_preset_is_in_the_table_and_nothing_else():
    rows = _rows()
    listed = set()
    for row in rows:
        presets_cell, settings_cell = row.split("|")[1:3]
        for preset in presets_cell.replace("`", "").split(","):
            for setting in settings_cell.replace("`", "").split(","):
                listed.add((preset.strip(), setting.strip()))
    changes = {(name, key) for name, preset in PRESETS.items() for key in preset.changes()}
    assert changes - listed == set(), "changes missing from docs/learning.md"
    assert listed - changes == set(), "docs/learning.md lists settings the presets do not change"


def test_changes_compare_with_the_train_defaults():
    # spread is marljoint train's defaults: measured against them, nothing tried beat them on simple_spread.
    assert PRESETS["spread"].changes() == {}
    assert PRESETS["speaker_listener"].changes() == {"centralized_critic": (False, True)}
    bucket = PRESETS["bucket_brigade"].changes()
    assert bucket["ent_coef"] == (0.01, 0.001)  # the rule's value for discrete actions, changed
    assert bucket["gamma"] == (0.99, 0.9)  # the default follows the env's 100-night episodes
    assert "learning_rate" not in bucket  # set explicitly to the rule's 1e-3: no change on this env
