"""Bad input to ``marljoint``: one clear line on stderr, exit status 2, never a traceback."""

from __future__ import annotations

import json

import pytest
from _product_helpers import resume_args, run_cli, tiny_config, train_args


def _fails(capsys, args, match):
    code = run_cli(args)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert "error" in lines[0]
    assert match in lines[0], lines[0]
    return lines[0]


def test_unknown_env(capsys, tmp_path):
    line = _fails(
        capsys, ["train", "--env", "no_such_env_v0", "--out", str(tmp_path / "r")], "unknown env 'no_such_env_v0'"
    )
    assert "bucket_brigade_v0" in line  # lists the bundled envs


def test_unknown_module_in_installed_package(capsys, tmp_path):
    _fails(capsys, ["train", "--env", "pettingzoo.sisl.no_such_v0", "--out", str(tmp_path / "r")], "unknown env")


def test_missing_factory_attribute(capsys, tmp_path):
    _fails(
        capsys,
        ["train", "--env", "marljoint_envs.counter_v0:nope", "--out", str(tmp_path / "r")],
        "no attribute 'nope'",
    )


def test_bad_json(capsys, tmp_path):
    _fails(capsys, ["train", "--env-kwargs", "{scenario: easy}", "--out", str(tmp_path / "r")], "not valid JSON")


def test_json_that_is_not_an_object(capsys, tmp_path):
    _fails(capsys, ["train", "--env-kwargs", "[1, 2]", "--out", str(tmp_path / "r")], "expected a JSON object")


def test_env_kwargs_the_env_rejects(capsys, tmp_path):
    args = ["train", "--env", "counter_v0", "--env-kwargs", json.dumps({"colour": 3}), "--out", str(tmp_path / "r")]
    line = _fails(capsys, args, "colour")
    assert "counter_v0" in line


def test_env_kwargs_with_invalid_values(capsys, tmp_path):
    args = ["train", "--env-kwargs", json.dumps({"scenario": "nope"}), "--out", str(tmp_path / "r")]
    _fails(capsys, args, "cannot be built")


