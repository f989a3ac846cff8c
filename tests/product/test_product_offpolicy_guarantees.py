"""Off-policy runs (vdn, qmix, masac, maddpg) give PPO's guarantees: a diverged checkpoint is refused wherever it
is used, a checkpoint is checked against the env before use, memory is estimated before anything large is
allocated, every setting given is used or refused, and settings the run cannot honour are refused up front; each
refusal is one line and exit 2."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from _product_helpers import run_cli

from marljoint.checkpoint import atomic_torch_save, list_checkpoints, load_checkpoint
from marljoint.run import memory
from marljoint.run.errors import RunError
from marljoint.trust import resign

ALGORITHMS = ("vdn", "qmix", "masac", "maddpg")
TINY = ["--env", "mock_v0", "--env-kwargs", json.dumps({"max_cycles": 5}), "--num-envs", "2", "--rollout-steps", "8"]
TINY_OFFPOLICY = "offpolicy={learning_starts=16, batch_size=8}"


def _train(out, algorithm, *extra, total=64, offpolicy="offpolicy={learning_starts=16, batch_size=8}"):
    args = ["train", *TINY, "--algorithm", algorithm, "--total-steps", str(total), "--out", str(out), "--quiet"]
    return run_cli([*args, "--set", offpolicy, "--set", "hidden_sizes=[8]", "--checkpoint-every", "2", *extra])


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _newest(run_dir):
    return list_checkpoints(run_dir / "checkpoints")[-1]


def _rewrite(run_dir, change):
    path = _newest(run_dir)
    state = load_checkpoint(path)
    change(state)
    atomic_torch_save(state, path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One tiny finished run per off-policy algorithm (4 iterations of 2 copies x 8 steps)."""
    root = tmp_path_factory.mktemp("offpolicy")
    for algorithm in ALGORITHMS:
        assert _train(root / algorithm, algorithm) == 0
    return root


def _copy(runs, algorithm, tmp_path):
    return shutil.copytree(runs / algorithm, tmp_path / algorithm)


def _first_float(state):
    """The first floating-point tensor of a nested state (its networks' first weight)."""
    values = state.values() if isinstance(state, dict) else state if isinstance(state, (list, tuple)) else [state]
    for value in values:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value
        if isinstance(value, (dict, list, tuple)):
            found = _first_float(value)
            if found is not None:
                return found
    return None


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_diverged_checkpoint_is_refused_by_eval_load_run_and_resume(runs, algorithm, tmp_path, capsys):
    from marljoint import load_run

    run_dir = _copy(runs, algorithm, tmp_path)
    _rewrite(run_dir, lambda state: _first_float(state["trainer"]["algorithm"]).fill_(float("nan")))
    message = r"holds non-finite weights \(algorithm\..+ is nan\): the run diverged"
    assert run_cli(["eval", str(run_dir), "--episodes", "1"]) == 2
    assert "non-finite weights (algorithm." in _one_line(capsys)
    with pytest.raises(RunError, match=message):
        load_run(run_dir)
    assert run_cli(["train", "--out", str(run_dir), "--resume", "--total-steps", "128", "--quiet"]) == 2
    assert "non-finite weights (algorithm." in _one_line(capsys)


def test_a_replay_buffer_of_another_observation_width_or_dtype_is_refused_on_resume(runs, tmp_path, capsys):
    run_dir = _copy(runs, "qmix", tmp_path)
    resume = ["train", "--out", str(run_dir), "--resume", "--total-steps", "128", "--quiet"]

    def wider(state):
        saved = state["trainer"]["buffer"]["transitions"]
        saved["obs"] = tuple(torch.zeros((*o.shape[:-1], o.shape[-1] + 1)) for o in saved["obs"])

    _rewrite(run_dir, wider)
    assert run_cli(resume) == 2
    err = _one_line(capsys)
    assert "replay buffer holds obs of group 'agent_0' of shape (2, 5) torch.float32" in err, err
    assert "but this env's are (2, 4) torch.float32" in err


