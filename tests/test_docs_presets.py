"""docs/learning.md says, for every preset, what it changes from the defaults: the table must name every change."""

from pathlib import Path

from marljoint.presets import PRESETS

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
    spread = PRESETS["spread"].changes()
    assert spread["gamma"] == (0.96, 0.95)  # the default follows the env's 25-step episodes
    assert spread["normalize_observations"] == (True, False)  # MPE's Boxes are unbounded
    # The rule's values for discrete actions (1e-3, 0.01): set explicitly, but no change on this env.
    assert "learning_rate" not in spread and "ent_coef" not in spread
    assert PRESETS["speaker_listener"].changes()["learning_rate"] == (1e-3, 7e-4)
    assert PRESETS["bucket_brigade"].changes()["ent_coef"] == (0.01, 0.001)
