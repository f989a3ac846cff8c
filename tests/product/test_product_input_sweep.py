"""A sweep of bad input over every command and every file the program reads: each case ends in exit status 2 and
one line on standard error, with no traceback, and leaves every file in place byte for byte."""

from __future__ import annotations

import shutil

import pytest
from _product_helpers import run_cli, tiny_config, train_args

TRAIN = ["train", "--env", "mock_v0", "--quiet", "--total-steps", "64", "--num-envs", "2", "--out", "{new}"]
BRIGADE = ["train", "--env", "bucket_brigade_v0", "--quiet", "--total-steps", "64", "--num-envs", "2", "--out", "{new}"]
KUHN = ["train", "--env", "openspiel:kuhn_poker", "--quiet", "--total-steps", "64", "--out", "{new}"]
TUNE = ["tune", "--env", "mock_v0", "--quiet", "--total-steps", "64", "--num-envs", "2", "--out", "{new}"]
PSRO = ["psro", "--env", "kuhn_poker_v0", "--quiet", "--out", "{new}"]
NFSP = ["nfsp", "--env", "kuhn_poker_v0", "--quiet", "--out", "{new}"]

# Files handed to the program: --config files, and broken copies of a run's own files (made in the fixture).
CONFIG_FILES = {
    "steps_a_string.toml": 'total_steps = "many"\n',
    "kwargs_a_number.toml": "env_kwargs = 5\n",
    "unknown_table.toml": "[trainer]\nlearning_rate = 1e-3\n",
    "seed_a_fraction.toml": "seed = 1.5\n",
    "workers_negative.toml": 'collection = {backend = "subprocess", workers = -1}\n',
    "duplicate_key.toml": "gamma = 0.9\ngamma = 0.8\n",
    "gamma_above_one.toml": "gamma = 1.5\n",
    "hidden_empty.toml": "hidden_sizes = []\n",
    "mmd_negative_alpha.toml": "mmd = {alpha_min = -1.0}\n",
    "offpolicy_batch_zero.toml": "offpolicy = {batch_size = 0}\n",
    "unknown_collection_key.toml": 'collection = {backend = "local", wrokers = 2}\n',
    "lr_a_list.toml": "learning_rate = [0.1]\n",
    "ent_coef_nan.toml": "ent_coef = nan\n",
    "minibatch_negative.toml": "minibatch_size = -64\n",
    "epochs_a_bool.toml": "n_epochs = true\n",
}

