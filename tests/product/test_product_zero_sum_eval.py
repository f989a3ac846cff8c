"""Evaluation that means something in zero-sum games: per-seat returns against references in ``marljoint eval``
and during training, ``best.pt`` chosen by exploitability, and the errors of ``--against`` and
``--exploitability-every``."""

from __future__ import annotations

import csv
import json
import re

import pytest
from _product_helpers import run_cli

from marljoint.best_response.exploitability import kuhn_exploitability
from marljoint.best_response.games import KuhnGame
from marljoint.run.errors import RunError
from marljoint.run.evaluate import load_run
from marljoint.run.train import RunSpec

TINY = "rollout_steps = 16\nminibatch_size = 32\nn_epochs = 2\nhidden_sizes = [16]\ncheckpoint_every = 1\n"


def _train(tmp_path, name, env, *extra):
    config = tmp_path / f"{name}.toml"
    config.write_text(TINY + "keep_checkpoints = 10\n")
    out = tmp_path / name
    args = ["train", "--env", env, "--num-envs", "4", "--total-steps", "256", "--config", str(config)]
    assert run_cli([*args, "--out", str(out), "--quiet", *extra]) == 0
    return out


@pytest.fixture(scope="module")
def kuhn_run(tmp_path_factory):
    """Kuhn poker, 4 iterations, evaluated every second one (no --exploitability-every)."""
    return _train(tmp_path_factory.mktemp("kuhn"), "kuhn", "kuhn_poker_v0", "--eval-every", "2", "--eval-episodes", "6")


@pytest.fixture(scope="module")
def three_agent_run(tmp_path_factory):
    return _train(
        tmp_path_factory.mktemp("mock"), "mock", "mock_v0", "--env-kwargs", '{"num_agents": 3, "max_cycles": 4}'
    )


def _rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_training_evaluates_each_seat_against_random_and_keeps_the_least_exploitable(kuhn_run):
    rows = _rows(kuhn_run)
    evaluated = [r for r in rows if r["eval/episode_return_mean"] != ""]
    assert [int(r["iteration"]) for r in evaluated] == [2, 4]
    for row in evaluated:
        seats = [float(row["eval/vs_random/player_0"]), float(row["eval/vs_random/player_1"])]
        assert float(row["eval/vs_random_mean"]) == pytest.approx(sum(seats) / 2)
    # Kuhn poker has an exact exploitability: it is measured at every evaluation and chooses best.pt.
    values = [float(r["exploit/exploitability"]) for r in evaluated]
    run = load_run(kuhn_run, kuhn_run / "checkpoints" / "best.pt")
    try:
        best = kuhn_exploitability(KuhnGame().tables([run.agent_policy(0), run.agent_policy(1)]))
    finally:
        run.close()
    assert best == pytest.approx(min(values), abs=1e-9)
    assert (kuhn_run / "openspiel_policy.json").is_file()


def test_eval_prints_per_seat_rows_against_random_and_a_checkpoint(kuhn_run, capsys):
    earlier = kuhn_run / "checkpoints" / "ckpt_0000001.pt"
    assert run_cli(["eval", str(kuhn_run), "--episodes", "6", "--against", "random", "--against", str(earlier)]) == 0
    out = capsys.readouterr().out
    # No "mean over agents  0 ± 0" row: in a zero-sum game that mean is 0 by construction.
    assert not re.search(r"^mean over agents\s", out, flags=re.MULTILINE)
    assert not re.search(r" 0 ± 0$", out, flags=re.MULTILINE)
    assert "(a zero-sum game: the mean over agents is 0 by construction; see the per-seat rows)" in out
    table = out[out.index("per seat against references") :].splitlines()
    assert table[1].split() == ["reference", "seat", "return", "(mean", "±", "95%", "CI)"]
    rows = [line.split() for line in table[2:]]
    assert [(r[0], r[1]) for r in rows] == [
        ("random", "player_0"),
        ("random", "player_1"),
        (str(earlier), "player_0"),
        (str(earlier), "player_1"),
    ]
    assert all(r[3] == "±" for r in rows)


def test_a_zero_sum_eval_plays_against_random_by_default(kuhn_run, capsys):
    assert run_cli(["eval", str(kuhn_run), "--episodes", "4", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [(row["reference"], row["seat"]) for row in payload["seats"]] == [
        ("random", "player_0"),
        ("random", "player_1"),
    ]
    assert all(set(row) == {"reference", "seat", "mean", "ci95"} for row in payload["seats"])


def test_an_unknown_reference_is_one_line_naming_it_and_the_fix(kuhn_run, capsys):
    assert run_cli(["eval", str(kuhn_run), "--episodes", "2", "--against", "nowhere"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("marljoint eval: error: --against 'nowhere' is neither 'random', a run directory")
    assert "give --against random, --against OTHER_RUN_DIR or --against RUN_DIR/checkpoints/ckpt_<N>.pt" in err


def test_a_reference_run_of_another_env_is_refused(kuhn_run, three_agent_run, capsys):
    assert run_cli(["eval", str(kuhn_run), "--episodes", "2", "--against", str(three_agent_run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "that run trained on env 'mock_v0'" in err and "this one on 'kuhn_poker_v0'" in err
    assert "give a run (or checkpoint) of the same env" in err


def test_references_need_a_two_player_game(three_agent_run, capsys):
    assert run_cli(["eval", str(three_agent_run), "--episodes", "2", "--against", "random"]) == 2
    err = capsys.readouterr().err
    assert "needs a two-player game, and env 'mock_v0' has 3 agents" in err and "drop --against" in err


def test_a_general_game_prints_no_seat_table_by_default(three_agent_run, capsys):
    assert run_cli(["eval", str(three_agent_run), "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^mean over agents\s", out, flags=re.MULTILINE) and "per seat" not in out


def test_exploitability_every_without_a_measure_names_the_env_and_the_fix(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--env", "mock_v0", "--env-kwargs", '{"num_agents": 3}', "--total-steps", "64", "--out", str(out)]
    assert run_cli([*args, "--exploitability-every", "2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "env 'mock_v0' has no exact exploitability" in err and "has 3 agents" in err
    assert "drop --exploitability-every, or train a two-player env" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"exploitability_every": 0}, "exploitability_every must be a positive integer, got 0"),
        ({"exploitability_steps": -5}, "exploitability_steps must be a positive integer, got -5"),
        ({"exploitability_episodes": 1}, "exploitability_episodes must be at least 2"),
    ],
)
def test_exploitability_settings_are_checked(changes, message):
    with pytest.raises(RunError, match=message):
        RunSpec.from_dict(changes)


def test_the_new_columns_are_documented(kuhn_run):
    from pathlib import Path

    from marljoint.run.exploitability import EXPLOITABILITY_METRICS

    text = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    documented = set(re.findall(r"^\| `([^`]+)` \|", text, flags=re.MULTILINE))
    written = [c for c in _rows(kuhn_run)[0] if c.startswith(("exploit/", "eval/vs_random"))]
    assert {re.sub(r"/player_\d$", "/<agent>", c) for c in written} <= documented
    assert set(EXPLOITABILITY_METRICS) <= documented
