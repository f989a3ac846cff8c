"""PSRO and NFSP runs on the run driver (``marljoint.run.game_runs``): their settings in a run spec, refused in one
line where wrong; config.toml; exact resume; eval; export's refusal; non-finite checkpoints refused; the time budget;
and envs whose episodes never end refused by PSRO's simulation."""

from __future__ import annotations

import csv
import shutil

import numpy as np
import pytest
from rollout_checks import same_state

from marljoint.best_response import opponents
from marljoint.best_response.population import UniformPolicy
from marljoint.checkpoint import atomic_torch_save, list_checkpoints, load_checkpoint
from marljoint.cli import main
from marljoint.collect.config import CollectionConfig
from marljoint.env.pettingzoo import PettingZooJointEnv
from marljoint.run.errors import RunError
from marljoint.run.spec import RunSpec, load_run_spec, write_config
from marljoint_envs import mock_v0

TINY = {
    "psro": ["--br-steps", "16", "--num-envs", "2", "--episodes-per-entry", "2", "--set", "rollout_steps=8"],
    "nfsp": ["--num-envs", "2", "--set", "rollout_steps=8", "--set", "nfsp={rollouts_per_iteration=2}"],
}


def _cli(args: list[str]) -> int:
    try:
        return main(args)
    except SystemExit as exc:
        return int(exc.code or 0)


def _spec(**changes) -> RunSpec:
    return RunSpec(env="kuhn_poker_v0", env_kwargs={}, **changes)


def _rows(run_dir) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _newest(run_dir):
    return list_checkpoints(run_dir / "checkpoints")[-1]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"algorithm": "psro", "psro": {"bogus": 1}}, r"^unknown setting psro.bogus; valid keys: psro.iterations, "),
        ({"algorithm": "nfsp", "nfsp": {"antic": 1}}, r"^unknown setting nfsp.antic; valid keys: nfsp.anticipatory, "),
        ({"algorithm": "psro", "psro": 3}, r"^psro must be a table of settings, got 3"),
        ({"algorithm": "psro", "psro": {"seed": 3}}, r"psro.seed is a setting of the run itself; set it at the top"),
        ({"algorithm": "psro", "psro": {"iterations": 0}}, r"psro.iterations must be a positive integer, got 0"),
        ({"algorithm": "nfsp", "nfsp": {"anticipatory": 0}}, r"nfsp.anticipatory must be in \(0, 1\], got 0"),
        ({"algorithm": "psro", "exploitability_every": 1}, r"exploitability_every = 1 does not apply to a psro run"),
        ({"algorithm": "nfsp", "redundancy": "xcorr"}, r"redundancy = 'xcorr' does not apply to a nfsp run"),
        ({"algorithm": "psro", "max_seconds": 0}, r"max_seconds must be a positive number of seconds, got 0"),
        ({"max_seconds": 5.0}, r"max_seconds = 5.0 is the time budget of psro and nfsp runs; other runs stop at"),
        ({"algorithm": "nfsp", "psro": {"iterations": 2}}, r"psro settings apply to psro, not nfsp; drop them"),
    ],
)
def test_wrong_settings_of_a_game_run_are_refused_in_one_line(changes, message):
    with pytest.raises(RunError, match=message) as raised:
        _spec(**changes)
    assert "\n" not in str(raised.value)


def test_a_game_run_steps_its_env_copies_in_this_process():
    spec = _spec()
    trainer = spec.trainer.replace(collection=CollectionConfig("subprocess", 2))
    with pytest.raises(RunError, match=r"a psro run steps its env copies in this process .* drop --env-workers"):
        _spec(algorithm="psro", trainer=trainer)


def test_config_toml_holds_every_psro_setting_and_reads_back(tmp_path):
    resolved = _spec().trainer.replace(normalize_observations=False)  # as a run writes it (derived from the env)
    spec = _spec(algorithm="psro", psro={"oracle": "exact", "iterations": 3}, max_seconds=60.0, trainer=resolved)
    write_config(spec, tmp_path / "config.toml")
    text = (tmp_path / "config.toml").read_text()
    assert 'algorithm = "psro"' in text and "psro = {iterations = 3, " in text and "max_seconds = 60.0" in text
    saved = load_run_spec(tmp_path)
    assert saved.psro.oracle == "exact" and saved.psro.meta_solver == "nash"  # every setting, defaults too
    assert saved.to_dict() == spec.to_dict()
    plain = _spec().to_dict()  # a PPO run's file is as it was
    assert not {"psro", "nfsp", "max_seconds"} & set(plain)