CASES = {
    # train: numbers
    "num-envs-negative": [*TRAIN, "--num-envs", "-3"],
    "rollout-steps-zero": [*TRAIN, "--rollout-steps", "0"],
    "learning-rate-nan": [*TRAIN, "--learning-rate", "nan"],
    "learning-rate-inf": [*TRAIN, "--learning-rate", "inf"],
    "learning-rate-negative": [*TRAIN, "--learning-rate", "-3e-4"],
    "total-steps-negative": [*TRAIN, "--total-steps", "-5"],
    "total-steps-inf": [*TRAIN, "--total-steps", "inf"],
    "total-steps-nan": [*TRAIN, "--total-steps", "nan"],
    "checkpoint-every-zero": [*TRAIN, "--checkpoint-every", "0"],
    "keep-checkpoints-zero": [*TRAIN, "--keep-checkpoints", "0"],
    "eval-every-negative": [*TRAIN, "--eval-every", "-1"],
    "eval-episodes-zero": [*TRAIN, "--eval-every", "1", "--eval-episodes", "0"],
    "seeds-negative": [*TRAIN, "--seeds", "1", "-2"],
    "jobs-zero": [*TRAIN, "--seeds", "1", "2", "--jobs", "0"],
    "policy-lag-two": [*TRAIN, "--env-workers", "2", "--policy-lag", "2"],
    "redundancy-coef-negative": [*TRAIN, "--redundancy", "xcorr", "--redundancy-coef", "-1"],
    "out-cannot-be-created": [*TRAIN[:-1], "/proc/no_such_run_dir/run"],
    "out-under-a-file": [*TRAIN[:-1], "{root}/steps_a_string.toml/run"],
    # train: --set values
    "set-gamma-above-one": [*TRAIN, "--set", "gamma=1.5"],
    "set-gae-lambda-negative": [*TRAIN, "--set", "gae_lambda=-0.1"],
    "set-clip-range-zero": [*TRAIN, "--set", "clip_range=0"],
    "set-hidden-sizes-empty": [*TRAIN, "--set", "hidden_sizes=[]"],
    "set-hidden-sizes-zero": [*TRAIN, "--set", "hidden_sizes=[0]"],
    "set-minibatch-zero": [*TRAIN, "--set", "minibatch_size=0"],
    "set-epochs-zero": [*TRAIN, "--set", "n_epochs=0"],
    "set-max-grad-norm-negative": [*TRAIN, "--set", "max_grad_norm=-1"],
    "set-ent-coef-nan": [*TRAIN, "--set", "ent_coef=nan"],
    "set-torch-threads-zero": [*TRAIN, "--set", "torch_threads=0"],
    "set-device-unknown": [*TRAIN, "--set", "device=tpu"],
    "set-empty-key": [*TRAIN, "--set", "=1"],
    # train: envs and their arguments
    "env-empty": ["train", "--env", "", "--quiet", "--out", "{new}"],
    "env-factory-returns-no-env": ["train", "--env", "builtins:dict", "--quiet", "--out", "{new}"],
    "env-trailing-colon": ["train", "--env", "marljoint_envs.mock_v0:", "--quiet", "--out", "{new}"],
    "env-openspiel-no-game": ["train", "--env", "openspiel:", "--quiet", "--out", "{new}"],
    "env-openspiel-unknown-game": ["train", "--env", "openspiel:no_such_game", "--quiet", "--out", "{new}"],
    "openspiel-parameter-a-string": [*KUHN, "--env-kwargs", '{"players": "two"}'],
    "openspiel-parameter-a-bool": [*KUHN, "--env-kwargs", '{"players": true}'],
    "openspiel-parameter-in-the-name": [*TRAIN[:2], "openspiel:kuhn_poker(players=two)", *TRAIN[3:]],
    "env-kwargs-null": [*TRAIN, "--env-kwargs", "null"],
    "env-kwargs-empty": [*TRAIN, "--env-kwargs", ""],
    "env-kwargs-bad-value": [
        "train",
        "--env",
        "bucket_brigade_v0",
        "--env-kwargs",
        '{"num_agents": 0}',
        "--quiet",
        "--out",
        "{new}",
    ],
    "env-kwargs-unknown-scenario": [
        "train",
        "--env",
        "bucket_brigade_v0",
        "--env-kwargs",
        '{"scenario": "nope"}',
        "--quiet",
        "--out",
        "{new}",
    ],
    "wrap-bad-argument": [*TRAIN, "--wrap", "frame_stack_v1:stack_size=0"],
    "algorithm-unknown": [*TRAIN, "--algorithm", "nope"],
    "self-play-with-four-agents": [*BRIGADE, "--self-play", "mmd"],
    "exploitability-with-four-agents": [*BRIGADE, "--exploitability-every", "1"],
    "sweep-no-values": [*TRAIN, "--sweep", "learning_rate="],
    "sweep-unknown-setting": [*TRAIN, "--sweep", "no_such_setting=1,2"],
    # train: --config files
    **{f"config-{name.removesuffix('.toml')}": [*TRAIN, "--config", "{root}/" + name] for name in CONFIG_FILES},
    # without --total-steps, which the command line would set over the file's value
    "config-steps_a_string": [*TRAIN[:4], *TRAIN[6:], "--config", "{root}/steps_a_string.toml"],
    "config-a-directory": [*TRAIN, "--config", "{root}"],
    "offpolicy-config-batch-zero": [*TRAIN, "--algorithm", "qmix", "--config", "{root}/offpolicy_batch_zero.toml"],
    # train --resume of broken runs
    "resume-config-garbage": ["train", "--out", "{root}/garbage_config", "--resume", "--quiet"],
    "resume-checkpoint-truncated": ["train", "--out", "{root}/truncated_checkpoint", "--resume", "--quiet"],
    "resume-unknown-key-in-config": ["train", "--out", "{root}/unknown_key_config", "--resume", "--quiet"],
    # eval
    "eval-episodes-negative": ["eval", "{root}/run", "--episodes", "-1"],
    "eval-episodes-not-a-number": ["eval", "{root}/run", "--episodes", "abc"],
    "eval-checkpoint-a-text-file": ["eval", "{root}/run", "--checkpoint", "{root}/steps_a_string.toml"],
    "eval-checkpoint-truncated": ["eval", "{root}/truncated_checkpoint"],
    "eval-config-garbage": ["eval", "{root}/garbage_config"],
    "eval-no-checkpoints": ["eval", "{root}/no_checkpoints"],
    "eval-max-steps-zero": ["eval", "{root}/run", "--max-steps", "0"],
    "eval-num-envs-zero": ["eval", "{root}/run", "--num-envs", "0"],
    "eval-gif-in-missing-directory": ["eval", "{root}/run", "--gif", "{new}/deeper/x.gif"],
    "eval-fps-zero": ["eval", "{root}/run", "--gif", "{root}/x.gif", "--fps", "0"],
    "eval-against-unknown": ["eval", "{root}/run", "--against", "nope"],
    # export
    "export-unknown-format": ["export", "{root}/run", "--format", "nope"],
    "export-not-a-run": ["export", "{new}"],
    "export-missing-checkpoint": ["export", "{root}/run", "--checkpoint", "{root}/missing.pt"],
    "export-config-garbage": ["export", "{root}/garbage_config"],
    # plot
    "plot-metrics-garbage": ["plot", "{root}/garbage_metrics", "--out", "{new}/x.png"],
    "plot-metrics-empty": ["plot", "{root}/empty_metrics", "--out", "{new}/x.png"],
    "plot-window-zero": ["plot", "{root}/run", "--window", "0", "--out", "{new}/x.png"],
    "plot-labels-count": ["plot", "{root}/run", "--labels", "a", "b", "--out", "{new}/x.png"],
    "plot-x-unknown": ["plot", "{root}/run", "--x", "nope", "--out", "{new}/x.png"],
    # psro and nfsp
    "psro-meta-solver-unknown": [*PSRO, "--meta-solver", "nope"],
    "psro-oracle-unknown": [*PSRO, "--oracle", "nope"],
    "psro-episodes-per-entry-zero": [*PSRO, "--episodes-per-entry", "0"],
    "psro-seconds-negative": [*PSRO, "--seconds", "-1"],
    "psro-resume-nothing": [*PSRO, "--resume"],
    "psro-resume-garbage-checkpoint": ["psro", "--out", "{root}/garbage_psro", "--resume", "--quiet"],
    "nfsp-anticipatory-above-one": [*NFSP, "--anticipatory", "1.5"],
    "nfsp-learning-rate-zero": [*NFSP, "--learning-rate", "0"],
    "nfsp-resume-garbage-checkpoint": ["nfsp", "--out", "{root}/garbage_nfsp", "--resume", "--quiet"],
    # tune
    "tune-trials-zero": [*TUNE, "--trials", "0", "--param", "learning_rate=log:1e-4:1e-2"],
    "tune-unknown-setting": [*TUNE, "--trials", "1", "--param", "no_such_setting=1:2"],
    "tune-log-of-zero": [*TUNE, "--trials", "1", "--param", "learning_rate=log:0:1e-2"],
    "tune-range-reversed": [*TUNE, "--trials", "1", "--param", "learning_rate=log:1e-2:1e-4"],
}


