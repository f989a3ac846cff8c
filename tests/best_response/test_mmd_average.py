"""The average policy of MMD self-play: reach (KnownGame.reach), the reach-weighted PolicyAverage, and the
average's exploitability logged while training, exported for OpenSpiel and carried through a resume."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from _kuhn_tables import column, openspiel_exploitability, run_tables

from marljoint.best_response import KuhnGame, MatrixGame, PolicyAverage, kuhn_exploitability, kuhn_mixture_table
from marljoint.checkpoint import list_checkpoints, load_checkpoint
from marljoint.run.train import RunSpec, resume_spec, train_run

RNG_SEED = 7


def _kuhn_tables(rng):
    return [rng.dirichlet(np.ones(2), size=6) for _ in range(2)]


def test_kuhn_reach_is_the_product_of_the_players_own_earlier_moves():
    game = KuhnGame()
    table = np.tile([0.25, 0.75], (6, 1))
    assert game.reach([table, np.eye(2)[[0, 0, 1, 1, 0, 1]]], 0).tolist() == [
        [1.0, 0.25, 1.0, 0.25, 1.0, 0.25],
        [1.0, 1.0, 1.0, 0.0, 1.0, 1.0],
    ]
    assert game.reach([table], 1).tolist() == [[1.0] * 6]  # player 1 decides once


def test_a_matrix_games_single_decision_is_always_reached():
    game = MatrixGame([np.eye(3), -np.eye(3)])
    assert game.reach([np.array([0.2, 0.3, 0.5]), np.array([1.0, 0.0, 0.0])], 1).tolist() == [[1.0], [1.0]]


def test_averaging_two_kuhn_tables_is_their_mixture_table():
    rng = np.random.default_rng(RNG_SEED)
    first, second = _kuhn_tables(rng), _kuhn_tables(rng)
    average = PolicyAverage(KuhnGame())
    average.add(first, 1.0)
    average.add(second, 3.0)
    for player, table in enumerate(average.tables()):
        expected = kuhn_mixture_table([first[player], second[player]], np.array([1.0, 3.0]), player)
        np.testing.assert_allclose(table, expected, rtol=0, atol=1e-12)
    assert average.count == 2 and average.total_weight == 4.0


def test_on_a_matrix_game_the_average_is_the_weighted_mean():
    game = MatrixGame(
        [np.array([[0.0, -1, 1], [1, 0, -1], [-1, 1, 0]]), -np.array([[0.0, -1, 1], [1, 0, -1], [-1, 1, 0]])]
    )
    average = PolicyAverage(game)
    average.add([np.array([1.0, 0.0, 0.0]), np.array([0.0, 0.0, 1.0])], 1.0)
    average.add([np.array([0.0, 0.5, 0.5]), np.array([1.0, 0.0, 0.0])], 3.0)
    mean_0, mean_1 = average.tables()
    np.testing.assert_allclose(mean_0, [0.25, 0.375, 0.375], rtol=0, atol=1e-15)
    np.testing.assert_allclose(mean_1, [0.75, 0.0, 0.25], rtol=0, atol=1e-15)


def test_an_information_set_no_table_reaches_plays_the_last_tables_row():
    rng = np.random.default_rng(RNG_SEED)
    always_bet = np.tile([0.0, 1.0], (6, 1))  # player 0 never passes, so never reaches (card, "pb")
    later = always_bet.copy()
    later[1] = [0.3, 0.7]
    other = _kuhn_tables(rng)[1]
    average = PolicyAverage(KuhnGame())
    average.add([always_bet, other], 1.0)
    average.add([later, other], 2.0)
    np.testing.assert_array_equal(average.tables()[0][1], [0.3, 0.7])


def test_the_state_dict_restores_the_average_exactly():
    rng = np.random.default_rng(RNG_SEED)
    average = PolicyAverage(KuhnGame())
    for weight in (1.0, 2.0, 3.0):
        average.add(_kuhn_tables(rng), weight)
    again = PolicyAverage(KuhnGame())
    again.load_state_dict(average.state_dict())
    assert all(np.array_equal(a, b) for a, b in zip(again.tables(), average.tables()))
    extra = _kuhn_tables(rng)
    average.add(extra, 4.0)
    again.add(extra, 4.0)
    assert all(np.array_equal(a, b) for a, b in zip(again.tables(), average.tables()))
    assert (again.count, again.total_weight) == (4, 10.0)


@pytest.mark.parametrize(
    ("tables", "weight", "match"),
    [
        ("one", 1.0, "got 1 tables for kuhn_poker, which has 2 players; pass one table per player"),
        ("two", 0.0, r"weight must be a finite number > 0, got 0.0; e.g. weight=iteration"),
        ("two", -1.0, r"weight must be a finite number > 0, got -1.0"),
        ("two", float("nan"), r"weight must be a finite number > 0, got nan"),
        ("two", True, r"weight must be a finite number > 0, got True"),
        ("wrong_shape", 1.0, r"shape"),
    ],
)
def test_bad_tables_and_weights_are_refused(tables, weight, match):
    uniform = np.full((6, 2), 0.5)
    given = {"one": [uniform], "two": [uniform, uniform], "wrong_shape": [np.full((5, 2), 0.5), uniform]}[tables]
    with pytest.raises(ValueError, match=match):
        PolicyAverage(KuhnGame()).add(given, weight)


def test_an_empty_average_and_a_state_of_another_game_are_refused():
    with pytest.raises(ValueError, match=r"the average is empty; add\(\) at least one table per player first"):
        PolicyAverage(KuhnGame()).tables()
    matrix = PolicyAverage(MatrixGame([np.eye(2), -np.eye(2)]))
    matrix.add([np.array([0.5, 0.5]), np.array([0.5, 0.5])], 1.0)
    three = PolicyAverage(MatrixGame([np.ones((2, 2, 2))] * 3))
    with pytest.raises(ValueError, match="the saved average has 2 players, matrix_game has 3"):
        three.load_state_dict(matrix.state_dict())


def test_a_saved_average_of_other_table_shapes_is_refused():
    average = PolicyAverage(KuhnGame())
    average.add([np.full((6, 2), 0.5)] * 2, 1.0)
    state = average.state_dict()
    state["numerators"][0] = np.zeros((3, 2))
    with pytest.raises(ValueError, match=r"the saved average of player 0 has shape \(3, 2\), expected \(6, 2\)"):
        PolicyAverage(KuhnGame()).load_state_dict(state)


def test_on_an_openspiel_game_the_average_is_its_mixture_table():
    pytest.importorskip("pyspiel")
    from marljoint.best_response import OpenSpielGame

    game = OpenSpielGame("leduc_poker")
    rng = np.random.default_rng(RNG_SEED)
    iterates = [[game.check_table(rng.random(game.legal_mask(p).shape) ** 3, p) for p in range(2)] for _ in range(3)]
    average = PolicyAverage(game)
    for weight, tables in enumerate(iterates, start=1):
        average.add(tables, float(weight))
    for player, table in enumerate(average.tables()):
        members = [tables[player] for tables in iterates]
        expected = game.mixture_table(members, np.array([1.0, 2.0, 3.0]), player)
        np.testing.assert_allclose(table, expected, rtol=0, atol=1e-12)


def test_openspiels_reach_is_vectorised_by_depth_and_matches_the_walk_row_by_row():
    pytest.importorskip("pyspiel")
    from marljoint.best_response import OpenSpielGame

    game = OpenSpielGame("leduc_poker")
    rng = np.random.default_rng(RNG_SEED)
    for player in range(2):
        legal = game.legal_mask(player)
        tables = [np.where(legal, rng.random(legal.shape), 0.0) for _ in range(3)]
        checked = np.stack([game.check_table(t, player) for t in tables])
        previous, action = game._previous[player], game._previous_action[player]
        expected = np.ones(checked.shape[:2])
        for row in range(checked.shape[1]):  # the definition: predecessors come first
            if previous[row] >= 0:
                expected[:, row] = expected[:, previous[row]] * checked[:, previous[row], action[row]]
        np.testing.assert_allclose(game.reach(tables, player), expected, rtol=1e-12, atol=0)
        assert len(game._levels[player]) > 1  # several depths, each one gather


# ---------------------------------------------------------------------------------------------- while training
TINY = {"num_envs": 4, "rollout_steps": 16, "n_epochs": 2, "hidden_sizes": [16], "minibatch_size": 32}


def _spec(iterations, **changes):
    values = {"env": "kuhn_poker_v0", "env_kwargs": {}, "total_steps": iterations * 64, "checkpoint_every": 1}
    values.update(TINY, learning_rate=0.02, keep_checkpoints=20, exploitability_every=2, **changes)
    return RunSpec.from_dict(values)


def _rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _tables_at(run_dir, iteration):
    return run_tables(run_dir, run_dir / "checkpoints" / f"ckpt_{iteration:07d}.pt")


@pytest.fixture(scope="module")
def mmd_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("mmd") / "run"
    train_run(_spec(4, self_play="mmd"), run_dir, progress=False)
    return run_dir, _rows(run_dir)


def test_the_logged_average_is_the_linear_reach_weighted_average_of_every_iterate(mmd_run):
    run_dir, rows = mmd_run
    iterates = [_tables_at(run_dir, t) for t in range(1, 5)]
    logged = column(rows, "exploit/average_exploitability")
    assert len(logged) == 2  # measured after iterations 2 and 4
    for position, last in enumerate((2, 4)):
        weights = np.arange(1.0, last + 1)
        average = [kuhn_mixture_table([tables[p] for tables in iterates[:last]], weights, p) for p in range(2)]
        assert logged[position] == pytest.approx(kuhn_exploitability(average), abs=1e-9)
    assert column(rows, "exploit/average_nash_conv") == pytest.approx([2 * v for v in logged])
    assert logged[-1] != pytest.approx(column(rows, "exploit/exploitability")[-1], abs=1e-6)


def test_openspiel_reads_the_average_policy_with_the_logged_exploitability(mmd_run):
    run_dir, rows = mmd_run
    assert openspiel_exploitability(run_dir / "openspiel_average_policy.json") == pytest.approx(
        column(rows, "exploit/average_exploitability")[-1], abs=1e-9
    )
    assert (run_dir / "openspiel_policy.json").is_file()


def test_without_mmd_self_play_no_average_is_kept(tmp_path):
    train_run(_spec(2), tmp_path / "plain", progress=False)
    rows = _rows(tmp_path / "plain")
    assert column(rows, "exploit/exploitability") and not any("average" in name for name in rows[0])
    assert not (tmp_path / "plain" / "openspiel_average_policy.json").exists()
    state = load_checkpoint(list_checkpoints(tmp_path / "plain" / "checkpoints")[-1])["run"]
    assert "policy_average" not in state


def test_a_resumed_run_continues_the_same_average_exactly(mmd_run, tmp_path):
    whole_dir, whole_rows = mmd_run
    run_dir = tmp_path / "resumed"
    train_run(_spec(4, self_play="mmd"), run_dir, progress=False, stop_after=3)
    train_run(resume_spec(run_dir), run_dir, resume=True, progress=False)
    for name in ("exploit/average_exploitability", "exploit/exploitability"):
        assert column(_rows(run_dir), name) == column(whole_rows, name)
    whole, resumed = (
        load_checkpoint(list_checkpoints(d / "checkpoints")[-1])["run"]["policy_average"] for d in (whole_dir, run_dir)
    )
    assert whole["count"] == resumed["count"] == 4 and whole["total_weight"] == resumed["total_weight"] == 10.0
    for key in ("numerators", "denominators", "last"):
        assert all(np.array_equal(a, b) for a, b in zip(whole[key], resumed[key]))


def test_the_best_policy_is_the_least_exploitable_of_every_policy_measured_so_far(mmd_run):
    run_dir, rows = mmd_run
    measured = [r for r in rows if r.get("exploit/exploitability")]
    best = column(rows, "exploit/best_policy_exploitability")
    assert len(best) == len(measured) == 2
    running = math.inf
    for row, logged in zip(measured, best):
        running = min(running, float(row["exploit/exploitability"]), float(row["exploit/average_exploitability"]))
        assert logged == pytest.approx(running, abs=1e-12)
    assert openspiel_exploitability(run_dir / "openspiel_best_policy.json") == pytest.approx(best[-1], abs=1e-9)


def test_the_best_policy_counts_the_magnet_and_survives_a_resume(tmp_path):
    # Rock-paper-scissors: uniform play is the equilibrium, so a slow "ema" magnet, which stays near the initial
    # (nearly uniform) policy, is the least exploitable policy while the iterates move away from it.
    values = {"env": "matrix_game_v0", "env_kwargs": {"game": "rps"}, "total_steps": 6 * 64, "checkpoint_every": 1}
    values.update(TINY, learning_rate=0.05, keep_checkpoints=20, exploitability_every=2, self_play="mmd")
    spec = RunSpec.from_dict({**values, "mmd": {"magnet": "ema", "magnet_rate": 0.01, "alpha": 0.01}})
    whole = tmp_path / "whole"
    train_run(spec, whole, progress=False)
    rows = [r for r in _rows(whole) if r.get("exploit/exploitability")]
    first_magnet = float(rows[0]["exploit/magnet_exploitability"])
    others = (float(rows[0]["exploit/exploitability"]), float(rows[0]["exploit/average_exploitability"]))
    assert first_magnet < min(others)
    assert float(rows[-1]["exploit/magnet_exploitability"]) > first_magnet  # the later measurements are worse
    assert column(_rows(whole), "exploit/best_policy_exploitability") == pytest.approx([first_magnet] * len(rows))
    resumed = tmp_path / "resumed"
    train_run(spec, resumed, progress=False, stop_after=3)
    train_run(resume_spec(resumed), resumed, resume=True, progress=False)
    assert column(_rows(resumed), "exploit/best_policy_exploitability")[-1] == pytest.approx(first_magnet)


def test_plain_self_play_scores_one_policy_and_writes_no_best_policy_file(tmp_path):
    train_run(_spec(2), tmp_path / "plain", progress=False)
    assert "exploit/best_policy_exploitability" not in _rows(tmp_path / "plain")[0]
    assert not (tmp_path / "plain" / "openspiel_best_policy.json").exists()
