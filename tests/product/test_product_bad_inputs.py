"""Bad input of every kind: exit status 2, one line on standard error, no traceback, and nothing on disk changed."""

from __future__ import annotations

import sys

import pytest
from _product_helpers import run_cli, tiny_config, train_args


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """A directory with one finished tiny run (``run``) and config files, shared by every case."""
    root = tmp_path_factory.mktemp("bad_inputs")
    assert run_cli(train_args(root / "run", tiny_config(root), 2 * 64)) == 0
    for name, text in {
        "string_bool.toml": 'centralized_critic = "false"\n',
        "string_widths.toml": 'hidden_sizes = "256"\n',
        "unknown_key.toml": "learning_rat = 3e-4\n",
        "cuda.toml": 'device = "cuda"\n',
        "bad_backend.toml": 'collection = {backend = "threads"}\n',
        "not_toml.toml": "this is = = not toml\n",
        "huge_rollout.toml": "rollout_steps = 1_000_000_000_000\nminibatch_size = 64\n",
        "negative_lr.toml": "learning_rate = -1.0\n",
    }.items():
        (root / name).write_text(text)
    return root


def _snapshot(directory):
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


TRAIN = ["train", "--env", "mock_v0", "--quiet", "--total-steps", "64", "--num-envs", "2"]

