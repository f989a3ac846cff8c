"""Guards of marljoint train and eval: divergence stops a run and keeps its last good checkpoint, checkpoints with
non-finite weights are refused, sizes are checked before anything large is built, and a setting given twice with
different values is refused. Every refusal: exit status 2, one line, no traceback, nothing on disk changed."""

from __future__ import annotations

import csv

import pytest
from _product_helpers import run_cli
from pettingzoo.utils.wrappers import BaseParallelWrapper

from marljoint.checkpoint import atomic_torch_save, list_checkpoints, load_checkpoint, non_finite_weights
from marljoint.run import memory
from marljoint.run.errors import RunError
from marljoint.run.evaluate import load_run
from marljoint_envs import mock_v0

HUGE_REWARD = 3e38
"""Finite, so the env adapter passes it on, but two of them in a row overflow a float32 return."""


class _HugeRewardsAfter(BaseParallelWrapper):
    def __init__(self, env, after: int) -> None:
        super().__init__(env)
        self.after, self.steps = after, 0

    def step(self, actions):
        obs, rewards, terminated, truncated, infos = super().step(actions)
        self.steps += 1
        if self.steps > self.after:
            rewards = {agent: HUGE_REWARD for agent in rewards}
        return obs, rewards, terminated, truncated, infos


def huge_rewards_env(after: int = 40):
    """mock_v0 whose rewards overflow after ``after`` steps of each copy (iteration 3 of 16-step rollouts)."""
    return _HugeRewardsAfter(mock_v0.parallel_env(), after)


TRAIN = ["train", "--env", "mock_v0", "--quiet", "--total-steps", "64", "--num-envs", "2"]
TINY = ["--set", "rollout_steps=16", "--set", "minibatch_size=32", "--set", "hidden_sizes=[16]", "--set", "n_epochs=2"]


def _snapshot(directory):
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err and len(err.splitlines()) == 1, err
    assert err.startswith("marljoint") and "Traceback" not in err, err
    return err


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
def test_a_diverging_run_stops_with_one_line_and_keeps_its_last_good_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--env", "test_product_guards:huge_rewards_env", "--env-kwargs", "{}", "--quiet"]
    args += ["--num-envs", "2", "--total-steps", "320", "--checkpoint-every", "1", "--out", str(out), *TINY]
    assert run_cli(args) == 2
    err = _one_line(capsys)
    assert "training diverged at iteration 3:" in err and "lower learning_rate" in err, err
    assert "_loss of agent 'agent_" in err and "ckpt_0000002.pt (iteration 2) holds the last good weights" in err
    paths = list_checkpoints(out / "checkpoints")
    assert [p.name for p in paths] == ["ckpt_0000001.pt", "ckpt_0000002.pt"]
    for path in paths:
        assert non_finite_weights(load_checkpoint(path)["trainer"]) is None
    with open(out / "metrics.csv") as f:
        assert [int(row["iteration"]) for row in csv.DictReader(f)] == [1, 2]
    run = load_run(out)  # the last good checkpoint loads and acts
    assert run.checkpoint == paths[-1]
    run.close()


