"""The psro and nfsp subcommands: metrics files, resume, and one-line errors."""

import argparse
import csv

import pytest

from marljoint.cli.best_response import register
from marljoint.run.recipes import RECIPES


def parse(argv):
    parser = argparse.ArgumentParser(prog="marljoint")
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def run(argv):
    args = parse(argv)
    return args.handler(args)


def read_rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_psro_exact_writes_one_row_per_iteration_and_resumes(tmp_path):
    out = tmp_path / "run"
    assert run(["psro", "--env", "kuhn_poker_v0", "--oracle", "exact", "--iterations", "4", "--out", str(out)]) == 0
    rows = read_rows(out / "metrics.csv")
    assert list(rows[0])[:3] == ["iteration", "wall_time", "env_steps"]  # the run driver's columns first
    assert [int(r["iteration"]) for r in rows] == [0, 1, 2, 3, 4]
    assert float(rows[0]["exploitability"]) == pytest.approx(11 / 24)
    assert (out / "config.toml").is_file() and (out / "checkpoints" / "ckpt_0000005.pt").is_file()
    run(["psro", "--out", str(out), "--iterations", "8", "--resume"])  # the run's own settings, its env included
    rows = read_rows(out / "metrics.csv")
    assert [int(r["iteration"]) for r in rows] == list(range(9)) and float(rows[-1]["exploitability"]) < 0.01


def test_psro_matrix_game_with_env_kwargs(tmp_path):
    argv = ["psro", "--env", "matrix_game_v0", "--env-kwargs", '{"game": "matching_pennies"}', "--oracle", "exact"]
    run(argv + ["--iterations", "2", "--out", str(tmp_path), "--seed", "1", "--meta-solver", "regret_matching"])
    rows = read_rows(tmp_path / "metrics.csv")
    assert len(rows) == 3 and float(rows[0]["exploitability"]) == 0.0  # uniform play is the equilibrium


def test_nfsp_writes_metrics(tmp_path):
    run(["nfsp", "--env", "kuhn_poker_v0", "--iterations", "1", "--num-envs", "8", "--out", str(tmp_path)])
    rows = read_rows(tmp_path / "metrics.csv")
    assert len(rows) == 1 and 0.0 < float(rows[0]["exploitability"]) < 1.0
    assert (tmp_path / "checkpoints" / "ckpt_0000001.pt").is_file()


def test_recurrent_best_responses_from_the_command_line(tmp_path, capsys):
    argv = ["--env", "kuhn_poker_v0", "--iterations", "1", "--num-envs", "8", "--recurrent", "gru"]
    assert run(["psro", *argv, "--br-steps", "256", "--out", str(tmp_path / "psro")]) == 0
    assert run(["nfsp", *argv, "--out", str(tmp_path / "nfsp")]) == 0
    for name in ("psro", "nfsp"):
        rows = read_rows(tmp_path / name / "metrics.csv")
        assert 0.0 < float(rows[-1]["exploitability"]) < 1.0  # recurrent policies scored on the exact tree
    with pytest.raises(SystemExit):
        parse(["psro", *argv[:-1], "transformer", "--out", str(tmp_path / "x")])
    assert "--recurrent: invalid choice: 'transformer'" in capsys.readouterr().err


