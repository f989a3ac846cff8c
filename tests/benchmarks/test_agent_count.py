"""Keeps benchmarks/agent_count.py runnable: every env family builds at 3 and 6 agents, rows carry what the report
reads, the report's cells are the mean ± 95% CI over seeds, ``--set`` is checked as ``marljoint train --set`` checks
it, and (``-m slow``) a whole tiny run of every method writes its rows and resumes (nothing about learning is
asserted: that is what the benchmark measures)."""

import csv
import sys

import numpy as np
import pytest
from _benchmark_module import benchmark_module

pytest.importorskip("mpe2")
pytest.importorskip("pettingzoo.sisl")


@pytest.fixture(scope="module")
def bench():
    with benchmark_module("agent_count") as module:
        yield module


FIELDS = ["env", "agents", "method", "seed", "checkpoint", "env_steps", "train_seconds", "cpu_seconds", "episodes",
          "return_mean", "return_std"]


def write_rows(path, rows):
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow(dict(zip(FIELDS, row)))


@pytest.mark.parametrize("agents", [3, 6])
@pytest.mark.parametrize("name", ["simple_spread", "pursuit", "bucket_brigade"])
def test_every_family_builds_with_the_agent_count_it_is_given(bench, name, agents):
    case = bench.Case(name, agents)
    env = case.task.factory()
    assert len(env.possible_agents) == agents
    obs, _ = env.reset(seed=0)
    assert set(obs) == set(env.possible_agents)
    env.close()


def test_the_families_are_the_three_the_benchmark_names(bench):
    assert list(bench.FAMILIES) == ["simple_spread", "pursuit", "bucket_brigade"]
    assert bench.Case("simple_spread", 6).env_kwargs == {"N": 6, "max_cycles": 25}
    assert bench.Case("bucket_brigade", 6).env_kwargs == {"scenario": "easy", "num_agents": 6}


def test_a_row_holds_the_run_its_checkpoint_and_the_training_clock(bench):
    clock = bench.Clock()
    clock.wall, clock.cpu = 12.34, 20.06
    row = bench.result_row(bench.Case("pursuit", 6), "sb3", 2, 250_000, 262_144, clock, np.array([1.0, 3.0]))
    assert list(row) == FIELDS == list(bench.FIELDS)
    assert row == {"env": "pursuit", "agents": 6, "method": "sb3", "seed": 2, "checkpoint": 250_000,
                   "env_steps": 262_144, "train_seconds": 12.3, "cpu_seconds": 20.1, "episodes": 2,
                   "return_mean": 2.0, "return_std": 1.0}
    assert bench.row_key({k: str(v) for k, v in row.items()}) == ("pursuit", 6, "sb3", 2, 250_000)


def test_the_clock_counts_only_what_runs_inside_it(bench):
    clock = bench.Clock()
    with clock:
        sum(range(200_000))
    wall = clock.wall
    sum(range(2_000_000))  # outside: not counted
    assert 0 < wall == clock.wall and clock.cpu >= 0


def test_a_rollout_that_passes_several_checkpoints_reports_each(bench):
    assert bench._crossed((250, 500, 1000), 0, 4096) == [250, 500, 1000]
    assert bench._crossed((250, 500, 1000), 250, 400) == []
    assert bench._crossed((250, 500, 1000), 250, 500) == [500]


def test_the_plan_evaluates_at_the_checkpoints_and_the_budget(bench):
    assert bench.plan_from(1000, [500, 250, 500], 5).points == (250, 500, 1000)
    with pytest.raises(ValueError, match=r"--checkpoints \[2000\] lie outside 1..--steps 1000"):
        bench.plan_from(1000, [250, 2000], 5)
    with pytest.raises(ValueError, match="must be at least 1"):
        bench.plan_from(1000, [250], 0)


def test_set_reads_values_as_toml_and_checks_them_as_marljoint_train_does(bench):
    assert bench.parse_changes(["n_epochs=4", "ent_coef=0.0", "centralized_critic=true"]) == {
        "n_epochs": 4, "ent_coef": 0.0, "centralized_critic": True}
    with pytest.raises(ValueError, match="unknown config key") as bad_key:
        bench.parse_changes(["n_epoch=4"])
    assert "\n" not in str(bad_key.value) and "n_epoch" in str(bad_key.value)
    with pytest.raises(ValueError, match="--set takes KEY=VALUE, got 'n_epochs'"):
        bench.parse_changes(["n_epochs"])
    with pytest.raises(ValueError, match="the value is not TOML"):
        bench.parse_changes(["activation=tanh"])
    with pytest.raises(ValueError, match="--set seed: the benchmark sets these itself"):
        bench.parse_changes(["seed=3"])
    with pytest.raises(ValueError, match="invalid trainer setting"):
        bench.parse_changes(["n_epochs=0"])


