"""Distributed PSRO: best responses and meta-game entries as Ray tasks, with the same result as running the same
tasks in this process."""

import numpy as np
import pytest
import torch

from marljoint import JointTrainerConfig
from marljoint.best_response import PSRO, PsroConfig
from marljoint.best_response.tasks import chunk_envs, split_profiles
from marljoint.distributed import TaskEngine
from marljoint_envs import bucket_brigade_v0, matrix_game_v0

pytestmark = pytest.mark.usefixtures("ray_local")

SMALL_PPO = JointTrainerConfig(
    num_envs=6,
    rollout_steps=8,
    learning_rate=1e-2,
    n_epochs=2,
    minibatch_size=48,
    hidden_sizes=(16,),
    share_parameters=False,
)


def small_brigade():
    return bucket_brigade_v0.parallel_env(scenario="default", num_houses=4, num_agents=3, max_nights=6, min_nights=2)


def biased_rps():
    return matrix_game_v0.parallel_env(game="biased_rps")


def parameters_of(psro):
    return [
        p.detach().clone() for population in psro.populations for m in population[1:] for p in m.network.parameters()
    ]


def run(env_fn, engine, **changes):
    settings = dict(
        iterations=2,
        meta_solver="regret_matching",
        br_steps=96,
        trainer=SMALL_PPO,
        evaluation="simulation",
        episodes_per_entry=2,
        eval_num_envs=8,
        task_split=2,
        engine=engine,
        seed=3,
    )
    config = PsroConfig(**{**settings, **changes})
    psro = PSRO(env_fn, config)
    psro.run()
    return psro


@pytest.mark.parametrize("env_fn", [small_brigade, biased_rps], ids=["bucket-brigade-3p", "biased-rps"])
def test_ray_tasks_give_the_same_psro_run_as_the_same_tasks_in_process(env_fn):
    on_ray = run(env_fn, "ray")
    here = run(env_fn, "local")
    assert on_ray.meta_game.shape == here.meta_game.shape == (3,) * on_ray.num_players
    for a, b in zip(on_ray.meta_game.payoffs, here.meta_game.payoffs):
        assert np.isfinite(a).all()
        np.testing.assert_array_equal(a, b)
    for a, b in zip(on_ray.strategies, here.strategies):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(parameters_of(on_ray), parameters_of(here)):
        assert torch.equal(a, b)
    assert on_ray.history[-1]["br_env_steps"] == here.history[-1]["br_env_steps"] > 0


def test_the_task_split_is_deterministic_and_saved_with_the_run(tmp_path):
    first = run(biased_rps, "ray", iterations=1)
    first.save(tmp_path)
    resumed = PSRO.load(tmp_path, biased_rps)
    assert resumed.config.task_split == 2 and resumed.config.engine == "ray"
    resumed.run(iterations=2)
    straight = run(biased_rps, "ray")
    for a, b in zip(straight.meta_game.payoffs, resumed.meta_game.payoffs):
        np.testing.assert_array_equal(a, b)


def test_split_profiles_and_chunk_envs():
    profiles = np.arange(10).reshape(5, 2)
    pieces = split_profiles(profiles, 2)
    assert [len(p) for p in pieces] == [2, 3] or [len(p) for p in pieces] == [3, 2]
    np.testing.assert_array_equal(np.concatenate(pieces), profiles)
    assert len(split_profiles(profiles[:1], 4)) == 1 and split_profiles(profiles[:0], 4) == []
    assert chunk_envs(32, 3) == 11 and chunk_envs(1, 4) == 1


def power(base, exponent):
    return base**exponent


def test_task_engine_runs_calls_in_order_on_both_engines():
    calls = [(k, 10) for k in range(4)]
    assert TaskEngine("ray").map(power, calls) == TaskEngine("local").map(power, calls) == [k**10 for k in range(4)]
    with pytest.raises(ValueError, match=r"engine='spark' is not one of \['local', 'ray'\]"):
        TaskEngine("spark")


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"task_split": -1}, "task_split must be an integer >= 0"),
        ({"engine": "dask"}, r"engine='dask' is not one of \['ray', 'local'\]"),
    ],
)
def test_bad_distributed_psro_settings_are_refused(changes, match):
    with pytest.raises(ValueError, match=match):
        PsroConfig(**changes)


def test_marljoint_psro_num_workers_runs_ray_tasks_and_saves_the_split(tmp_path):
    import argparse
    import csv

    from marljoint.cli.best_response import register

    def run_cli(out, *extra):
        parser = argparse.ArgumentParser(prog="marljoint")
        register(parser.add_subparsers(dest="command", required=True))
        argv = ["psro", "--env", "matrix_game_v0", "--env-kwargs", '{"game": "biased_rps"}', "--iterations", "2"]
        args = parser.parse_args([*argv, "--br-steps", "256", "--num-envs", "8", "--out", str(out), *extra])
        assert args.handler(args) == 0
        with (out / "metrics.csv").open() as f:
            return [(row["exploitability"], row["meta_nash_conv"]) for row in csv.DictReader(f)]

    rows = run_cli(tmp_path / "ray", "--task-split", "2")
    assert len(rows) == 3
    from marljoint.run.spec import load_run_spec

    config = load_run_spec(tmp_path / "ray").psro  # the run's settings, as config.toml holds them
    assert config.task_split == 2 and config.engine == "ray"