def test_any_env_train_takes_runs_and_reports_an_estimated_exploitability_without_a_game_tree(tmp_path):
    import math

    small = ["--iterations", "1", "--num-envs", "4", "--gain-steps", "256"]
    push = ["--env", "mpe2.simple_push_v3", "--env-kwargs", '{"max_cycles": 10}', "--br-steps", "256"]
    push += ["--episodes-per-entry", "2"]
    assert run(["psro", *push, *small, "--out", str(tmp_path / "a")]) == 0
    factory = ["--env", "marljoint_envs.identity_v0:parallel_env", "--env-kwargs", '{"num_agents": 2}']
    assert run(["nfsp", *factory, *small, "--out", str(tmp_path / "b")]) == 0
    for name, iterations in (("a", 2), ("b", 1)):
        rows = read_rows(tmp_path / name / "metrics.csv")
        assert len(rows) == iterations  # psro also records its initial population, iteration 0
        for row in rows:
            assert math.isnan(float(row["exploitability"]))  # no tree: no exact figure
            assert math.isfinite(float(row["best_response_gain"])) and float(row["best_response_gain_ci"]) > 0
    never = ["--gain-every", "0", "--out", str(tmp_path / "c")]
    assert run(["psro", *push, *small, *never]) == 0
    assert "best_response_gain" not in read_rows(tmp_path / "c" / "metrics.csv")[0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["psro", "--env", "chess_v0"], r"marljoint psro: error: unknown env 'chess_v0': no module named 'chess_v0'"),
        (["nfsp", "--env", "mpe2.no_such_v0"], r"marljoint nfsp: error: unknown env 'mpe2.no_such_v0'"),
        (
            ["psro", "--env", "marljoint_envs.identity_v0", "--env-kwargs", '{"num_agents": 1}'],
            r"has 1 agent\(s\) \['agent_0'\]; PSRO and NFSP play agents against each other, so they need at least two",
        ),
        (["psro", "--env", "mpe2.simple_push_v3", "--env-kwargs", '{"colour": 1}'], r"does not accept the keyword"),
        (["psro", "--env", "kuhn_poker_v0", "--env-kwargs", "{game"], r"error: --env-kwargs is not valid JSON"),
        (["psro", "--env", "kuhn_poker_v0", "--env-kwargs", "[1]"], r"--env-kwargs must be a JSON object"),
        (["psro", "--env", "bucket_brigade_v0", "--oracle", "exact"], r"--oracle exact needs a known game tree"),
        (["psro", "--env", "kuhn_poker_v0", "--meta-solver", "best"], r"error: psro.meta_solver='best' is not one of"),
        (["psro", "--env", "matrix_game_v0", "--env-kwargs", '{"game": "go"}'], r"marljoint psro: error: .*'go'"),
        (["psro", "--env", "kuhn_poker_v0", "--resume"], r"--resume: .* holds no psro run to resume \(no config"),
        (["nfsp", "--iterations", "1"], r"marljoint nfsp: error: the following arguments are required: --env"),
        (["psro", "--env", "kuhn_poker_v0", "--set", "psro={bogus=1}"], r"--set: unknown setting psro.bogus; valid"),
        (["nfsp", "--env", "kuhn_poker_v0"], r"marljoint nfsp: error: pass --seconds S"),
        (["nfsp", "--env", "kuhn_poker_v0", "--seconds", "1", "--anticipatory", "2"], r"nfsp.anticipatory must be in"),
    ],
)
def test_bad_input_gives_one_line_errors(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit, match=message) as raised:
        run(argv + ["--out", str(tmp_path / "out")])
    assert raised.value.code == 2
    assert capsys.readouterr().err == str(raised.value) + "\n" and "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["psro", "--env", "kuhn_poker_v0", "--iterations", "0"], "argument --iterations: must be a positive integer"),
        (["psro", "--env", "kuhn_poker_v0", "--num-workers", "-2"], "argument --num-workers: must be an"),
        (["psro", "--env", "kuhn_poker_v0", "--seconds", "-1"], "argument --seconds: must be a finite number"),
        (["psro", "--env", "kuhn_poker_v0", "--br-steps", "0"], "argument --br-steps: must be a positive integer"),
        (["nfsp", "--env", "kuhn_poker_v0", "--seed", "-1"], "argument --seed: a seed must be an integer from 0"),
    ],
)
def test_bad_numbers_are_refused_by_the_command_line_in_one_line(tmp_path, capsys, argv, message):
    from marljoint.cli import main

    with pytest.raises(SystemExit) as raised:
        main([*argv, "--out", str(tmp_path / "out")])
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("marljoint")
    assert not (tmp_path / "out").exists()


def test_every_bundled_env_has_a_recipe():
    assert set(RECIPES) == {"kuhn_poker_v0", "matrix_game_v0", "bucket_brigade_v0"}
    assert all(not recipe.trainer.share_parameters for recipe in RECIPES.values())