def test_a_bad_set_stops_the_command_with_one_line(bench, capsys):
    with pytest.raises(SystemExit) as stopped:
        bench.main(["--set", "n_epoch=4", "--out", "unused.csv"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("agent_count.py: error: --set: unknown config key")


def test_an_ablation_is_its_own_method_and_its_own_run_directory(bench):
    assert bench.run_label("marljoint", {"n_epochs": 4}) == "marljoint[n_epochs=4]"
    assert bench.run_label("sb3", {"n_epochs": 4}) == "sb3"
    name = bench.run_dir_name(bench.Case("simple_spread", 6), "marljoint[n_epochs=4,ent_coef=0.0]", 1)
    assert name == "simple_spread-n6-marljoint_n_epochs=4_ent_coef=0.0_-seed1"


def test_the_report_gives_the_mean_and_95_ci_over_seeds_at_each_checkpoint(bench, tmp_path):
    path = tmp_path / "runs.csv"
    rows = [("simple_spread", 3, "random", 0, 0, 0, 0, 0, 5, -30.0, 1)]
    for seed, value in enumerate([1.0, 2.0, 3.0]):
        rows.append(("simple_spread", 3, "marljoint", seed, 100, 4096, 10, 20, 5, value, 0))
        rows.append(("simple_spread", 3, "marljoint", seed, 200, 8192, 20 + seed, 40, 5, value + 10, 0))
    rows.append(("simple_spread", 3, "sb3", 0, 200, 32768, 50, 60, 5, -5.0, 0))
    rows.append(("bucket_brigade", 6, "marljoint[n_epochs=4]", 0, 200, 8192, 5, 5, 5, 7.0, 0))
    write_rows(path, rows)
    table = bench.report([path])
    assert "### simple_spread, 3 agents" in table and "### bucket_brigade, 6 agents" in table
    assert "uniformly random: -30" in table
    assert "| method | 100 steps | 200 steps | rise 100 → 200 | s/run | CPU s/run |" in table
    assert "| marljoint | 2 ± 2.48 (3) | 12 ± 2.48 (3) | +10 ± 0 (3): rises | 21 | 40 |" in table
    assert "| sb3 | – | -5 (1) | – | 50 | 60 |" in table
    assert "| marljoint[n_epochs=4] | 7 (1) | – | 5 | 5 |" in table
    assert table.index("simple_spread") < table.index("bucket_brigade")


def test_the_rise_is_paired_by_seed_and_flat_when_its_interval_holds_zero(bench, tmp_path):
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    # seed 2 reached only the first checkpoint: it is left out of the pairs
    write_rows(first, [("pursuit", 6, "sb3", s, 100, 100, 1, 1, 5, v, 0) for s, v in enumerate([1.0, 5.0, 9.0])])
    write_rows(second, [("pursuit", 6, "sb3", s, 200, 200, 1, 1, 5, v, 0) for s, v in enumerate([1.5, 5.0])])
    rows = bench._read(first) + bench._read(second)
    mean, half, n = bench.rise(rows, "sb3", 100, 200)
    assert (mean, n) == (0.25, 2) and half == pytest.approx(12.706 * np.sqrt(0.125) / np.sqrt(2), rel=1e-3)
    table = bench.report([first, second])
    assert "| sb3 | 5 ± 9.94 (3) | 3.25 ± 22.2 (2) | +0.25 ± 3.2 (2): flat | 1 | 1 |" in table


def test_the_curves_and_the_plot(bench, tmp_path):
    path = tmp_path / "runs.csv"
    write_rows(path, [("pursuit", 3, "sb3", s, c, c, 1, 1, 5, c / 100 + s, 0) for s in (0, 1) for c in (100, 200)])
    x, mean, half = bench.curves(bench._read(path), "pursuit", 3, "sb3")
    assert x.tolist() == [100, 200] and mean.tolist() == [1.5, 2.5]
    assert half == pytest.approx([12.706 * np.sqrt(0.5) / np.sqrt(2)] * 2, rel=1e-3)
    pytest.importorskip("matplotlib")
    picture = tmp_path / "img" / "curves.png"
    bench.main(["--report", "--out", str(path), "--plot", str(picture)])
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_joint_discrete_actions_unravel_to_the_multidiscrete_ones(bench):
    env = bench._joint_discrete(bench.Case("bucket_brigade", 3).task.factory())
    space = env.action_space("agent_0")
    assert space.n == 10 * 2 * 2
    assert bench.unravel(env.unwrapped.action_space("agent_0"), 23).tolist() == [5, 1, 1]
    env.reset(seed=0)
    env.step({a: 23 for a in env.agents})
    env.close()


def test_mpe2_envs_are_found_by_torchrl_by_task_name(bench):
    pytest.importorskip("torchrl")
    from torchrl.envs.libs.pettingzoo import PettingZooEnv

    bench.mpe2_lookup()
    bench.mpe2_lookup()  # once is enough; twice changes nothing
    env = PettingZooEnv(task="simple_spread_v3", parallel=True, N=6, max_cycles=25, continuous_actions=False)
    assert env.group_map == {"agent": [f"agent_{i}" for i in range(6)]}
    env.close()


def test_benchmarl_tasks_of_every_family_build_their_env(bench):
    pytest.importorskip("benchmarl")
    for name in bench.FAMILIES:
        task = bench.benchmarl_task(bench.Case(name, 3))
        env = task.get_env_fun(num_envs=1, continuous_actions=False, seed=0, device="cpu")()
        assert sum(len(agents) for agents in task.group_map(env).values()) == 3
        assert task.max_steps(env) == bench.FAMILIES[name].max_steps
        env.close()


@pytest.mark.slow
def test_a_tiny_run_of_every_method_writes_its_rows_resumes_and_reports(bench, tmp_path, capsys):
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("benchmarl")
    out = tmp_path / "runs.csv"
    argv = ["--envs", "simple_spread", "--agents", "3", "--seeds", "0", "--steps", "6000", "--checkpoints", "3000",
            "--episodes", "2", "--out", str(out)]
    bench.main(argv)
    rows = bench._read(out)
    assert {(r["method"], r["checkpoint"]) for r in rows} == {("random", "0")} | {
        (m, c) for m in ("marljoint", "sb3", "benchmarl") for c in ("3000", "6000")}
    assert all(int(r["env_steps"]) >= int(r["checkpoint"]) for r in rows)
    assert (tmp_path / "runs" / "simple_spread-n3-marljoint-seed0" / "metrics.csv").is_file()
    assert not (tmp_path / "runs" / "simple_spread-n3-marljoint-seed0" / "checkpoints").exists()
    bench.main(argv)  # every run is done: nothing is trained again
    assert len(bench._read(out)) == len(rows)
    bench.main(["--report", "--out", str(out)])
    assert "| benchmarl |" in capsys.readouterr().out


@pytest.mark.slow
def test_marljoint_stopped_and_resumed_at_a_checkpoint_trains_as_one_run(bench, tmp_path):
    case, plan = bench.Case("bucket_brigade", 3), bench.plan_from(8192, [4096], 1)
    segmented, whole = tmp_path / "segmented", tmp_path / "whole"
    bench.run_marljoint(case, 0, plan, lambda *a: None, bench.Clock(), {}, segmented)
    bench.run_marljoint(case, 0, bench.plan_from(8192, [], 1), lambda *a: None, bench.Clock(), {}, whole)

    def losses(run):
        with (run / "metrics.csv").open(newline="") as f:
            return [(r["policy_loss/agent_0"], r["entropy/agent_1"]) for r in csv.DictReader(f)]

    assert len(losses(segmented)) == 2 and losses(segmented) == losses(whole)


def test_the_module_docstring_holds_the_full_command(bench):
    assert "python benchmarks/agent_count.py --out benchmarks/results/agent-count/runs.csv" in bench.__doc__
    assert sys.modules["agent_count"] is bench


def test_the_diagnostics_average_each_metric_over_the_agents_and_draw_every_run(bench, tmp_path, capsys):
    path = tmp_path / "metrics.csv"
    path.write_text(
        "iteration,env_steps,episode_return_mean,entropy/agent_0,entropy/agent_1,approx_kl/agent_0,approx_kl/agent_1\n"
        "1,100,-3.0,1.0,2.0,0.01,0.03\n"
        "2,200,-2.0,0.5,1.5,0.02,0.04\n"
    )
    curves = bench.diagnostic_curves(path)
    assert set(curves) == {"episode_return_mean", "entropy", "approx_kl"}  # the file has no clip fraction
    steps, entropy = curves["entropy"]
    assert steps.tolist() == [100, 200] and entropy.tolist() == [1.5, 1.0]
    assert curves["approx_kl"][1] == pytest.approx([0.02, 0.03])
    pytest.importorskip("matplotlib")
    picture = tmp_path / "diagnostics.png"
    bench.main(["--diagnostics", str(path), str(path), "--plot", str(picture)])
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit):
        bench.main(["--diagnostics", str(path)])
    assert "--diagnostics draws into --plot PNG" in capsys.readouterr().err