@pytest.mark.parametrize("command", ["psro", "nfsp"])
def test_a_game_run_resumes_exactly_evaluates_and_refuses_export(command, tmp_path, capsys):
    once, straight = tmp_path / "once", tmp_path / "straight"
    base = [command, "--env", "kuhn_poker_v0", *TINY[command], "--quiet"]
    assert _cli([*base, "--iterations", "1", "--out", str(once)]) == 0
    assert _cli([command, "--out", str(once), "--iterations", "2", "--resume", "--quiet"]) == 0  # env from the run
    assert _cli([*base, "--iterations", "2", "--out", str(straight)]) == 0
    assert same_state(load_checkpoint(_newest(once))["trainer"], load_checkpoint(_newest(straight))["trainer"])
    timing = ("wall_time", "sps", "iteration_seconds", "br_seconds")
    rows = [[{k: v for k, v in r.items() if k not in timing} for r in _rows(d)] for d in (once, straight)]
    assert rows[0] == rows[1] and len(rows[0]) == (3 if command == "psro" else 2)
    capsys.readouterr()
    assert _cli(["eval", str(straight), "--episodes", "4"]) == 0
    assert "player_0" in capsys.readouterr().out
    assert _cli(["export", str(straight), "--out", str(tmp_path / "exported")]) == 2
    err = capsys.readouterr().err
    what = "meta-mixtures of its populations" if command == "psro" else "the average policies of its seats"
    assert err.count("\n") == 1 and f"cannot export {straight}: a {command} run acts with {what}" in err
    assert "export supports" in err and not (tmp_path / "exported").exists()


@pytest.mark.parametrize("command", ["psro", "nfsp"])
def test_a_checkpoint_with_non_finite_weights_is_refused_by_eval_and_resume(command, tmp_path, capsys):
    out = tmp_path / "run"
    base = [command, "--env", "kuhn_poker_v0", *TINY[command], "--iterations", "1", "--quiet"]
    if command == "psro":
        base += ["--oracle", "exact"]
    assert _cli([*base, "--out", str(out)]) == 0
    path = _newest(out)
    state = load_checkpoint(path)
    weights = state["trainer"]["policies"]
    if command == "psro":  # the exact oracle's members are tables
        table = next(m for population in weights for m in population if m["kind"] == "kuhn_table")
        table["table"] = np.full_like(table["table"], np.nan)
    else:
        first = next(iter(weights[0].values()))
        first.fill_(float("nan"))
    atomic_torch_save(state, path)
    capsys.readouterr()
    assert _cli(["eval", str(out), "--episodes", "1"]) == 2
    assert "holds non-finite weights" in capsys.readouterr().err
    assert _cli([command, "--out", str(out), "--iterations", "2", "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds non-finite weights" in err


def test_the_time_budget_ends_a_run_after_the_iteration_that_reaches_it(tmp_path):
    out = tmp_path / "run"
    argv = ["nfsp", "--env", "kuhn_poker_v0", *TINY["nfsp"], "--seconds", "0.001", "--quiet", "--out", str(out)]
    assert _cli(argv) == 0
    assert [r["iteration"] for r in _rows(out)] == ["1"]
    saved = load_run_spec(out)
    assert saved.max_seconds == 0.001 and saved.trainer.rollout_steps == 8  # --set reaches every setting
    assert saved.nfsp.rollouts_per_iteration == 2 and saved.nfsp.sl_steps_per_rollout == 8  # recipe's kept
    shutil.rmtree(out)
    assert _cli([*argv[:-3], "--seconds", "1000", "--iterations", "2", "--quiet", "--out", str(out)]) == 0
    assert [r["iteration"] for r in _rows(out)] == ["1", "2"]  # the iterations end first


def test_episodes_that_never_end_are_refused_by_the_simulation(monkeypatch):
    monkeypatch.setattr(opponents, "STALLED_STEPS", 50)
    env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=2, seed=0)  # no max_cycles: its episodes never end
    uniform = [[UniformPolicy(env.spec.actions[seat])] for seat in range(2)]
    try:
        with pytest.raises(ValueError, match=r"no episode ended in 50 joint steps of 2 env copies .*max_cycles"):
            opponents.simulate_profiles(env, uniform, np.zeros((1, 2), dtype=np.int64), 2, seed=0)
    finally:
        env.close()
