"""OpenSpiel games: the env observing information states, ``openspiel:`` names, exact scoring with OpenSpiel's
own code, the exported policy, and the same figures as the bundled Kuhn poker."""

import csv
import functools
import json

import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel")
pytest.importorskip("shimmy")

from pettingzoo.test import api_test  # noqa: E402

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv  # noqa: E402
from marljoint.best_response.games import KuhnGame  # noqa: E402
from marljoint.best_response.kuhn import KUHN_INFOSETS  # noqa: E402
from marljoint.best_response.openspiel_game import OpenSpielGame  # noqa: E402
from marljoint.env import openspiel_shimmy  # noqa: E402
from marljoint.env.openspiel import openspiel_env  # noqa: E402
from marljoint.run.registry import EnvSpecError, known_game, resolve_env  # noqa: E402


# ------------------------------------------------------------------ the env
@pytest.mark.parametrize("game", ["kuhn_poker", "leduc_poker", "tic_tac_toe"])
def test_openspiel_games_pass_pettingzoos_api_test(game):
    api_test(openspiel_env(game), num_cycles=200)


def test_agents_observe_the_information_state_and_seeded_episodes_replay():
    env = openspiel_env("leduc_poker")
    env.reset(seed=0)
    agent = env.agent_selection
    player = int(agent.split("_")[1])
    expected = np.asarray(env.game_state.information_state_tensor(player), np.float32)
    np.testing.assert_array_equal(env.observe(agent), expected)
    assert env.observation_space(agent).shape == expected.shape == (30,)  # Shimmy's observation tensor has 16

    def deals(seed):
        env = openspiel_env("leduc_poker")
        env.reset(seed=seed)
        out = []
        for _ in range(5):  # later resets continue from the first seed
            out.append(str(env.game_state))
            env.reset()
        return out

    assert deals(3) == deals(3) and deals(3) != deals(4)


@pytest.mark.parametrize("game", ["kuhn_poker", "leduc_poker"])
def test_every_episode_ends_at_openspiels_terminal_state_with_its_returns(game):
    # Shimmy alone truncates once chance nodes plus decisions pass max_game_length (decisions only): Kuhn games
    # ended after their first move with no payoff, and Leduc's betting wars (always raising, below) were cut short.
    env = openspiel_env(game)
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    lengths = []
    for _ in range(200):
        totals = dict.fromkeys(env.possible_agents, 0.0)
        for agent in env.agent_iter():
            _, _, term, trunc, info = env.last()
            if term or trunc:
                assert not trunc, f"{game}: an episode was truncated after {env.game_state.history()}"
                env.step(None)
                continue
            legal = np.flatnonzero(info["action_mask"])
            raise_ = legal.max()  # the last legal action: bet / raise where the game allows it
            env.step(int(raise_ if agent == "player_1" else rng.choice(legal)))
            for name, reward in env.rewards.items():
                totals[name] += reward
        state = env.game_state
        assert state.is_terminal()
        assert [totals[a] for a in env.possible_agents] == pytest.approx(state.returns())
        lengths.append(len(state.history()))
        env.reset()
    assert max(lengths) > pyspiel.load_game(game).max_game_length()  # long games (chance nodes too) were played


def test_openspiel_names_resolve_with_game_parameters_and_bad_ones_get_one_error():
    env = resolve_env("openspiel:leduc_poker", {"players": 3}).make()
    assert env.possible_agents == ["player_0", "player_1", "player_2"]
    with pytest.raises(EnvSpecError, match=r"unknown OpenSpiel game 'nope_poker'; pyspiel.registered_names\(\)"):
        resolve_env("openspiel:nope_poker")
    with pytest.raises(EnvSpecError, match=r"leduc_poker has no parameter\(s\) \['colour'\]; it takes \["):
        resolve_env("openspiel:leduc_poker", {"colour": 1})
    with pytest.raises(EnvSpecError, match="name the OpenSpiel game after the prefix"):
        resolve_env("openspiel:")


# ------------------------------------------------------------------ exact scoring
def uniform(game):
    return [game.check_table(np.ones((game.num_information_states(p), game.num_actions)), p) for p in range(2)]


def test_leduc_uniform_play_has_openspiels_nash_conv():
    from open_spiel.python import policy as policy_lib
    from open_spiel.python.algorithms import exploitability

    game = OpenSpielGame("leduc_poker")
    assert [game.num_information_states(p) for p in range(2)] == [468, 468]
    reference = exploitability.nash_conv(game.game, policy_lib.UniformRandomPolicy(game.game))  # Python, not C++
    assert game.nash_conv(uniform(game)) == pytest.approx(reference) == pytest.approx(4.747222, abs=1e-6)
    values = game.values(uniform(game))
    responses = [game.best_response(uniform(game), p)[0] for p in range(2)]
    assert sum(responses) - values.sum() == pytest.approx(reference)