def test_eval_load_run_and_resume_refuse_a_checkpoint_with_non_finite_weights(tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli([*TRAIN, "--out", str(out), *TINY]) == 0
    good = list_checkpoints(out / "checkpoints")[-1]
    state = load_checkpoint(good)
    name = next(iter(state["trainer"]["policies"][0]))
    state["trainer"]["policies"][0][name][0] = float("nan")
    bad = out / "checkpoints" / "ckpt_0000009.pt"
    atomic_torch_save(state, bad)
    capsys.readouterr()
    before = _snapshot(out)
    assert run_cli(["eval", str(out)]) == 2  # at once: not after a million steps of a NaN policy
    err = _one_line(capsys)
    assert f"checkpoint {bad} holds non-finite weights (policies.0.{name} is nan)" in err, err
    assert "--checkpoint FILE" in err
    with pytest.raises(RunError, match=r"holds non-finite weights \(policies\.0\.\S+ is nan\)"):
        load_run(out)
    assert load_run(out, checkpoint=good).checkpoint == good
    assert run_cli(["train", "--out", str(out), "--resume", "--total-steps", "128", "--quiet"]) == 2
    assert "holds non-finite weights" in _one_line(capsys)
    assert _snapshot(out) == before


def _refused(args, tmp_path, capsys) -> str:
    """Runs a refused start in an empty directory; returns its one line after checking that nothing was written."""
    place = tmp_path / "place"
    place.mkdir()
    assert run_cli([a.replace("{new}", str(place / "new")) for a in args]) == 2
    err = _one_line(capsys)
    assert not any(place.iterdir()), list(place.iterdir())
    return err


CASES = {
    "infinite-learning-rate": (
        [*TRAIN, "--out", "{new}", "--set", "learning_rate=inf"],
        "learning_rate must be finite",
    ),
    "diverging-in-the-first-iteration": (
        [*TRAIN, "--out", "{new}", "--set", "learning_rate=1e30"],
        "training diverged at iteration 1",
    ),
    "minibatch-above-the-batch": (
        [*TRAIN, "--out", "{new}", "--set", "rollout_steps=32", "--set", "minibatch_size=100000"],
        "minibatch_size = 100000 is more than the 64 rows of an update",
    ),
    "set-and-option": (
        [*TRAIN, "--out", "{new}", "--set", "num_envs=3"],
        "--set num_envs=3 and --num-envs 2 give num_envs two values",
    ),
    "set-twice": (
        [*TRAIN, "--out", "{new}", "--set", "gamma=0.9", "--set", "gamma=0.8"],
        "--set gamma=0.9 and --set gamma=0.8 give gamma two values",
    ),
    "set-env-kwargs-and-option": (
        [*TRAIN, "--out", "{new}", "--set", "env_kwargs={obs_dim = 3}", "--env-kwargs", '{"obs_dim": 5}'],
        '--set env_kwargs={"obs_dim":3} and --env-kwargs {"obs_dim":5} give env_kwargs two values',
    ),
    "set-seed-and-seeds": (
        [*TRAIN, "--out", "{new}", "--set", "seed=4", "--seeds", "1", "2"],
        "--set seed=4 and --seeds 1 2 give seed two values",
    ),
    "set-collection-and-env-workers": (
        [*TRAIN, "--out", "{new}", "--set", 'collection={backend = "local"}', "--env-workers", "2"],
        "both choose how to collect",
    ),
    "a-million-env-copies": (
        ["train", "--out", "{new}", "--quiet", "--num-envs", "1000000"],
        "x 1,000,000 env copies x 4 agents needs",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_refused_start_gets_one_line_exit_2_and_writes_nothing(name, tmp_path, capsys):
    args, expected = CASES[name]
    assert expected in _refused(args, tmp_path, capsys)


def test_a_run_too_large_for_the_memory_is_refused_before_its_env_copies_are_built(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(memory, "available_memory", lambda: 2**30)
    built = []
    monkeypatch.setattr(mock_v0.MockEnv, "__init__", _counting(mock_v0.MockEnv.__init__, built))
    err = _refused([*TRAIN[:-2], "--out", "{new}", "--num-envs", "1000000", *TINY], tmp_path, capsys)
    assert "x 1,000,000 env copies x 2 agents needs" in err and "but only 1.0 GiB is available" in err, err
    assert "lower rollout_steps or num_envs" in err
    assert len(built) <= 3  # the probe copies, not a million


def _counting(init, built):
    def counted(self, *args, **kwargs):
        built.append(1)
        init(self, *args, **kwargs)

    return counted


def test_same_value_twice_is_taken_once_and_a_config_override_is_noted_once(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text("num_envs = 3\nrollout_steps = 16\nn_epochs = 1\nhidden_sizes = [8]\n")
    args = ["train", "--env", "mock_v0", "--total-steps", "32", "--config", str(config), "--out", str(tmp_path / "r")]
    assert run_cli([*args, "--num-envs", "2", "--set", "num_envs=2", "--set", "gamma=0.9", "--set", "gamma=0.9"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: the command line")]
    assert notes == [f"note: the command line overrides {config}: num_envs 3 -> 2"]
    text = (tmp_path / "r" / "config.toml").read_text()
    assert "num_envs = 2" in text and "gamma = 0.9" in text


def test_a_long_build_of_env_copies_is_announced(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(memory, "measure_env_copy", lambda env_fn, seed=0: (1000, 1.0))
    args = ["train", "--env", "mock_v0", "--total-steps", "32", "--num-envs", "32", "--out", str(tmp_path / "r")]
    assert run_cli([*args, *TINY[:2], "--set", "n_epochs=1"]) == 0
    assert "building 32 env copies: about 32 s (1000.0 ms each)" in capsys.readouterr().err
