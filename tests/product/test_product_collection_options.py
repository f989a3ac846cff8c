"""marljoint train's collection options, parsed by CollectionConfig.from_options: every spelling, and the
combinations refused with one line naming the options and the fix."""

from __future__ import annotations

import pytest

from marljoint.collect import CollectionConfig
from marljoint.run.collection import with_auto_workers
from marljoint.run.train import RunSpec
from tests.product._product_helpers import run_cli


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, None),
        ({"policy_lag": 0}, None),
        ({"env_workers": "auto", "policy_lag": 1, "balance": True}, None),
        ({"env_workers": 3}, CollectionConfig("subprocess", workers=3)),
        ({"env_workers": 2, "policy_lag": 1, "balance": True}, CollectionConfig("subprocess", 2, 1, True)),
        ({"ray": True}, CollectionConfig("ray", workers=2)),
        ({"num_workers": 4}, CollectionConfig("ray", workers=4)),
        ({"ray_address": "auto", "policy_lag": 1}, CollectionConfig("ray", workers=2, policy_lag=1)),
    ],
)
def test_options_choose_the_collection(options, expected):
    assert CollectionConfig.from_options(**options) == expected


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"env_workers": 2, "ray": True}, r"--env-workers .* and --ray/--num-workers .* choose one"),
        ({"env_workers": "auto", "num_workers": 2}, "two ways to collect on several cores; choose one"),
        ({"policy_lag": 1}, r"--policy-lag 1 overlaps .*; add --env-workers K or --ray"),
        ({"balance": True}, r"--balance hands env copies between worker processes; add --env-workers K or --ray"),
        ({"env_workers": -1}, "collection workers must be a positive integer, got -1"),
        ({"env_workers": 0, "policy_lag": 1}, r"--env-workers 0 collects in this process, .* drop --policy-lag 1"),
    ],
)
def test_options_that_cannot_go_together_are_refused(options, match):
    with pytest.raises(ValueError, match=match):
        CollectionConfig.from_options(**options)


def test_auto_workers_fill_the_cores_and_keep_one_for_the_learner():
    spec = RunSpec.from_dict({"num_envs": 8})
    assert with_auto_workers(spec, cores=4).trainer.collection == CollectionConfig("subprocess", 3, policy_lag=1)
    assert with_auto_workers(spec, policy_lag=0, balance=True, cores=3).trainer.collection == CollectionConfig(
        "subprocess", 2, balance=True
    )
    assert with_auto_workers(spec, cores=1).trainer.collection == CollectionConfig("local")
    recurrent = RunSpec.from_dict({"num_envs": 2, "recurrent": "gru"})
    assert with_auto_workers(recurrent, cores=8).trainer.collection == CollectionConfig("subprocess", 2)


def test_the_command_refuses_in_one_line(tmp_path, capsys):
    args = ["train", "--env", "mock_v0", "--out", str(tmp_path / "x"), "--quiet"]
    assert run_cli([*args, "--ray", "--env-workers", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "choose one" in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()
