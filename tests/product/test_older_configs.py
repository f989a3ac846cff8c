"""A run's config.toml written by an older marljoint, of each kind (a value run, an actor-critic run, an MMD
self-play run), is read into the current format by run/migrations.py (tests/fixtures/configs_from_older_versions
says which commit wrote each, and how)."""

from __future__ import annotations

from pathlib import Path

import pytest

from marljoint.run.errors import RunError
from marljoint.run.migrations import migrate_saved_config
from marljoint.run.spec import RunSpec, load_run_spec, read_config_file

OLDER = Path(__file__).resolve().parents[1] / "fixtures" / "configs_from_older_versions"


def test_an_older_value_run_drops_the_ppo_settings_it_never_read():
    spec = load_run_spec(OLDER / "qmix")
    assert spec.algorithm == "qmix"
    assert spec.tables()["offpolicy"] == {"learning_starts": 16, "batch_size": 8, "mixer_embed_dim": 16}
    assert (spec.trainer.num_envs, spec.trainer.rollout_steps) == (2, 16)
    # n_epochs = 3 and clip_range = 0.1 were taken and never read: they take their defaults.
    assert (spec.trainer.n_epochs, spec.trainer.clip_range) == (RunSpec().trainer.n_epochs, 0.2)


def test_an_older_actor_critic_run_drops_the_rates_it_never_read():
    spec = load_run_spec(OLDER / "masac")
    assert spec.algorithm == "masac" and spec.trainer.learning_rate is None
    assert spec.tables()["offpolicy"] == {"learning_starts": 16, "batch_size": 8, "sac": {"critic_hidden_sizes": [16]}}


def test_an_older_mmd_run_keeps_its_table():
    spec = load_run_spec(OLDER / "mmd")
    assert spec.self_play == "mmd" and spec.mmd_config().alpha == 0.2
    assert spec.trainer.learning_rate == 0.001 and spec.trainer.normalize_observations is False


@pytest.mark.parametrize(
    ("kind", "match"),
    [("qmix", r"qmix does not read clip_range \(= 0.1\)"), ("masac", r"masac does not read learning_rate \(= 0.01\)")],
)
def test_read_as_given_the_older_files_would_be_refused(kind, match):
    values = read_config_file(OLDER / kind / "config.toml")
    with pytest.raises(RunError, match=match):
        RunSpec.from_dict(values, base=RunSpec(env_kwargs={}))
    RunSpec.from_dict(migrate_saved_config(values), base=RunSpec(env_kwargs={}))


def test_a_current_file_is_read_as_written():
    spec = RunSpec.from_dict({"algorithm": "qmix", "offpolicy": {"learning_starts": 16}, "total_steps": 64})
    assert RunSpec.from_dict(migrate_saved_config(spec.to_dict()), base=RunSpec(env_kwargs={})) == spec
