"""The thread policy of ``marljoint``: one thread per command unless the learner has cores of its own, the
resolved count in config.toml, --env-workers auto, and the line on idle cores."""

from __future__ import annotations

import os

import pytest
import torch
from _product_helpers import resume_args, run_cli, tiny_config, train_args

import marljoint.ppo.derived
import marljoint.threads
from marljoint.run.train import load_run_spec
from marljoint.threads import THREAD_ENV_VARS


@pytest.fixture(autouse=True)
def restore_threads():
    before = torch.get_num_threads()
    environment = {name: os.environ.get(name) for name in THREAD_ENV_VARS}
    yield
    torch.set_num_threads(before)
    for name, value in environment.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _cores(monkeypatch, count):
    monkeypatch.setattr(marljoint.threads, "usable_cores", lambda: count)
    monkeypatch.setattr(marljoint.ppo.derived, "usable_cores", lambda: count)


def test_every_command_starts_on_one_thread(tmp_path):
    torch.set_num_threads(2)
    assert run_cli(["plot", str(tmp_path / "no_run"), "--out", str(tmp_path / "x.png")]) != 0
    assert torch.get_num_threads() == 1 and os.environ["OMP_NUM_THREADS"] == "1"


def test_config_toml_holds_the_threads_used_and_why_and_a_resume_may_change_them(tmp_path):
    out = tmp_path / "run"
    assert run_cli(train_args(out, tiny_config(tmp_path), 64)) == 0
    text = (out / "config.toml").read_text()
    assert "# derived from this machine (1: this process collects the rollouts itself" in text
    assert "\ntorch_threads = 1\n" in text
    assert run_cli(resume_args(out, 128, "--set", "torch_threads=2")) == 0
    assert load_run_spec(out).trainer.torch_threads == 2


def _auto_run(tmp_path, *extra):
    out = tmp_path / "auto"
    assert run_cli(train_args(out, tiny_config(tmp_path), 64, "--env-workers", "auto", *extra)) == 0
    return load_run_spec(out).trainer


def test_env_workers_auto_leaves_a_core_for_the_learner_at_policy_lag_1(tmp_path, monkeypatch):
    _cores(monkeypatch, 3)
    trainer = _auto_run(tmp_path)
    assert (trainer.collection.backend, trainer.collection.workers, trainer.collection.policy_lag) == (
        "subprocess", 2, 1,
    )  # fmt: skip
    assert trainer.torch_threads == 1  # the core the two workers leave


def test_env_workers_auto_keeps_lag_0_for_recurrent_policies_and_when_asked(tmp_path, monkeypatch):
    _cores(monkeypatch, 2)
    assert _auto_run(tmp_path, "--recurrent", "gru").collection.policy_lag == 0
    assert _auto_run(tmp_path, "--policy-lag", "0", "--force").collection.policy_lag == 0


def test_env_workers_auto_on_one_core_collects_in_process(tmp_path, monkeypatch):
    _cores(monkeypatch, 1)
    assert _auto_run(tmp_path).collection.backend == "local"


def test_env_workers_takes_a_count_or_auto(capsys, tmp_path):
    assert run_cli(train_args(tmp_path / "r", tiny_config(tmp_path), 64, "--env-workers", "many")) == 2
    assert "must be an integer >= 0 (0: in this process) or 'auto', got many" in capsys.readouterr().err


def test_a_run_that_leaves_most_cores_idle_says_how_to_use_them(tmp_path, monkeypatch, capsys):
    _cores(monkeypatch, 16)
    args = [a for a in train_args(tmp_path / "r", tiny_config(tmp_path), 64) if a != "--quiet"]
    assert run_cli(args) == 0
    err = capsys.readouterr().err
    assert "this run collects on 1 of the 16 cores this process may use; --env-workers auto steps the 4 env" in err
    _cores(monkeypatch, 2)
    assert run_cli([*args, "--force"]) == 0
    assert "--env-workers auto" not in capsys.readouterr().err
