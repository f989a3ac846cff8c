"""The "ema" magnet of MMD self-play: its parameters move magnet_rate of the way to the policy's per update, its
setting is validated and written to config.toml, and a resumed run continues it bit for bit."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.best_response import MmdConfig, mmd_regularizer
from marljoint.checkpoint import list_checkpoints, load_checkpoint
from marljoint.run.errors import RunError
from marljoint.run.train import RunSpec, read_config_file, resume_spec, train_run, write_config
from marljoint_envs import mock_v0

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "product"))
from _product_helpers import run_cli  # noqa: E402


def _mock_trainer(mmd):
    env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=2, seed=0)
    config = JointTrainerConfig(num_envs=2, rollout_steps=8, minibatch_size=8, n_epochs=1, hidden_sizes=(8,))
    return JointMultiAgentTrainer.from_env(env, config, regularizer=mmd_regularizer(mmd))


def _parameters(policy):
    return [p.detach().clone() for network in policy.networks for p in network.parameters()]


def test_the_ema_magnet_moves_a_fraction_of_the_way_to_the_policy_at_every_update():
    trainer = _mock_trainer(MmdConfig(magnet="ema", magnet_rate=0.25))
    regularizer = trainer.regularizer
    start = _parameters(trainer.joint_policy)
    trainer.iterate()  # update 0: the magnet is the initial policy
    assert all(torch.equal(a, b) for a, b in zip(_parameters(regularizer.magnet), start))
    after_first = _parameters(trainer.joint_policy)
    trainer.iterate()  # update 1 begins with one step of the magnet
    for magnet, old, new in zip(_parameters(regularizer.magnet), start, after_first):
        torch.testing.assert_close(magnet, 0.75 * old + 0.25 * new, rtol=0, atol=1e-7)
    assert not all(torch.equal(a, b) for a, b in zip(_parameters(regularizer.magnet), after_first))


def test_rate_one_makes_the_magnet_the_policy_of_the_previous_update():
    trainer = _mock_trainer(MmdConfig(magnet="ema", magnet_rate=1.0))
    regularizer = trainer.regularizer
    trainer.iterate()
    previous = _parameters(trainer.joint_policy)
    trainer.iterate()
    assert all(torch.equal(a, b) for a, b in zip(_parameters(regularizer.magnet), previous))


@pytest.mark.parametrize("rate", [0.0, -0.5, 1.01, float("nan"), True, "0.1"])
def test_a_magnet_rate_outside_zero_one_is_refused_with_the_fix(rate):
    with pytest.raises(ValueError, match=r"magnet_rate must be a number in \(0, 1\], got .*; e.g. magnet_rate=0.05"):
        MmdConfig(magnet="ema", magnet_rate=rate)


def test_a_bad_magnet_rate_in_the_run_settings_is_a_run_error():
    with pytest.raises(RunError, match=r"mmd.magnet_rate must be a number in \(0, 1\], got 2"):
        RunSpec.from_dict({"self_play": "mmd", "mmd": {"magnet": "ema", "magnet_rate": 2}})


def test_magnet_rate_round_trips_through_config_toml(tmp_path):
    settings = {"magnet": "ema", "magnet_rate": 0.125}
    spec = RunSpec.from_dict({"env": "kuhn_poker_v0", "env_kwargs": {}, "self_play": "mmd", "mmd": settings})
    write_config(spec, tmp_path / "config.toml")
    values = read_config_file(tmp_path / "config.toml")
    assert values["mmd"]["magnet"] == "ema" and values["mmd"]["magnet_rate"] == 0.125
    assert RunSpec.from_dict(values).mmd_config() == MmdConfig(magnet="ema", magnet_rate=0.125)


def test_marljoint_train_refuses_a_bad_magnet_rate_in_one_line(tmp_path, capsys):
    args = ["train", "--env", "kuhn_poker_v0", "--self-play", "mmd", "--num-envs", "4", "--total-steps", "64"]
    settings = 'mmd={magnet = "ema", magnet_rate = 0}'
    assert run_cli([*args, "--set", settings, "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "magnet_rate must be a number in (0, 1], got 0" in err
    assert not (tmp_path / "run").exists()


TINY = {"num_envs": 4, "rollout_steps": 16, "n_epochs": 2, "hidden_sizes": [16], "minibatch_size": 32}


def _ema_spec():
    values = {"env": "kuhn_poker_v0", "env_kwargs": {}, "total_steps": 5 * 64, "checkpoint_every": 1, **TINY}
    return RunSpec.from_dict({**values, "self_play": "mmd", "mmd": {"magnet": "ema", "magnet_rate": 0.3}})


def _last_state(run_dir):
    return load_checkpoint(list_checkpoints(run_dir / "checkpoints")[-1])["trainer"]


def test_a_resumed_run_continues_the_ema_magnet_bit_for_bit(tmp_path):
    train_run(_ema_spec(), tmp_path / "whole", progress=False)
    train_run(_ema_spec(), tmp_path / "resumed", progress=False, stop_after=2)
    train_run(resume_spec(tmp_path / "resumed"), tmp_path / "resumed", resume=True, progress=False)
    whole, resumed = _last_state(tmp_path / "whole"), _last_state(tmp_path / "resumed")
    assert whole["regularizer"]["updates"] == resumed["regularizer"]["updates"] == 5
    for name in ("policies",):
        for ours, theirs in zip(whole[name], resumed[name]):
            assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    magnet, again = whole["regularizer"]["magnet"], resumed["regularizer"]["magnet"]
    for ours, theirs in zip(magnet["policies"], again["policies"]):
        assert ours.keys() == theirs.keys()
        assert all(torch.equal(torch.as_tensor(ours[k]), torch.as_tensor(theirs[k])) for k in ours)