def kuhn_rows():
    """For OpenSpiel's Kuhn poker, each player's rows in the bundled game's order (cards J, Q, K = 0, 1, 2)."""
    game = OpenSpielGame("kuhn_poker")
    rows = [[game.keys[p].index(f"{card}{history}") for card, history in KUHN_INFOSETS[p]] for p in range(2)]
    return game, rows


def test_the_bundled_kuhn_and_openspiels_kuhn_score_the_same_policy_alike():
    game, rows = kuhn_rows()
    bundled = KuhnGame()
    rng = np.random.default_rng(0)
    for _ in range(5):
        tables = [rng.dirichlet(np.ones(2), size=6) for _ in range(2)]
        mapped = [np.zeros((6, 2)) for _ in range(2)]
        for p in range(2):
            mapped[p][rows[p]] = tables[p]
        assert game.nash_conv(mapped) == pytest.approx(bundled.nash_conv(tables), abs=1e-9)
        # Mixtures are reach-weighted the same way as well.
        weights = np.array([0.3, 0.7])
        other = [rng.dirichlet(np.ones(2), size=6) for _ in range(2)]
        other_mapped = [np.zeros((6, 2)) for _ in range(2)]
        for p in range(2):
            other_mapped[p][rows[p]] = other[p]
        mixed = game.mixture_table([mapped[0], other_mapped[0]], weights, 0)
        np.testing.assert_allclose(mixed[rows[0]], bundled.mixture_table([tables[0], other[0]], weights, 0))


def test_the_exported_policy_is_scored_alike_by_openspiel(tmp_path):
    game = OpenSpielGame("leduc_poker")
    rng = np.random.default_rng(1)
    tables = [game.check_table(rng.random((468, game.num_actions)), p) for p in range(2)]
    path = game.export(tables, tmp_path / "openspiel_policy.json")
    loaded = {key: [tuple(pair) for pair in pairs] for key, pairs in json.loads(path.read_text()).items()}
    assert len(loaded) == 936
    state = game.game.new_initial_state()
    while state.is_chance_node():
        state.apply_action(state.chance_outcomes()[0][0])
    key = state.information_state_string(state.current_player())
    assert [a for a, _ in loaded[key]] == state.legal_actions()  # legal actions only, OpenSpiel's ids
    assert pyspiel.nash_conv(game.game, loaded) == pytest.approx(game.nash_conv(tables))


def test_chance_outcomes_follow_openspiels_probabilities_from_the_game_loaded_once():
    # Leduc deals two private cards from six without replacement: player 0's card is uniform, and player 1 never
    # gets player 0's exact card. Drawn by one uniform number per chance node from the run's generator.
    env = openspiel_env("leduc_poker")
    env.reset(seed=0)
    game = env._env
    episodes = 3000
    first = np.zeros(6)
    for _ in range(episodes):
        history = env.game_state.history()
        assert history[0] != history[1]
        first[history[0]] += 1
        env.reset()
    assert env._env is game  # resets start a new state of the same game, never reload it
    expected = episodes / 6
    assert np.all(np.abs(first - expected) < 5 * np.sqrt(expected * 5 / 6)), first


@pytest.mark.parametrize("block", [None, 1])
def test_an_episodes_chance_outcomes_do_not_depend_on_how_earlier_episodes_were_played(block, monkeypatch):
    # Two envs with one seed: the first folds or calls at once, the second plays on (into the second round and its
    # public card). Their next episodes must still meet the same chance outcomes, as evaluating two policies on the
    # same seeded episodes needs. With a block of one draw per episode, Leduc's later cards come from the episode's
    # own generator (what a game with more chance nodes than the block does).
    if block is not None:
        monkeypatch.setattr(openspiel_shimmy, "CHANCE_BLOCK", block)

    def next_episode(moves):
        env = openspiel_env("leduc_poker")
        env.reset(seed=5)
        rng = np.random.default_rng(0)
        for _ in range(moves):
            if env.game_state.is_terminal():
                break
            legal = np.flatnonzero(env.infos[env.agent_selection]["action_mask"])
            env.step(int(legal[0] if moves == 1 else rng.choice(legal)))
        deals = []
        for _ in range(3):
            env.reset()
            while not env.game_state.is_terminal():  # both call to the end: the public card is dealt too
                env.step(1)
            deals.append(env.game_state.history())
        return deals

    assert next_episode(1) == next_episode(12)
    assert len({str(d) for d in next_episode(1)}) > 1


