"""marljoint train --algorithm: value-decomposition runs (vdn, qmix) train, resume and evaluate through the same
run directory as PPO runs; mappo and ippo name PPO's critic setting; bad values give one line and exit 2."""

from __future__ import annotations

import json

import pytest
from _product_helpers import newest_checkpoint, run_cli, train_args
from rollout_checks import same_state

from marljoint.checkpoint import list_checkpoints
from marljoint.run.train import RunSpec, load_run_spec

TINY_VALUE = "\n".join(
    ["rollout_steps = 16", "hidden_sizes = [16]", "checkpoint_every = 2", "[offpolicy]", "learning_starts = 64"]
    + ["batch_size = 32", ""]
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One finished tiny qmix run on bucket_brigade_v0 (MultiDiscrete actions), 4 iterations of 4 x 16 steps."""
    root = tmp_path_factory.mktemp("algorithm")
    config = root / "value.toml"
    config.write_text(TINY_VALUE)
    assert run_cli(train_args(root / "qmix", config, 4 * 64, "--algorithm", "qmix")) == 0
    return root, config


def test_a_qmix_run_writes_its_settings_metrics_and_checkpoints(runs):
    root, _ = runs
    spec = load_run_spec(root / "qmix")
    assert spec.algorithm == "qmix" and spec.tables()["offpolicy"] == {"learning_starts": 64, "batch_size": 32}
    assert (spec.offpolicy.learning_starts, spec.offpolicy.batch_size, spec.offpolicy.num_envs) == (64, 32, 4)
    assert len(list_checkpoints(root / "qmix" / "checkpoints")) == 2
    header = (root / "qmix" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "offpolicy/td_loss" in header and "exploration" in header
    state = newest_checkpoint(root / "qmix")["trainer"]
    assert state["buffer"]["size"] == 4 * 64 and state["config"]["algorithm"] == "qmix"


def test_every_metric_of_a_value_run_is_documented(runs):
    import re
    from pathlib import Path

    root, _ = runs
    page = (Path(__file__).resolve().parents[2] / "docs" / "value_decomposition.md").read_text()
    header = (root / "qmix" / "metrics.csv").read_text().splitlines()[0].split(",")
    names = {re.sub(r"/\d+$", "/<k>", re.sub(r"/agent_\d+$", "/<agent>", name)) for name in header}
    assert not [name for name in sorted(names) if f"`{name}`" not in page]


def test_a_value_run_resumes_bit_identically(runs, tmp_path):
    root, config = runs
    half = tmp_path / "half"
    assert run_cli(train_args(half, config, 2 * 64, "--algorithm", "qmix")) == 0
    assert run_cli(["train", "--out", str(half), "--resume", "--total-steps", str(4 * 64), "--quiet"]) == 0
    straight, resumed = newest_checkpoint(root / "qmix")["trainer"], newest_checkpoint(half)["trainer"]
    for key in ("algorithm", "buffer", "generator", "env_steps", "gradient_steps"):
        assert same_state(straight[key], resumed[key]), key


def test_eval_of_a_value_run_acts_greedily_on_q(runs, capsys):
    root, _ = runs
    assert run_cli(["eval", str(root / "qmix"), "--episodes", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["episodes"] == 2 and result["deterministic"] is True


def test_exporting_a_value_run_is_refused_in_one_line(runs, tmp_path, capsys):
    root, _ = runs
    assert run_cli(["export", str(root / "qmix"), "--out", str(tmp_path / "exported")]) == 2
    err = capsys.readouterr().err
    assert "a qmix run acts greedily on its Q networks (the argmax of each agent's utilities), and export" in err
    assert err.count("\n") == 1 and not (tmp_path / "exported").exists()


def test_load_run_acts_greedily_with_a_value_run(runs):
    from marljoint import load_run

    root, _ = runs
    run = load_run(root / "qmix", num_envs=2)
    try:
        actions = run.act(run.env.reset(seed=0))
        assert actions[0].shape == (2, 2, 3)  # 2 copies x 2 agents x MultiDiscrete [house, mode, signal]
    finally:
        run.close()


def test_a_vdn_run_on_discrete_actions_with_env_workers(tmp_path):
    args = ["train", "--env", "mock_v0", "--algorithm", "vdn", "--num-envs", "2", "--rollout-steps", "8"]
    args += ["--env-workers", "2"]
    args += ["--total-steps", "64", "--set", "offpolicy={learning_starts=16, batch_size=8}", "--quiet"]
    assert run_cli([*args, "--out", str(tmp_path / "vdn")]) == 0
    assert load_run_spec(tmp_path / "vdn").algorithm == "vdn"


def test_a_value_run_with_the_redundancy_penalty_logs_it(tmp_path):
    args = ["train", "--env", "mock_v0", "--algorithm", "qmix", "--num-envs", "2", "--rollout-steps", "8"]
    args += ["--total-steps", "48", "--set", "offpolicy={learning_starts=16, batch_size=8}", "--quiet"]
    assert run_cli([*args, "--redundancy", "cka", "--out", str(tmp_path / "run")]) == 0
    lines = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    last = dict(zip(lines[0].split(","), lines[-1].split(",")))
    assert float(last["offpolicy/aux_loss"]) != 0.0 and "redundancy/cka" in last


def test_mappo_and_ippo_name_the_critic_setting():
    assert RunSpec.from_dict({"algorithm": "mappo"}).trainer.centralized_critic is True
    assert RunSpec.from_dict({"algorithm": "ippo"}).trainer.centralized_critic is False
    assert "algorithm" not in RunSpec().to_dict() and "offpolicy" not in RunSpec().to_dict()


TRAIN = ["train", "--env", "mock_v0", "--quiet", "--total-steps", "64", "--num-envs", "2"]
BAD = {
    "unknown": (["--algorithm", "dqn"], "argument --algorithm: invalid choice: 'dqn'"),
    "mappo-without-critic": (
        ["--algorithm", "mappo", "--set", "centralized_critic=false"],
        "algorithm 'mappo' trains a centralised critic, but centralized_critic=false; drop one",
    ),
    "run-setting-in-table": (
        ["--algorithm", "vdn", "--set", "offpolicy={gamma=0.5}"],
        "offpolicy.gamma is a setting of the run itself; set gamma at the top level",
    ),
    "unknown-table-key": (
        ["--algorithm", "qmix", "--set", "offpolicy={batch_sz=5}"],
        "unknown setting offpolicy.batch_sz; valid keys: offpolicy.learning_rate, offpolicy.adam_eps",
    ),
    "bad-table-value": (
        ["--algorithm", "qmix", "--set", "offpolicy={exploration='ucb'}"],
        "offpolicy.exploration must be one of ['epsilon', 'boltzmann'], got 'ucb'",
    ),
    "table-without-value-algorithm": (
        ["--set", "offpolicy={batch_size=5}"],
        "offpolicy settings need algorithm = one of ['vdn', 'qmix', 'masac', 'maddpg']; set algorithm or drop them",
    ),
    "recurrent": (
        ["--algorithm", "qmix", "--recurrent", "gru"],
        "qmix trains feed-forward utilities, but recurrent='gru'; drop recurrent",
    ),
    "device": (["--algorithm", "qmix", "--device", "cuda"], "qmix trains on the CPU, got device='cuda'; drop --device"),
    "not-a-table": (["--algorithm", "vdn", "--set", "offpolicy=3"], "offpolicy must be a table of settings, got 3"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_algorithm_settings_give_one_line_and_exit_2(case, tmp_path, capsys):
    extra, message = BAD[case]
    assert run_cli([*TRAIN, "--out", str(tmp_path / "run"), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and message in err, err
    assert not (tmp_path / "run").exists()


def test_a_box_env_is_refused_by_value_methods(tmp_path, capsys):
    args = ["train", "--env", "identity_v0", "--env-kwargs", '{"action_type": "box"}', "--algorithm", "vdn"]
    assert run_cli([*args, "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "vdn needs Discrete or MultiDiscrete actions, but agent 'agent_0' acts in a Box space" in err
    assert err.count("\n") == 1


# ------------------------------------------------------------------ masac and maddpg
TINY_SAC = TINY_VALUE + "\n".join(["[offpolicy.sac]", "critic_hidden_sizes = [16]", ""])
BOX_ENV = ["--env", "identity_v0", "--env-kwargs", '{"action_type": "box"}']
DISCRETE_ENV = ["--env", "mock_v0", "--env-kwargs", '{"max_cycles": 5}']


@pytest.fixture(scope="module")
def sac_runs(tmp_path_factory):
    """Tiny masac runs (4 iterations of 4 x 16 steps) on a Box env (identity_v0's box variant) and a Discrete one
    (mock_v0)."""
    root = tmp_path_factory.mktemp("sac")
    config = root / "sac.toml"
    config.write_text(TINY_SAC)
    for name, env in (("box", BOX_ENV), ("discrete", DISCRETE_ENV)):
        assert run_cli(train_args(root / name, config, 4 * 64, "--algorithm", "masac", *env)) == 0
    return root, config


@pytest.mark.parametrize("name", ["box", "discrete"])
def test_a_masac_run_writes_its_settings_metrics_and_checkpoints(sac_runs, name):
    root, _ = sac_runs
    spec = load_run_spec(root / name)
    assert spec.algorithm == "masac" and spec.tables()["offpolicy"]["sac"] == {"critic_hidden_sizes": [16]}
    header = (root / name / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"offpolicy/critic_loss", "offpolicy/actor_loss", "offpolicy/alpha/0"} <= set(header)
    state = newest_checkpoint(root / name)["trainer"]
    assert state["buffer"]["size"] == 4 * 64 and state["config"]["algorithm"] == "masac"
    actions = state["buffer"]["transitions"]["actions"]
    if name == "box":  # identity_v0's box variant: Box(-1, 1, (2,)) actions, stored as floats
        assert actions.dtype.is_floating_point and actions.shape[1:] == (2, 2)
        assert actions.abs().max() <= 1.0
    else:
        assert not actions.dtype.is_floating_point and actions.shape[1:] == (2,)


@pytest.mark.parametrize("name", ["box", "discrete"])
def test_a_masac_run_resumes_bit_identically(sac_runs, name, tmp_path):
    root, config = sac_runs
    env = BOX_ENV if name == "box" else DISCRETE_ENV
    half = tmp_path / "half"
    assert run_cli(train_args(half, config, 2 * 64, "--algorithm", "masac", *env)) == 0
    assert run_cli(["train", "--out", str(half), "--resume", "--total-steps", str(4 * 64), "--quiet"]) == 0
    straight, resumed = newest_checkpoint(root / name)["trainer"], newest_checkpoint(half)["trainer"]
    for key in ("algorithm", "optimizers", "buffer", "generator", "env_steps", "gradient_steps"):
        assert same_state(straight[key], resumed[key]), key


@pytest.mark.parametrize("name", ["box", "discrete"])
def test_eval_of_a_masac_run(sac_runs, name, capsys):
    root, _ = sac_runs
    assert run_cli(["eval", str(root / name), "--episodes", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["episodes"] == 2 and result["deterministic"] is True
    assert run_cli(["eval", str(root / name), "--episodes", "2", "--json", "--sample"]) == 0


def test_every_metric_of_a_masac_run_is_documented(sac_runs):
    import re
    from pathlib import Path

    root, _ = sac_runs
    page = (Path(__file__).resolve().parents[2] / "docs" / "masac.md").read_text()
    header = (root / "box" / "metrics.csv").read_text().splitlines()[0].split(",")
    names = {re.sub(r"/\d+$", "/<k>", re.sub(r"/agent_\d+$", "/<agent>", name)) for name in header}
    assert not [name for name in sorted(names) if f"`{name}`" not in page]


def test_a_maddpg_run_with_the_redundancy_penalty_logs_it(tmp_path):
    args = ["train", *BOX_ENV, "--algorithm", "maddpg", "--num-envs", "2", "--rollout-steps", "8"]
    args += ["--total-steps", "48", "--set", "offpolicy={learning_starts=16, batch_size=8}", "--quiet"]
    assert run_cli([*args, "--redundancy", "xcorr", "--out", str(tmp_path / "run")]) == 0
    lines = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    last = dict(zip(lines[0].split(","), lines[-1].split(",")))
    assert float(last["offpolicy/aux_loss"]) != 0.0 and "redundancy/xcorr" in last


SAC_BAD = {
    "sac-table-with-vdn": (
        ["--algorithm", "vdn", "--set", "offpolicy={sac={tau=0.1}}"],
        "offpolicy.sac settings apply to masac and maddpg, not vdn; drop them",
    ),
    "unknown-sac-key": (
        ["--algorithm", "masac", "--set", "offpolicy={sac={taus=0.1}}"],
        "unknown setting offpolicy.sac.taus; valid keys: offpolicy.sac.tau, offpolicy.sac.actor_lr",
    ),
    "run-setting-in-sac-table": (
        ["--algorithm", "masac", "--set", "offpolicy={sac={gamma=0.5}}"],
        "offpolicy.sac.gamma is set by the off-policy config itself",
    ),
    "mmd-self-play": (
        ["--algorithm", "vdn", "--self-play", "mmd"],
        "self_play = 'mmd' regularises the PPO loss, but algorithm='vdn' trains off-policy; drop one",
    ),
    "bad-sac-value": (
        ["--algorithm", "maddpg", "--set", "offpolicy={sac={tau=0.0}}"],
        "offpolicy.sac.tau=0.0 must lie in (0.0, 1.0]",
    ),
}


@pytest.mark.parametrize("case", sorted(SAC_BAD))
def test_bad_sac_settings_give_one_line_and_exit_2(case, tmp_path, capsys):
    extra, message = SAC_BAD[case]
    assert run_cli([*TRAIN, "--out", str(tmp_path / "run"), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and message in err, err
    assert not (tmp_path / "run").exists()


def test_a_multidiscrete_env_is_refused_by_masac(tmp_path, capsys):
    args = ["train", "--env", "bucket_brigade_v0", "--algorithm", "masac"]
    assert run_cli([*args, "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "masac needs Discrete or Box actions, but agent" in err and err.count("\n") == 1