CASES = {
    "seed-negative": [*TRAIN, "--out", "{new}", "--seed", "-1"],
    "seed-too-large": [*TRAIN, "--out", "{new}", "--seed", str(2**63)],
    "seed-not-a-number": [*TRAIN, "--out", "{new}", "--seed", "abc"],
    "total-steps-zero": ["train", "--env", "mock_v0", "--out", "{new}", "--total-steps", "0"],
    "total-steps-fraction": ["train", "--env", "mock_v0", "--out", "{new}", "--total-steps", "1.5"],
    "num-envs-zero": [*TRAIN, "--out", "{new}", "--num-envs", "0"],
    "unknown-env": ["train", "--env", "no_such_env_v0", "--out", "{new}", "--quiet"],
    "env-kwargs-bad-json": [*TRAIN, "--out", "{new}", "--env-kwargs", "{bad json"],
    "env-kwargs-a-list": [*TRAIN, "--out", "{new}", "--env-kwargs", "[1, 2]"],
    "env-kwargs-bad-name": [*TRAIN, "--out", "{new}", "--env-kwargs", '{"no_such_kwarg": 1}'],
    "render-mode-human": [*TRAIN, "--out", "{new}", "--env-kwargs", '{"render_mode": "human"}'],
    "config-missing": [*TRAIN, "--out", "{new}", "--config", "{root}/missing.toml"],
    "config-not-toml": [*TRAIN, "--out", "{new}", "--config", "{root}/not_toml.toml"],
    "config-string-bool": [*TRAIN, "--out", "{new}", "--config", "{root}/string_bool.toml"],
    "config-string-widths": [*TRAIN, "--out", "{new}", "--config", "{root}/string_widths.toml"],
    "config-unknown-key": [*TRAIN, "--out", "{new}", "--config", "{root}/unknown_key.toml"],
    "config-negative-lr": [*TRAIN, "--out", "{new}", "--config", "{root}/negative_lr.toml"],
    "config-bad-backend": [*TRAIN, "--out", "{new}", "--config", "{root}/bad_backend.toml"],
    "rollout-too-large": [*TRAIN, "--out", "{new}", "--config", "{root}/huge_rollout.toml"],
    "unknown-redundancy": [*TRAIN, "--out", "{new}", "--redundancy", "nope"],
    "coef-without-redundancy": [*TRAIN, "--out", "{new}", "--redundancy-coef", "0.1"],
    "unknown-preset": [*TRAIN, "--out", "{new}", "--preset", "nope"],
    "out-holds-a-run": [*TRAIN, "--out", "{root}/run"],
    "resume-nothing": ["train", "--out", "{new}", "--resume", "--quiet"],
    "resume-with-config": ["train", "--out", "{root}/run", "--resume", "--config", "{root}/unknown_key.toml"],
    "resume-changing-lr": ["train", "--out", "{root}/run", "--resume", "--env", "mock_v0"],
    "two-backends": [*TRAIN, "--out", "{new}", "--env-workers", "2", "--num-workers", "2"],
    "env-workers-negative": [*TRAIN, "--out", "{new}", "--env-workers", "-1"],
    "eval-seed-negative": ["eval", "{root}/run", "--seed", "-1"],
    "eval-no-run": ["eval", "{new}"],
    "eval-episodes-zero": ["eval", "{root}/run", "--episodes", "0"],
    "eval-missing-checkpoint": ["eval", "{root}/run", "--checkpoint", "{root}/missing.pt"],
    "plot-unknown-metric": ["plot", "{root}/run", "--metric", "nope", "--out", "{new}/x.png"],
    "plot-no-run": ["plot", "{new}", "--out", "{root}/x.png"],
    "psro-br-steps-zero": ["psro", "--env", "kuhn_poker_v0", "--out", "{new}", "--br-steps", "0"],
    "psro-iterations-zero": ["psro", "--env", "kuhn_poker_v0", "--out", "{new}", "--iterations", "0"],
    "psro-unknown-env": ["psro", "--env", "no_such_env_v0", "--out", "{new}"],
    "psro-negative-split": ["psro", "--env", "kuhn_poker_v0", "--out", "{new}", "--task-split", "-2"],
    "nfsp-num-envs-zero": ["nfsp", "--env", "kuhn_poker_v0", "--out", "{new}", "--num-envs", "0"],
    "nfsp-negative-seed": ["nfsp", "--env", "kuhn_poker_v0", "--out", "{new}", "--seed", "-3"],
}
if not __import__("torch").cuda.is_available():
    CASES["device-cuda-without-cuda"] = [*TRAIN, "--out", "{new}", "--config", "{root}/cuda.toml"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_gets_one_line_and_exit_2_and_changes_nothing(name, place, tmp_path, capsys):
    args = [a.replace("{root}", str(place)).replace("{new}", str(tmp_path / "new")) for a in CASES[name]]
    before = _snapshot(place)
    assert run_cli(args) == 2, name
    err = capsys.readouterr().err.strip()
    assert err and len(err.splitlines()) == 1, err
    assert err.startswith("marljoint") and "Traceback" not in err, err
    assert _snapshot(place) == before
    assert not (tmp_path / "new").exists()


def test_ray_workers_without_ray_say_how_to_install_it(place, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails, as where it is not installed
    assert run_cli([*TRAIN, "--out", str(tmp_path / "new"), "--ray"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and 'pip install "marljoint[ray]"' in err
    assert not (tmp_path / "new").exists()


def test_a_rollout_too_large_names_its_size(place, tmp_path, capsys):
    args = [*TRAIN, "--out", str(tmp_path / "new"), "--config", str(place / "huge_rollout.toml")]
    assert run_cli(args) == 2
    err = capsys.readouterr().err
    assert "x 2 env copies x 2 agents needs" in err and "GiB" in err and "lower rollout_steps or num_envs" in err


def test_total_steps_in_scientific_notation_is_accepted(tmp_path):
    assert run_cli([*TRAIN[:-4], "--num-envs", "2", "--total-steps", "6.4e1", "--out", str(tmp_path / "r")]) == 0
    assert "total_steps = 64" in (tmp_path / "r" / "config.toml").read_text()


def test_settings_from_the_command_line_are_type_checked_and_recorded(tmp_path, capsys):
    out = tmp_path / "r"
    args = [*TRAIN, "--out", str(out), "--set", "hidden_sizes=[8, 8]", "--set", "centralized_critic=true"]
    args += ["--learning-rate", "3e-4", "--rollout-steps", "32", "--device", "cpu", "--set", "n_epochs=1"]
    assert run_cli(args) == 0
    text = (out / "config.toml").read_text()
    for line in ("hidden_sizes = [8, 8]", "centralized_critic = true", "learning_rate = 0.0003", "rollout_steps = 32"):
        assert line in text
    assert run_cli([*TRAIN, "--out", str(tmp_path / "s"), "--set", "hidden_sizes=256"]) == 2
    assert "hidden_sizes must be a list of positive integer widths" in capsys.readouterr().err
    assert run_cli([*TRAIN, "--out", str(tmp_path / "s"), "--set", "no_such_setting=1"]) == 2
    assert "unknown config key(s) ['no_such_setting']" in capsys.readouterr().err
    assert run_cli([*TRAIN, "--out", str(tmp_path / "s"), "--set", "learning_rate"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_plot_out_names_the_file_it_wrote(place, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    run = str(place / "run")
    assert run_cli(["plot", run, "--out", str(tmp_path / "figures") + "/"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "figures" / "episode_return_mean.png")
    assert (tmp_path / "figures" / "episode_return_mean.png").read_bytes()[:4] == b"\x89PNG"
    assert run_cli(["plot", run, "--out", str(tmp_path / "curve")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "curve.png")
    assert (tmp_path / "curve.png").is_file()


def test_several_seeds_in_one_command_and_their_plot_with_a_confidence_band(tmp_path, capsys):
    out = tmp_path / "seeds"
    args = ["train", "--env", "mock_v0", "--num-envs", "2", "--rollout-steps", "16", "--total-steps", "64"]
    args += ["--out", str(out)]
    assert run_cli([*args, "--seeds", "3", "5"]) == 0
    printed = capsys.readouterr().out
    assert "2 seeds: final mean episode return" in printed and "(95% CI)" in printed
    for seed in (3, 5):
        assert f"seed = {seed}\n" in (out / f"seed_{seed}" / "config.toml").read_text()
    assert run_cli(["train", "--out", str(out), "--resume", "--total-steps", "128", "--seeds", "3", "5"]) == 0
    assert all(len((out / f"seed_{s}" / "metrics.csv").read_text().splitlines()) == 5 for s in (3, 5))
    assert run_cli([*args, "--seeds", "1", "1"]) == 2
    assert "--seeds lists a seed twice" in capsys.readouterr().err
    pytest.importorskip("matplotlib")
    assert run_cli(["plot", str(out), str(out / "seed_3"), "--out", str(tmp_path / "bands.png")]) == 0
    assert (tmp_path / "bands.png").read_bytes()[:4] == b"\x89PNG"


def test_supersuit_wrappers_from_the_command_line(tmp_path, capsys):
    from marljoint.run.train import load_run_spec, make_env

    out = tmp_path / "r"
    args = ["train", "--env", "mpe2.simple_spread_v3", "--env-kwargs", '{"N": 2, "max_cycles": 10}']
    args += ["--num-envs", "2", "--rollout-steps", "8", "--total-steps", "16", "--quiet", "--out", str(out)]
    pytest.importorskip("mpe2")
    wraps = ["--wrap", "dtype_v0:dtype=float64", "--wrap", "frame_stack_v1:stack_size=3"]
    assert run_cli([*args, *wraps]) == 0
    spec = load_run_spec(out)
    expected = [{"name": "dtype_v0", "dtype": "float64"}, {"name": "frame_stack_v1", "stack_size": 3}]
    assert list(spec.wrappers) == expected
    env = make_env(spec, num_envs=1)
    assert env.spec.observations[0].shape[-1] % 3 == 0  # three frames stacked
    env.close()
    assert run_cli([*args[:-1], str(tmp_path / "bad"), "--wrap", "no_such_wrapper_v0"]) == 2
    assert "supersuit has no wrapper 'no_such_wrapper_v0'" in capsys.readouterr().err
    assert run_cli([*args[:-1], str(tmp_path / "bad"), "--wrap", "resize_v1:x_size"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