def test_games_seeded_by_a_game_parameter_reset_with_a_seed_and_replay():
    # deep_sea takes its randomness as the game parameter "seed" (a C++ int): a 63-bit seed used to fail there.
    def layouts(seed):
        env = openspiel_env("deep_sea")
        env.reset(seed=seed)
        out = [env._env.get_parameters()["seed"]]
        env.reset()
        return out + [env._env.get_parameters()["seed"]]

    assert layouts(3) == layouts(3) and layouts(3) != layouts(4)
    assert all(0 <= s < 2**31 for s in layouts(3))
    api_test(openspiel_env("deep_sea"), num_cycles=20)


@pytest.mark.parametrize("game", ["matrix_rps", "goofspiel(num_cards=4)"])
def test_simultaneous_move_games_end_terminated_and_not_truncated(game):
    env = openspiel_env(game)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        for agent in env.agent_iter():
            _, _, term, trunc, info = env.last()
            if term or trunc:
                assert term and not trunc, f"{game}: {agent} ended with terminated={term}, truncated={trunc}"
                env.step(None)
                continue
            env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        assert env.game_state.is_terminal()
        env.reset()


@pytest.mark.parametrize("game_name", ["kuhn_poker", "leduc_poker"])
def test_play_in_the_env_returns_what_openspiel_computes_for_the_same_policies(game_name):
    # Player 1 always bets / raises (the betting rounds run long), player 0 plays a random table: the mean return
    # simulated through the adapter must be OpenSpiel's exact value of the same tables.
    from marljoint.best_response.opponents import simulate_profiles

    game = OpenSpielGame(game_name)
    legal = game.legal_mask(1)
    aggressive = np.zeros(legal.shape)
    aggressive[np.arange(len(legal)), legal.shape[1] - 1 - np.argmax(legal[:, ::-1], axis=1)] = 1.0
    rng = np.random.default_rng(2)
    tables = [game.check_table(rng.random((game.num_information_states(0), game.num_actions)), 0), aggressive]
    exact = game.values(tables)
    env = PettingZooJointEnv(functools.partial(openspiel_env, game_name), num_envs=16, seed=0)
    episodes = 2000
    means, errors = simulate_profiles(env, [[game.policy(t, p)] for p, t in enumerate(tables)], np.zeros((1, 2), int),
                                      episodes, seed=1)
    assert abs(means[0, 1] - exact[1]) < 4 * errors[0, 1] + 1e-9, (means, errors, exact)


@pytest.mark.parametrize("game_string", ["kuhn_poker", "leduc_poker", "kuhn_poker(players=3)"])
def test_exact_values_from_the_terminal_histories_are_openspiels(game_string, monkeypatch):
    # Values summed over the terminal histories (chance probability x each player's realisation weight x return)
    # must equal OpenSpiel's own expected_returns, for single profiles and for a whole meta-game of profiles.
    from marljoint.best_response import openspiel_game

    game = OpenSpielGame(pyspiel.load_game(game_string))
    assert game._terminals is not None
    n = game.num_players
    rng = np.random.default_rng(0)
    members = [[game.check_table(rng.random((game.num_information_states(p), game.num_actions)) ** 3, p)
                for _ in range(3)] for p in range(n)]
    profiles = rng.integers(0, 3, size=(5, n))

    def openspiel_values(tables):
        joint = pyspiel.TabularPolicy(game.policy_dict(tables))
        return np.asarray(pyspiel.expected_returns(game.game.new_initial_state(), joint, -1, True))

    want = np.stack([openspiel_values([members[p][k] for p, k in enumerate(profile)]) for profile in profiles])
    np.testing.assert_allclose(game.profile_values(members, profiles), want, atol=1e-10)
    first = [m[0] for m in members]
    np.testing.assert_allclose(game.values(first), openspiel_values(first), atol=1e-10)
    monkeypatch.setattr(openspiel_game, "MAX_TERMINALS", 10)  # a game with more terminals uses OpenSpiel's code
    large = OpenSpielGame(pyspiel.load_game(game_string))
    assert large._terminals is None
    np.testing.assert_allclose(large.profile_values(members, profiles), want, atol=1e-10)


def test_network_policies_are_tabulated_from_the_observations_the_env_gives():
    config = JointTrainerConfig(num_envs=8, rollout_steps=8, minibatch_size=64, n_epochs=1, share_parameters=False)
    env = PettingZooJointEnv(functools.partial(openspiel_env, "kuhn_poker"), num_envs=8, seed=0)
    trainer = JointMultiAgentTrainer.from_env(env, config)
    trainer.update(trainer.collect_rollout())
    game = known_game("openspiel:kuhn_poker")
    tables = game.tables([trainer.agent_policy(0), trainer.agent_policy(1)])
    state = game.game.new_initial_state()
    state.apply_action(0)
    state.apply_action(1)  # player 0 holds the jack
    row = game.keys[0].index(state.information_state_string(0))
    obs = np.asarray(state.information_state_tensor(0), np.float32)
    import torch

    probs = trainer.agent_policy(0).action_probs(torch.as_tensor(obs)[None])[0][0].numpy()
    np.testing.assert_allclose(tables[0][row], probs, rtol=1e-5)
    assert 0.0 < game.nash_conv(tables) < 4.0


