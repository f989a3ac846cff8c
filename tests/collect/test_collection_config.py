"""CollectionConfig: one choice of backend and workers; the collection settings of older config files still load
(through the run layer's migrations), and the trainer config refuses them, naming collection."""

import pytest

from marljoint import JointTrainerConfig
from marljoint.collect import CollectionConfig
from marljoint.run.errors import RunError
from marljoint.run.train import RunSpec, load_run_spec, write_config


@pytest.mark.parametrize(
    "old,expected",
    [
        ({"vector_mode": "sync", "num_env_workers": 2, "num_workers": 0}, CollectionConfig()),
        ({"vector_mode": "subprocess", "num_env_workers": 3, "num_workers": 0}, CollectionConfig("subprocess", 3)),
        ({"vector_mode": "sync", "num_env_workers": 2, "num_workers": 4}, CollectionConfig("ray", 4)),
        ({"vector_mode": "subprocess"}, CollectionConfig("subprocess", 2)),
        ({"extra": {"note": "ignored"}}, CollectionConfig()),
    ],
)
def test_the_settings_of_older_configs_load_as_a_collection(old, expected):
    assert RunSpec.from_dict(old).trainer.collection == expected
    with pytest.raises(ValueError, match=r"are no JointTrainerConfig fields: the collection settings are the field"):
        JointTrainerConfig.from_dict(old)
    with pytest.raises(ValueError, match=r"give e\.g\. collection=CollectionConfig\(backend="):
        JointTrainerConfig().replace(**old)


def test_an_old_run_directory_loads_and_is_rewritten_in_the_new_form(tmp_path):
    write_config(RunSpec(), tmp_path / "config.toml")
    text = (tmp_path / "config.toml").read_text()
    assert 'collection = {backend = "local", workers = 2}' in text
    # A config.toml of an older version: the three collection knobs and `extra`, no `collection`.
    old = text.replace(
        'collection = {backend = "local", workers = 2}',
        'vector_mode = "subprocess"\nnum_env_workers = 3\nnum_workers = 0\nextra = {}',
    )
    (tmp_path / "config.toml").write_text(old)
    assert load_run_spec(tmp_path).trainer.collection == CollectionConfig("subprocess", 3)


def test_a_collection_table_or_name_is_accepted():
    assert JointTrainerConfig(collection={"backend": "ray", "workers": 3}).collection == CollectionConfig("ray", 3)
    assert JointTrainerConfig(collection="subprocess").collection == CollectionConfig("subprocess", 2)
    assert JointTrainerConfig.from_dict(JointTrainerConfig(collection="ray").to_dict()).collection.backend == "ray"


@pytest.mark.parametrize(
    "value,match",
    [
        ({"backend": "threads"}, r"collection backend must be one of \['local', 'subprocess', 'ray'\], got 'threads'"),
        ({"backend": "ray", "workers": 0}, "collection workers must be a positive integer, got 0"),
        ({"backend": "ray", "workers": True}, "collection workers must be a positive integer, got True"),
        (
            {"workers": 2, "lag": 1},
            r"unknown collection setting\(s\) \['lag'\]; valid: \['backend', 'balance', 'policy_lag', 'workers'\]",
        ),
        (3, "collection must be a CollectionConfig, a table"),
    ],
)
def test_bad_collection_settings_are_refused(value, match):
    with pytest.raises(ValueError, match=match):
        JointTrainerConfig(collection=value)


def test_old_and_new_names_together_are_refused():
    with pytest.raises(RunError, match=r"\['num_workers'\] are the older names of the collection settings"):
        RunSpec.from_dict({"num_workers": 2, "collection": {"backend": "ray"}})