def test_a_replay_buffer_of_another_dtype_is_refused_on_resume(runs, tmp_path, capsys):
    run_dir = _copy(runs, "masac", tmp_path)

    def doubled(state):
        saved = state["trainer"]["buffer"]["transitions"]
        saved["next_obs"] = tuple(o.double() for o in saved["next_obs"])

    _rewrite(run_dir, doubled)
    assert run_cli(["train", "--out", str(run_dir), "--resume", "--total-steps", "128", "--quiet"]) == 2
    assert "holds next_obs of group 'agent_0' of shape (2, 4) torch.float64" in _one_line(capsys)


@pytest.mark.parametrize(
    ("algorithm", "offpolicy", "parts"),
    [
        ("qmix", "offpolicy={learning_starts=16, buffer_size=100000000}", "the replay buffer of 100,000,000"),
        ("masac", "offpolicy={learning_starts=16, buffer_size=100000000}", "the replay buffer of 100,000,000"),
        ("qmix", "offpolicy={learning_starts=16, mixer_embed_dim=10000000}", "the networks 38.0 GiB"),
    ],
)
def test_a_run_larger_than_memory_is_refused_before_allocating(
    monkeypatch, tmp_path, capsys, algorithm, offpolicy, parts
):
    monkeypatch.setattr(memory, "available_memory", lambda: 2**30)
    assert _train(tmp_path / "run", algorithm, offpolicy=offpolicy) == 2
    err = _one_line(capsys)
    assert f"the {algorithm} run needs about" in err and "GiB of memory, but only 1.0 GiB is available" in err, err
    assert parts in err and "lower offpolicy.buffer_size" in err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_the_estimate_counts_the_replay_buffer_and_every_network():
    from marljoint import PettingZooJointEnv
    from marljoint.offpolicy import OffPolicyConfig
    from marljoint_envs import mock_v0

    env = PettingZooJointEnv(lambda: mock_v0.parallel_env(num_agents=2), num_envs=1)
    small = memory.estimate_offpolicy_memory(env.spec, OffPolicyConfig(algorithm="qmix", num_envs=1))
    # obs and next obs 2 x [2, 4] float32, masks and next masks 2 x [2, 3] bool, actions [2] int64, rewards [2]
    # float32, 6 x [2] bool
    assert small.transition == 2 * 2 * 4 * 4 + 2 * 6 + 16 + 8 + 12
    assert small.replay == 2 * 50_000 * small.transition
    wide = memory.estimate_offpolicy_memory(
        env.spec, OffPolicyConfig(algorithm="qmix", num_envs=1, mixer_embed_dim=1024), per_copy=10
    )
    assert wide.networks > 10 * small.networks and wide.batch > small.batch and wide.env_copies == 10


def test_learning_rate_is_used_by_the_value_methods_and_refused_where_ignored(tmp_path, capsys):
    assert _train(tmp_path / "qmix", "qmix", "--learning-rate", "0.01") == 0
    state = load_checkpoint(_newest(tmp_path / "qmix"))["trainer"]
    assert state["config"]["learning_rate"] == 0.01
    assert all(group["lr"] == 0.01 for o in state["optimizers"] for group in o["param_groups"])
    capsys.readouterr()
    both = "offpolicy={learning_starts=16, batch_size=8, learning_rate=0.001}"
    assert _train(tmp_path / "both", "qmix", "--learning-rate", "0.01", offpolicy=both) == 2
    assert "learning_rate = 0.01 and offpolicy.learning_rate = 0.001 both set" in _one_line(capsys)
    assert _train(tmp_path / "masac", "masac", "--learning-rate", "0.01") == 2
    assert "masac does not read learning_rate (= 0.01); set offpolicy.sac.actor_lr, offpolicy.sac.critic_lr" in (
        _one_line(capsys)
    )
    assert _train(tmp_path / "maddpg", "maddpg", offpolicy=both) == 2
    assert "maddpg does not read offpolicy.learning_rate (= 0.001); set offpolicy.sac.actor_lr" in _one_line(capsys)