def _snapshot(directory):
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_psro_refuses_an_existing_run_unless_resumed_or_forced_and_a_failed_start_changes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    base = ["psro", "--env", "kuhn_poker_v0", "--oracle", "exact", "--out", str(out)]
    assert run([*base, "--iterations", "2"]) == 0
    err = capsys.readouterr().err
    assert "psro iteration 2/2  exploitability" in err
    before = _snapshot(out)
    with pytest.raises(SystemExit) as info:
        run([*base, "--iterations", "2"])
    assert info.value.code == 2
    assert "already holds a run; pass --resume to continue it, --force to overwrite it" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # --force, but a setting that fails: the old run stays as it was
        run([*base, "--iterations", "2", "--force", "--meta-solver", "no_such_solver"])
    assert _snapshot(out) == before
    assert run([*base, "--iterations", "1", "--force", "--quiet"]) == 0
    assert [int(r["iteration"]) for r in read_rows(out / "metrics.csv")] == [0, 1]


def test_nfsp_resumes_and_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "run"
    base = ["nfsp", "--env", "kuhn_poker_v0", "--num-envs", "8", "--out", str(out)]
    assert run([*base, "--iterations", "1"]) == 0
    assert "nfsp iteration 1/1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run([*base, "--iterations", "1"])
    assert "already holds a run" in capsys.readouterr().err
    assert run([*base, "--iterations", "2", "--resume"]) == 0
    rows = read_rows(out / "metrics.csv")
    assert [int(r["iteration"]) for r in rows] == [1, 2]
    with pytest.raises(SystemExit):
        run(["nfsp", "--env", "kuhn_poker_v0", "--iterations", "1", "--out", str(tmp_path / "none"), "--resume"])
    assert "holds no nfsp run to resume (no config.toml)" in capsys.readouterr().err


def test_warm_start_flag_takes_a_policy_scale_or_off_and_defaults_to_the_recipe(tmp_path, capsys):
    from marljoint.run.recipes import OPENSPIEL_RECIPE, recipe_for

    base = ["psro", "--env", "kuhn_poker_v0", "--out", str(tmp_path / "x")]
    assert parse(base).warm_start is None  # the recipe decides
    assert parse([*base, "--warm-start"]).warm_start == 1.0
    assert parse([*base, "--warm-start", "0.3"]).warm_start == 0.3
    assert parse([*base, "--warm-start", "off"]).warm_start is False
    for bad in ("half", "1.5"):
        with pytest.raises(SystemExit):
            parse([*base, "--warm-start", bad])
        assert "expected off or a policy scale in [0, 1]" in capsys.readouterr().err
    assert recipe_for("openspiel:leduc_poker") is OPENSPIEL_RECIPE
    assert (OPENSPIEL_RECIPE.warm_start, OPENSPIEL_RECIPE.warm_start_policy_scale) == (True, 0.3)
    assert OPENSPIEL_RECIPE.nfsp["anticipatory"] == 0.7 and OPENSPIEL_RECIPE.trainer == RECIPES["kuhn_poker_v0"].trainer
    assert RECIPES["kuhn_poker_v0"].warm_start is False
    argv = ["--iterations", "2", "--br-steps", "256", "--num-envs", "8"]
    assert run(["psro", "--env", "kuhn_poker_v0", *argv, "--warm-start", "0.3", "--out", str(tmp_path / "w")]) == 0
    rows = read_rows(tmp_path / "w" / "metrics.csv")
    assert [float(r["br_warm_started"]) for r in rows[1:]] == [0.0, 2.0]
    assert run(["psro", "--env", "kuhn_poker_v0", *argv, "--out", str(tmp_path / "off")]) == 0
    assert "br_warm_started" not in read_rows(tmp_path / "off" / "metrics.csv")[0]


def test_psro_num_workers_is_a_deprecated_spelling_of_task_split(capsys):
    args = parse(["psro", "--env", "kuhn_poker_v0", "--out", "o", "--num-workers", "3"])
    assert args.task_split == 3
    assert capsys.readouterr().err == (
        "marljoint psro: --num-workers is deprecated here (in marljoint train it means Ray rollout workers); "
        "use --task-split 3\n"
    )
    assert parse(["psro", "--env", "kuhn_poker_v0", "--out", "o", "--task-split", "2"]).task_split == 2
    assert capsys.readouterr().err == ""
