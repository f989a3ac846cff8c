"""OpenSpiel games of simultaneous moves measured exactly: NashConv as OpenSpiel computes it on the game's
turn-based form, known values of matrix games, best responses and the exported policy through that form, the
tabulated policy being the one the env's observations give, and a training run's exploitability columns."""

import csv
import functools
import json

import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel")
pytest.importorskip("shimmy")

import torch  # noqa: E402

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv  # noqa: E402
from marljoint.best_response import openspiel_game  # noqa: E402
from marljoint.best_response.openspiel_game import OpenSpielGame  # noqa: E402
from marljoint.env.openspiel import openspiel_env  # noqa: E402

GAMES = ["goofspiel(num_cards=3,imp_info=True)", "goofspiel(num_cards=4,imp_info=True)", "matrix_rps", "matrix_pd"]


def _tables(game, kind, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        return [game.legal_mask(p).astype(np.float64) for p in range(game.num_players)]
    return [rng.random((game.num_information_states(p), game.num_actions)) ** 3 for p in range(game.num_players)]


def _turn_based_policy(game, tables):
    """The tables as a policy of OpenSpiel's turn-based form of the game, built from a walk of that form's own
    tree: each of its decision nodes is named by its own information-state string, and the row is found from the
    information state the simultaneous game's state gives the mover there."""
    turn_based = pyspiel.convert_to_turn_based(game.game)
    checked = [game.check_table(table, p) for p, table in enumerate(tables)]
    policy, stack = {}, [turn_based.new_initial_state()]
    while stack:
        state = stack.pop()
        if state.is_terminal():
            continue
        if state.is_chance_node():
            stack.extend(state.child(a) for a, _ in state.chance_outcomes())
            continue
        player = state.current_player()
        key = state.information_state_string(player)
        inner = key.split("\n", 1)[1]  # after OpenSpiel's "Current player: p" line
        row = game.keys[player].index(inner)
        policy[key] = [(a, float(checked[player][row, a])) for a in state.legal_actions(player)]
        stack.extend(state.child(a) for a in state.legal_actions(player))
    return turn_based, policy


@pytest.mark.parametrize("kind", ["uniform", "random"])
@pytest.mark.parametrize("game_string", GAMES)
def test_nash_conv_of_a_simultaneous_game_is_openspiels_on_its_turn_based_form(game_string, kind):
    game = OpenSpielGame(game_string)
    assert game.simultaneous and game._terminals is not None
    tables = _tables(game, kind)
    turn_based, policy = _turn_based_policy(game, tables)
    want = pyspiel.nash_conv(turn_based, policy)
    assert game.nash_conv(tables) == pytest.approx(want, abs=1e-10)
    joint = pyspiel.TabularPolicy(game.policy_dict(tables))  # the simultaneous game's own policy
    expected = pyspiel.expected_returns(game.game.new_initial_state(), joint, -1, True)
    np.testing.assert_allclose(game.values(tables), expected, atol=1e-10)


def test_matrix_games_have_their_known_values():
    rps = OpenSpielGame("matrix_rps")
    assert rps.nash_conv(_tables(rps, "uniform")) == pytest.approx(0.0, abs=1e-12)
    rock = [np.eye(3)[[0]], np.eye(3)[[0]]]
    assert rps.nash_conv(rock) == pytest.approx(2.0)  # each player gains 1 by playing paper
    np.testing.assert_allclose(rps.best_response_values(rock), [1.0, 1.0])
    pd = OpenSpielGame("matrix_pd")
    matrix = pyspiel.load_game("matrix_pd")
    row_payoffs = np.array([[matrix.row_utility(r, c) for c in range(2)] for r in range(2)])
    cooperate, defect = [np.eye(2)[[0]]] * 2, [np.eye(2)[[1]]] * 2
    want = 2 * (row_payoffs[1, 0] - row_payoffs[0, 0])  # each gains by defecting against a cooperator
    assert pd.nash_conv(cooperate) == pytest.approx(want) and want > 0
    assert pd.nash_conv(defect) == pytest.approx(0.0)  # both defect: the equilibrium


@pytest.mark.parametrize("game_string", ["goofspiel(num_cards=3,imp_info=True)", "matrix_rps"])
def test_best_responses_and_the_largest_games_go_through_openspiels_turn_based_form(game_string, monkeypatch):
    game = OpenSpielGame(game_string)
    tables = _tables(game, "random", seed=1)
    values = game.best_response_values(tables)
    for player in range(game.num_players):
        value, table = game.best_response(tables, player)
        assert value == pytest.approx(values[player], abs=1e-10)
        played = [table if p == player else tables[p] for p in range(game.num_players)]
        assert game.values(played)[player] == pytest.approx(value, abs=1e-10)  # the table attains it
    monkeypatch.setattr(openspiel_game, "MAX_TERMINALS", 3)  # more terminals: OpenSpiel's own code scores it
    large = OpenSpielGame(game_string)
    assert large._terminals is None
    assert large.nash_conv(tables) == pytest.approx(game.nash_conv(tables), abs=1e-10)


def test_the_exported_policy_is_scored_by_openspiel_on_the_turn_based_form(tmp_path):
    game = OpenSpielGame("goofspiel", {"num_cards": 3, "imp_info": True})
    tables = _tables(game, "random", seed=2)
    path = game.export(tables, tmp_path / "policy.json")
    loaded = {key: [tuple(pair) for pair in pairs] for key, pairs in json.loads(path.read_text()).items()}
    turn_based = pyspiel.convert_to_turn_based(pyspiel.load_game("goofspiel(num_cards=3,imp_info=True)"))
    assert pyspiel.nash_conv(turn_based, loaded) == pytest.approx(game.nash_conv(tables), abs=1e-10)
    assert loaded == _turn_based_policy(game, tables)[1]


@pytest.mark.parametrize("parameters", [{"num_cards": 3, "imp_info": True}, {"num_cards": 3}])
def test_every_observation_the_env_gives_is_an_information_state_whose_row_is_the_networks_policy(parameters):
    game = OpenSpielGame("goofspiel", parameters)
    factory = functools.partial(openspiel_env, "goofspiel", **parameters)
    config = JointTrainerConfig(num_envs=4, rollout_steps=8, minibatch_size=32, n_epochs=1, share_parameters=False)
    env = PettingZooJointEnv(factory, num_envs=4, seed=0)
    trainer = JointMultiAgentTrainer.from_env(env, config)
    trainer.update(trainer.collect_rollout())
    policies = [trainer.agent_policy(p) for p in range(2)]
    tables = game.tables(policies)
    rng = np.random.default_rng(0)
    step, seen = env.reset(seed=1), [set(), set()]
    for _ in range(300):
        obs, masks = step.obs[0], step.action_masks[0]
        actions = np.zeros((4, 2), dtype=np.int64)
        for e, p in zip(*np.nonzero(step.acting)):
            row = game._lookup[p][np.asarray(obs[e, p], np.float32).tobytes()]  # a KeyError: not tabulated
            np.testing.assert_array_equal(masks[e, p], game.legal_mask(p)[row])
            probs = policies[p].action_probs(torch.as_tensor(obs[e, p])[None], torch.as_tensor(masks[e, p])[None])
            np.testing.assert_allclose(tables[p][row], probs[0][0].detach().numpy(), rtol=1e-5, atol=1e-7)
            seen[p].add(row)
            actions[e, p] = rng.choice(np.flatnonzero(masks[e, p]))
        step = env.step([actions])
    assert [len(s) for s in seen] == [game.num_information_states(p) for p in range(2)]  # every one was met
    env.close()


def test_the_env_shows_each_seat_its_own_information_state_at_a_simultaneous_node():
    game = OpenSpielGame("goofspiel", {"num_cards": 3, "imp_info": True})
    env = openspiel_env("goofspiel", num_cards=3, imp_info=True)
    env.reset(seed=0)
    rng, moves = np.random.default_rng(0), 0
    for agent in env.agent_iter(max_iter=200):
        _, _, terminated, truncated, info = env.last()
        if terminated or truncated:
            env.step(None)
            if not env.agents:
                env.reset()
            continue
        player = env.possible_agents.index(agent)
        row = game._lookup[player][np.asarray(env.observe(agent), np.float32).tobytes()]
        assert game.keys[player][row] == env.game_state.information_state_string(player)
        moves += 1
        env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
    assert moves > 100


def test_mean_field_games_are_refused_with_the_alternative():
    with pytest.raises(ValueError, match=r"mfg_crowd_modelling has mean_field dynamics; exact tables need a game of "
                                         r"sequential or simultaneous moves.*best_response_gain"):
        OpenSpielGame("mfg_crowd_modelling")


def test_a_training_run_on_goofspiel_logs_its_exact_exploitability_and_writes_openspiels_policy(tmp_path):
    from marljoint.cli import main

    out = tmp_path / "run"
    code = main(["train", "--env", "openspiel:goofspiel", "--env-kwargs", '{"num_cards": 3, "imp_info": true}',
                 "--exploitability-every", "1", "--total-steps", "64", "--num-envs", "4", "--rollout-steps", "8",
                 "--out", str(out), "--quiet"])
    assert code == 0
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 2 and all(float(r["exploit/exploitability"]) > 0 for r in rows)
    assert "exploit/approx_gain" not in rows[0]  # exact, not the PPO best-response estimate
    policy = {k: [tuple(p) for p in v] for k, v in json.loads((out / "openspiel_policy.json").read_text()).items()}
    turn_based = pyspiel.convert_to_turn_based(pyspiel.load_game("goofspiel(num_cards=3,imp_info=True)"))
    assert pyspiel.nash_conv(turn_based, policy) / 2 == pytest.approx(float(rows[-1]["exploit/exploitability"]))


def test_a_game_found_too_large_is_refused_again_without_a_second_walk(monkeypatch):
    with pytest.raises(ValueError, match=r"more than 50 information states.*best_response_gain"):
        OpenSpielGame("goofspiel(num_cards=4,imp_info=True)", max_information_states=50)

    def walk(*args, **kwargs):
        raise AssertionError("walked again")

    monkeypatch.setattr(openspiel_game, "_TreeWalk", walk)
    with pytest.raises(ValueError, match=r"more than 50 information states.*best_response_gain"):
        OpenSpielGame("goofspiel(num_cards=4,imp_info=True)", max_information_states=50)


def test_psro_with_the_exact_oracle_and_nfsp_run_on_a_simultaneous_game(tmp_path):
    import argparse

    from marljoint.cli.best_response import register

    def run(argv):
        parser = argparse.ArgumentParser(prog="marljoint")
        register(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args(argv)
        return args.handler(args)

    env = "openspiel:goofspiel(num_cards=4,imp_info=True)"
    assert run(["psro", "--env", env, "--oracle", "exact", "--iterations", "1", "--out", str(tmp_path / "p")]) == 0
    with open(tmp_path / "p" / "metrics.csv", newline="") as handle:
        last = list(csv.DictReader(handle))[-1]
    assert float(last["exploitability"]) > 0.5  # a pure best response to the uniform policy: exploitable
    policy = json.loads((tmp_path / "p" / "openspiel_policy.json").read_text())
    loaded = {key: [tuple(pair) for pair in pairs] for key, pairs in policy.items()}
    turn_based = pyspiel.convert_to_turn_based(pyspiel.load_game("goofspiel(num_cards=4,imp_info=True)"))
    assert pyspiel.nash_conv(turn_based, loaded) / 2 == pytest.approx(float(last["exploitability"]), abs=1e-9)
    env = "openspiel:goofspiel(num_cards=3,imp_info=True)"
    assert run(["nfsp", "--env", env, "--iterations", "1", "--num-envs", "8", "--out", str(tmp_path / "n")]) == 0
    assert (tmp_path / "n" / "openspiel_policy.json").is_file()


def test_a_player_without_legal_actions_at_a_simultaneous_node_passes():
    import _simultaneous_pass_game  # noqa: F401  (registers the game)

    game = OpenSpielGame("python_marljoint_pass_test")
    assert [len(keys) for keys in game.keys] == [3, 1]  # player 1 decides once: it passed first
    np.testing.assert_array_equal(game._previous[1], [-1])
    for seed in range(3):
        tables = _tables(game, "random", seed)
        turn_based, policy = _turn_based_policy(game, tables)
        assert game.nash_conv(tables) == pytest.approx(pyspiel.nash_conv(turn_based, policy), abs=1e-12)
        for player in range(2):
            value, _ = game.best_response(tables, player)
            assert value == pytest.approx(game.best_response_values(tables)[player], abs=1e-12)


def test_a_walk_of_a_simultaneous_game_longer_than_max_seconds_is_stopped(monkeypatch):
    monkeypatch.setattr(openspiel_game, "_ENUMERATED", {})
    with pytest.raises(openspiel_game.EnumerationTimeout, match=r"walking its game tree took over 1e-09 s") as err:
        OpenSpielGame("goofspiel(num_cards=4,imp_info=True)", max_seconds=1e-9)
    histories = int(err.value.seen.split(" and ")[1].split(" histories")[0].replace(",", ""))
    assert 4096 <= histories < 4096 + 16  # the first check of the clock, though terminals come several at once