@pytest.mark.parametrize("algorithm", ["vdn", "qmix"])
@pytest.mark.parametrize("env", ["kuhn_poker_v0", "openspiel:tic_tac_toe"])
def test_value_decomposition_on_a_zero_sum_game_is_refused(algorithm, env, tmp_path, capsys):
    if env.startswith("openspiel:"):
        pytest.importorskip("pyspiel")
    args = ["train", "--env", env, "--algorithm", algorithm, "--out", str(tmp_path / "run"), "--quiet"]
    assert (
        run_cli([*args, "--total-steps", "64", "--num-envs", "2", "--rollout-steps", "8", "--set", TINY_OFFPOLICY]) == 2
    )
    err = _one_line(capsys)
    assert f"env {env!r} is a zero-sum game, so the team reward {algorithm} learns" in err
    assert "--algorithm mappo or ippo (self-play), or run marljoint psro or nfsp" in err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_value_decomposition_on_a_cooperative_known_game_trains_and_evaluates(tmp_path):
    args = ["train", "--env", "matrix_game_v0", "--env-kwargs", json.dumps({"game": "coordination"})]
    args += ["--algorithm", "vdn", "--out", str(tmp_path / "run"), "--quiet", "--eval-every", "2"]
    assert (
        run_cli([*args, "--total-steps", "64", "--num-envs", "2", "--rollout-steps", "8", "--set", TINY_OFFPOLICY]) == 0
    )
    assert "eval/episode_return_mean" in (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0]


@pytest.mark.parametrize("algorithm", ["qmix", "masac"])
def test_eval_every_measures_returns_and_exploitability_every_is_refused_up_front(algorithm, tmp_path, capsys):
    assert _train(tmp_path / "eval", algorithm, "--eval-every", "2") == 0
    lines = (tmp_path / "eval" / "metrics.csv").read_text().splitlines()
    assert "eval/episode_return_mean" in lines[0].split(",") and len(lines) == 5
    capsys.readouterr()
    assert _train(tmp_path / "exploit", algorithm, "--exploitability-every", "2") == 2
    assert f"exploitability_every = 2 scores each seat's policy, which a {algorithm} run does not have" in _one_line(
        capsys
    )
    assert not (tmp_path / "exploit").exists()


@pytest.mark.parametrize("algorithm", ["masac", "maddpg"])
def test_exporting_an_actor_critic_run_names_the_real_reason(runs, algorithm, tmp_path, capsys):
    assert run_cli(["export", str(runs / algorithm), "--out", str(tmp_path / "exported")]) == 2
    err = _one_line(capsys)
    assert f"a {algorithm} run's actors are its own networks (trained against centralised critics)" in err, err
    assert "export supports mappo and ippo runs" in err and not (tmp_path / "exported").exists()


def test_learning_starts_beyond_the_run_is_refused_naming_both_numbers(tmp_path, capsys):
    assert _train(tmp_path / "late", "vdn", offpolicy="offpolicy={learning_starts=65, batch_size=8}") == 2
    err = _one_line(capsys)
    assert "offpolicy.learning_starts = 65 is more than the 64 joint transitions this run stores" in err, err
    assert "(total_steps = 64, in iterations of 16)" in err and not (tmp_path / "late").exists()
    small = "offpolicy={learning_starts=32, batch_size=8, buffer_size=16}"
    assert _train(tmp_path / "small", "vdn", total=128, offpolicy=small) == 2
    assert "learning_starts=32 exceeds buffer_size=16: the buffer never holds that many" in _one_line(capsys)
    assert _train(tmp_path / "fits", "vdn", offpolicy="offpolicy={learning_starts=64, batch_size=8}") == 0


def test_resume_trust_snapshot_restores_a_foreign_env_snapshot(runs, tmp_path, capsys):
    run_dir = _copy(runs, "qmix", tmp_path)

    def foreign(state):
        state["env"] = {**state["env"], "env": resign(state["env"]["env"], key=b"someone else's key 32 bytes long")}

    _rewrite(run_dir, foreign)
    resume = ["train", "--out", str(run_dir), "--resume", "--total-steps", "96", "--quiet"]
    assert run_cli(resume) == 2
    assert "--trust-snapshot" in _one_line(capsys)
    assert run_cli([*resume, "--trust-snapshot"]) == 0
    assert load_checkpoint(_newest(run_dir))["trainer"]["env_steps"] == 96