def _snapshot(directory):
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """One finished tiny run, the config files above and broken copies of the run, shared by every case."""
    root = tmp_path_factory.mktemp("input_sweep")
    assert run_cli(train_args(root / "run", tiny_config(root), 2 * 64)) == 0
    for name, text in CONFIG_FILES.items():
        (root / name).write_text(text)
    broken = {
        "garbage_config": lambda run: (run / "config.toml").write_bytes(b"\x00\xff not toml"),
        "unknown_key_config": lambda run: (run / "config.toml").write_text(
            (run / "config.toml").read_text() + "no_such_setting = 1\n"
        ),
        "truncated_checkpoint": lambda run: [p.write_bytes(p.read_bytes()[:100]) for p in run.glob("checkpoints/*")],
        "no_checkpoints": lambda run: shutil.rmtree(run / "checkpoints"),
        "garbage_metrics": lambda run: (run / "metrics.csv").write_bytes(b"\x00\x01,,,\n\xff\xfe"),
        "empty_metrics": lambda run: (run / "metrics.csv").write_text(""),
    }
    for name, damage in broken.items():
        shutil.copytree(root / "run", root / name)
        damage(root / name)
    for name in ("garbage_psro", "garbage_nfsp"):
        (root / name).mkdir()
        (root / name / "config.toml").write_text('env = "kuhn_poker_v0"\n')
        (root / name / f"{name.removeprefix('garbage_')}.pt").write_bytes(b"PK\x03\x04 not a checkpoint")
    return root


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_ends_in_one_line_and_changes_nothing(name, place, tmp_path, capfd):
    args = [a.replace("{root}", str(place)).replace("{new}", str(tmp_path / "new")) for a in CASES[name]]
    before = _snapshot(place)
    status = run_cli(args)
    err = capfd.readouterr().err.strip()
    assert status == 2, f"{name}: exit {status}, stderr: {err[-2000:]}"
    assert err and len(err.splitlines()) == 1, err
    assert err.startswith("marljoint") and "Traceback" not in err, err
    assert _snapshot(place) == before
    assert not (tmp_path / "new").exists()


def test_the_sweep_has_at_least_sixty_cases():
    assert len(CASES) >= 60


def test_an_env_worker_lost_outside_the_run_loop_is_one_line(tmp_path, monkeypatch, capfd):
    """Where no run loop turns a dead worker into a failure with a checkpoint (a resume restoring its workers, say),
    the command still ends in one line naming the worker."""
    from marljoint.env import EnvWorkerDied
    from marljoint.run import train

    def died(*args, **kwargs):
        raise EnvWorkerDied(0, 4242, (0, 1), -9)

    monkeypatch.setattr(train, "train_run", died)
    assert run_cli([*TRAIN[:-1], str(tmp_path / "run"), "--env-workers", "2"]) == 2
    assert capfd.readouterr().err.strip() == (
        "marljoint train: error: env worker 0 (pid 4242, env copy 0) was killed by SIGKILL; its env copies are lost "
        "and the env is closed"
    )