def test_unknown_config_key(capsys, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("learning_rat = 0.001\n")
    line = _fails(
        capsys,
        ["train", "--config", str(config), "--out", str(tmp_path / "r")],
        "unknown config key(s) ['learning_rat']",
    )
    assert "learning_rate" in line  # lists the valid keys


def test_config_file_that_is_not_toml(capsys, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("learning_rate = = 1\n")
    _fails(capsys, ["train", "--config", str(config), "--out", str(tmp_path / "r")], "is not valid TOML")


def test_missing_config_file(capsys, tmp_path):
    _fails(
        capsys,
        ["train", "--config", str(tmp_path / "nope.toml"), "--out", str(tmp_path / "r")],
        "cannot read config file",
    )


@pytest.mark.parametrize("steps", ["-5", "0"])
def test_non_positive_steps(capsys, tmp_path, steps):
    _fails(
        capsys,
        ["train", "--total-steps", steps, "--out", str(tmp_path / "r")],
        "argument --total-steps: must be a positive integer",
    )


def test_steps_that_are_not_a_number(capsys, tmp_path):
    _fails(capsys, ["train", "--total-steps", "lots", "--out", str(tmp_path / "r")], "expected an integer")


@pytest.mark.parametrize("value", ["0", "-0.1"])
def test_clip_range_not_positive(capsys, tmp_path, value):
    config = tmp_path / "c.toml"
    config.write_text(f"clip_range = {value}\n")
    _fails(capsys, ["train", "--config", str(config), "--out", str(tmp_path / "r")], "clip_range must be > 0")


def test_negative_num_envs(capsys, tmp_path):
    _fails(capsys, ["train", "--num-envs", "-2", "--out", str(tmp_path / "r")], "num_envs must be a positive integer")


def test_redundancy_coef_without_kind(capsys, tmp_path):
    _fails(capsys, ["train", "--redundancy-coef", "0.1", "--out", str(tmp_path / "r")], "needs --redundancy")


def test_a_config_without_redundancy_is_accepted_again(capsys, tmp_path):
    config = tiny_config(tmp_path)
    assert run_cli(train_args(tmp_path / "a", config, 64)) == 0
    assert (
        run_cli(["train", "--config", str(tmp_path / "a" / "config.toml"), "--out", str(tmp_path / "b"), "--quiet"])
        == 0
    )


def test_unknown_redundancy_kind(capsys, tmp_path):
    _fails(capsys, ["train", "--redundancy", "mutual_info", "--out", str(tmp_path / "r")], "invalid choice")


def test_out_dir_holding_another_run_is_refused(capsys, tmp_path):
    config = tiny_config(tmp_path)
    out = tmp_path / "run"
    assert run_cli(train_args(out, config, 64)) == 0
    line = _fails(capsys, train_args(out, config, 64), "already holds a run")
    assert "--resume" in line and "--force" in line
    assert run_cli(train_args(out, config, 64, "--force")) == 0


def test_corrupted_checkpoint(capsys, tmp_path):
    config = tiny_config(tmp_path)
    out = tmp_path / "run"
    assert run_cli(train_args(out, config, 64)) == 0
    newest = sorted((out / "checkpoints").glob("ckpt_*.pt"))[-1]
    newest.write_bytes(newest.read_bytes()[:100])
    _fails(capsys, resume_args(out, 128), "is corrupted or truncated")
    _fails(capsys, ["eval", str(out), "--episodes", "1"], "is corrupted or truncated")


def test_resume_without_a_run(capsys, tmp_path):
    _fails(capsys, ["train", "--resume", "--out", str(tmp_path / "empty")], "not a marljoint run directory")


def test_resume_with_a_changed_setting(capsys, tmp_path):
    config = tiny_config(tmp_path)
    out = tmp_path / "run"
    assert run_cli(train_args(out, config, 64)) == 0
    args = ["train", "--out", str(out), "--resume", "--seed", "7", "--quiet"]
    _fails(capsys, args, "cannot resume with seed = 7")


def test_resume_and_force_together(capsys, tmp_path):
    _fails(capsys, ["train", "--resume", "--force", "--out", str(tmp_path)], "not allowed with argument")


def test_eval_of_a_directory_without_a_run(capsys, tmp_path):
    _fails(capsys, ["eval", str(tmp_path)], "not a marljoint run directory")


def test_plot_of_a_directory_without_metrics(capsys, tmp_path):
    _fails(capsys, ["plot", str(tmp_path), "--out", str(tmp_path / "p.png")], "holds no metrics.csv")


def test_no_command_prints_help(capsys):
    assert run_cli([]) == 2
    assert "train" in capsys.readouterr().err


def test_preset_fills_the_run_settings_and_options_override_it(tmp_path):
    from marljoint.run.presets import PRESETS, get_preset
    from marljoint.run.train import RunSpec

    values = get_preset("bucket_brigade").run_values()
    values.update({"total_steps": 512, "num_envs": 2})
    spec = RunSpec.from_dict(values)
    assert spec.env == "marljoint_envs.bucket_brigade_v0"
    assert spec.trainer.gamma == 0.9 and spec.trainer.num_envs == 2
    assert spec.total_steps == 512
    for name in PRESETS:
        assert get_preset(name).config().value_normalization
    with pytest.raises(ValueError, match=r"unknown preset 'nope'; known presets: \["):
        get_preset("nope")


@pytest.mark.parametrize(
    ("option", "match"),
    [
        (["--policy-lag", "1"], "--policy-lag 1 overlaps collection in worker processes with the update; add"),
        (["--balance"], "--balance hands env copies between worker processes; add --env-workers K or --ray"),
    ],
)
def test_worker_options_without_workers(capsys, tmp_path, option, match):
    _fails(capsys, ["train", "--env", "counter_v0", "--out", str(tmp_path / "r"), *option], match)


def test_balance_with_env_workers_is_written_to_the_config(tmp_path):
    from marljoint.run.train import load_run_spec

    out = tmp_path / "run"
    args = ["train", "--env", "counter_v0", "--num-envs", "4", "--total-steps", "64", "--rollout-steps", "8"]
    assert run_cli([*args, "--env-workers", "2", "--balance", "--out", str(out), "--quiet"]) == 0
    collection = load_run_spec(out).trainer.collection
    assert (collection.backend, collection.workers, collection.balance) == ("subprocess", 2, True)