def test_games_that_cannot_be_tabulated_are_refused_with_the_count_and_the_alternative():
    with pytest.raises(ValueError, match=r"more than 100 information states.*best_response_gain"):
        OpenSpielGame("leduc_poker", max_information_states=100)


# ------------------------------------------------------------------ the command line
def run(argv):
    """Runs one ``marljoint psro`` / ``marljoint nfsp`` command line in this process; returns its exit code."""
    import argparse

    from marljoint.cli.best_response import register

    parser = argparse.ArgumentParser(prog="marljoint")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


def test_psro_exact_on_openspiels_kuhn_reaches_the_bundled_kuhns_figure_and_exports_its_policy(tmp_path):
    assert run(["psro", "--env", "openspiel:kuhn_poker", "--oracle", "exact", "--out", str(tmp_path / "p")]) == 0
    with open(tmp_path / "p" / "metrics.csv", newline="") as handle:
        last = list(csv.DictReader(handle))[-1]
    assert float(last["exploitability"]) < 0.01  # the exploitability column, after 10 iterations
    policy = json.loads((tmp_path / "p" / "openspiel_policy.json").read_text())
    loaded = {key: [tuple(pair) for pair in pairs] for key, pairs in policy.items()}
    measured = float(last["exploitability"])
    assert pyspiel.nash_conv(pyspiel.load_game("kuhn_poker"), loaded) / 2 == pytest.approx(measured, abs=1e-9)
    assert run(["nfsp", "--env", "openspiel:kuhn_poker", "--iterations", "1", "--num-envs", "8",
                "--out", str(tmp_path / "n")]) == 0
    assert (tmp_path / "n" / "openspiel_policy.json").is_file()


def test_openspiel_games_solve_ppo_meta_games_with_prd_and_exact_ones_with_nash(tmp_path):
    from marljoint.run.recipes import OPENSPIEL_RECIPE, RECIPES, auto_meta_solver
    from marljoint.run.spec import load_run_spec

    assert auto_meta_solver(OPENSPIEL_RECIPE, 2) == "prd"
    assert auto_meta_solver(OPENSPIEL_RECIPE, 2, "exact") == "nash"  # the double oracle keeps an exact solver
    assert auto_meta_solver(OPENSPIEL_RECIPE, 3, "exact") == "regret_matching"
    assert auto_meta_solver(RECIPES["kuhn_poker_v0"], 2) == "nash"
    assert auto_meta_solver(RECIPES["kuhn_poker_v0"], 3) == "regret_matching"

    def solver_of(*extra):
        out = tmp_path / str(len(list(tmp_path.iterdir())))
        argv = ["psro", "--env", "openspiel:kuhn_poker", "--iterations", "1", "--br-steps", "256", "--num-envs", "8"]
        assert run([*argv, *extra, "--out", str(out)]) == 0
        return load_run_spec(out).psro.meta_solver

    assert solver_of() == "prd"
    assert solver_of("--meta-solver", "nash") == "nash"


def test_marljoint_train_and_eval_take_an_openspiel_game(tmp_path, capsys):
    from marljoint.cli import main

    out = tmp_path / "run"
    argv = ["train", "--env", "openspiel:leduc_poker", "--total-steps", "1024", "--num-envs", "4", "--out", str(out)]
    assert main(argv + ["--quiet"]) == 0
    assert 'env = "openspiel:leduc_poker"' in (out / "config.toml").read_text()
    assert main(["eval", str(out), "--episodes", "4"]) == 0
    assert "player_0" in capsys.readouterr().out


def test_an_env_restored_without_the_cached_tensor_facts_plays_on_the_same():
    # Env snapshots written before the information-state flag and tensor shape were cached lack both attributes.
    fresh, restored = openspiel_env("leduc_poker"), openspiel_env("leduc_poker")
    for env in (fresh, restored):
        env.reset(seed=7)
    for name in ("_information_state", "_tensor_shape"):
        restored.__dict__.pop(name, None)
    assert restored._information_state is None and restored._tensor_shape is None
    for _ in range(3):
        for env in (fresh, restored):
            env.step(int(np.flatnonzero(env.infos[env.agent_selection]["action_mask"])[0]))
        for agent in fresh.agents:
            np.testing.assert_array_equal(fresh.observe(agent), restored.observe(agent))
    assert restored._information_state is True and restored._tensor_shape == fresh._tensor_shape
