"""The conversions of older config files and checkpoints into the current format (marljoint.run.migrations), each
checked input dict -> output dict, and the trainer config's refusal of the older keys for Python callers."""

from __future__ import annotations

import pytest

from marljoint import JointTrainerConfig
from marljoint.collect import CollectionConfig
from marljoint.run.errors import RunError
from marljoint.run.migrations import (
    collection_from_keys,
    migrate_checkpoint,
    migrate_collection_keys,
    migrate_saved_config,
)
from marljoint.run.train import RunSpec


@pytest.mark.parametrize(
    "old,expected",
    [
        (
            {"vector_mode": "subprocess", "num_env_workers": 3, "num_workers": 0, "extra": {}, "gamma": 0.9},
            {"gamma": 0.9, "collection": {"backend": "subprocess", "workers": 3}},
        ),
        (
            {"vector_mode": "sync", "num_env_workers": 2, "num_workers": 0},
            {"collection": {"backend": "local", "workers": 2}},
        ),
        ({"num_workers": 4}, {"collection": {"backend": "ray", "workers": 4}}),
        ({"vector_mode": "subprocess"}, {"collection": {"backend": "subprocess", "workers": 2}}),
        ({"extra": {"note": "ignored"}, "seed": 1}, {"seed": 1}),
        ({"gamma": 0.9, "collection": {"backend": "ray"}}, {"gamma": 0.9, "collection": {"backend": "ray"}}),
    ],
)
def test_the_older_collection_keys_become_a_collection_table(old, expected):
    assert migrate_collection_keys(old) == expected


def test_the_older_collection_keys_apply_on_top_of_the_base_collection():
    base = CollectionConfig("subprocess", 2)
    assert migrate_collection_keys({"num_env_workers": 5}, base) == {
        "collection": {"backend": "subprocess", "workers": 5}
    }
    assert migrate_collection_keys({"num_env_workers": 5}) == {"collection": {"backend": "local", "workers": 2}}
    assert collection_from_keys({"vector_mode": "sync"}, CollectionConfig("subprocess", 6)) == CollectionConfig(
        "local", 6
    )


def test_the_input_is_left_as_it_was():
    old = {"vector_mode": "subprocess", "num_env_workers": 3}
    migrate_collection_keys(old)
    assert old == {"vector_mode": "subprocess", "num_env_workers": 3}


@pytest.mark.parametrize(
    "values,match",
    [
        ({"vector_mode": "threads"}, "vector_mode must be 'sync' or 'subprocess', got 'threads'"),
        ({"num_workers": -1}, r"num_workers must be an integer >= 0 \(0: no Ray workers\), got -1"),
        ({"num_workers": True}, "num_workers must be an integer >= 0"),
        (
            {"num_workers": 2, "vector_mode": "subprocess"},
            r"num_workers=2 \(Ray rollout workers\) cannot be combined with vector_mode='subprocess'",
        ),
        (
            {"vector_mode": "sync", "collection": {"backend": "ray"}},
            r"\['vector_mode'\] are the older names of the collection settings; give collection alone",
        ),
    ],
)
def test_older_collection_keys_that_describe_no_collection_are_refused(values, match):
    with pytest.raises(ValueError, match=match):
        migrate_collection_keys(values)
    with pytest.raises(RunError, match="invalid trainer setting: " + match):
        RunSpec.from_dict(values)


def test_a_saved_config_gets_the_settings_it_predates():
    assert migrate_saved_config({"gamma": 0.9}) == {"normalize_observations": False, "gamma": 0.9}
    assert migrate_saved_config({"normalize_observations": "auto"}) == {"normalize_observations": "auto"}
    nested = migrate_saved_config({"iterations": 3, "trainer": {"seed": 1}})
    assert nested == {"iterations": 3, "trainer": {"normalize_observations": False, "seed": 1}}


def test_a_checkpoint_with_the_noise_generators_in_the_trainer_state_moves_them_into_the_env_state():
    old = {"trainer": {"iteration": 2, "copy_generators": ["g0", "g1"]}, "env": {"env": b"x"}, "run": {}}
    assert migrate_checkpoint(old) == {
        "trainer": {"iteration": 2},
        "env": {"env": b"x", "copy_generators": ["g0", "g1"]},
        "run": {},
    }
    assert old["trainer"] == {"iteration": 2, "copy_generators": ["g0", "g1"]}  # the input is left as it was


@pytest.mark.parametrize(
    "checkpoint,expected",
    [
        # no env state (saved before the first rollout, or not saved): nothing takes the generators
        ({"trainer": {"copy_generators": ["g"]}, "env": None}, {"trainer": {}, "env": None}),
        # an env state holding its own generators keeps them
        (
            {"trainer": {"copy_generators": ["old"]}, "env": {"env": b"x", "copy_generators": ["new"]}},
            {"trainer": {}, "env": {"env": b"x", "copy_generators": ["new"]}},
        ),
        # Ray workers' states hold their generators per worker
        ({"trainer": {"copy_generators": ["g"]}, "env": {"workers": []}}, {"trainer": {}, "env": {"workers": []}}),
        ({"trainer": {"copy_generators": None}, "env": {"env": b"x"}}, {"trainer": {}, "env": {"env": b"x"}}),
        # the current format, and a trainer's own save file, pass unchanged
        ({"trainer": {"iteration": 1}, "env": {"env": b"x"}}, {"trainer": {"iteration": 1}, "env": {"env": b"x"}}),
        ({"policies": [], "iteration": 1}, {"policies": [], "iteration": 1}),
    ],
)
def test_a_checkpoint_keeps_whatever_the_current_format_holds(checkpoint, expected):
    assert migrate_checkpoint(checkpoint) == expected


@pytest.mark.parametrize("key", ["vector_mode", "num_env_workers", "num_workers", "extra"])
def test_the_trainer_config_refuses_the_older_collection_keys_naming_collection(key):
    match = rf"\['{key}'\] are no JointTrainerConfig fields: the collection settings are the field collection"
    with pytest.raises(ValueError, match=match):
        JointTrainerConfig.from_dict({key: 2})
    with pytest.raises(
        ValueError, match=r"collection=CollectionConfig\(backend=\"ray\", workers=4\) \(num_workers=4\)"
    ):
        JointTrainerConfig().replace(**{key: 2})
