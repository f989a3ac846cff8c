"""Known games: tables of torch policies, batched profile values, and exact NashConv of policies and mixtures."""

import itertools

import numpy as np
import pytest
import torch
from _kuhn_tables import ALWAYS_PASS, UNIFORM, equilibrium

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.best_response import exploitability, nash_conv
from marljoint.best_response.games import KuhnGame, MatrixGame
from marljoint.best_response.kuhn import (
    kuhn_infoset_observations,
    kuhn_mixture_table,
    kuhn_policy_value,
    kuhn_profile_values,
    tables_from_policy,
)
from marljoint.best_response.population import ConstantPolicy, KuhnTablePolicy, PolicyMixture, UniformPolicy
from marljoint.best_response.resolve import resolve_game
from marljoint.run.registry import known_game
from marljoint_envs import kuhn_poker_v0, matrix_game_v0


def kuhn_trainer(seed=0):
    env = PettingZooJointEnv(kuhn_poker_v0.raw_env, num_envs=2, seed=0)
    config = JointTrainerConfig(num_envs=2, rollout_steps=4, share_parameters=False, seed=seed, hidden_sizes=(8,))
    return JointMultiAgentTrainer.from_env(env, config)


def test_kuhn_literature_values_through_policy_objects():
    game = KuhnGame()
    env = PettingZooJointEnv(kuhn_poker_v0.raw_env, num_envs=1, seed=0)
    uniform = [UniformPolicy(env.spec.actions[p]) for p in range(2)]
    assert nash_conv(game, uniform) == pytest.approx(11 / 12, abs=1e-9)
    assert exploitability("kuhn_poker", uniform) == pytest.approx(11 / 24, abs=1e-9)
    always_pass = [KuhnTablePolicy(ALWAYS_PASS, p) for p in range(2)]
    assert nash_conv("kuhn_poker_v0", always_pass) == pytest.approx(2.0, abs=1e-9)
    for alpha in (0.0, 0.2, 1 / 3):
        tables = equilibrium(alpha)
        assert abs(nash_conv(game, [KuhnTablePolicy(t, p) for p, t in enumerate(tables)])) < 1e-6
        assert abs(nash_conv(game, tables)) < 1e-12


def test_torch_policy_tables_match_tables_from_policy():
    trainer = kuhn_trainer(seed=3)
    policies = [trainer.agent_policy(p) for p in range(2)]

    def policy_fn(player, observations):
        with torch.no_grad():
            return policies[player].action_probs(torch.as_tensor(observations))[0].double().numpy()

    expected = tables_from_policy(policy_fn)
    game = KuhnGame()
    for player in range(2):
        np.testing.assert_allclose(game.table(policies[player], player), expected[player], atol=1e-12)
    assert nash_conv(game, policies) == pytest.approx(nash_conv(game, expected), abs=1e-12)


def test_kuhn_policies_are_queried_once_in_one_batch():
    calls = []

    class Recording(UniformPolicy):
        def action_probs(self, obs, mask=None):
            calls.append(tuple(obs.shape))
            return super().action_probs(obs, mask)

    env = PettingZooJointEnv(kuhn_poker_v0.raw_env, num_envs=1, seed=0)
    nash_conv(KuhnGame(), [Recording(env.spec.actions[p]) for p in range(2)])
    assert calls == [(6, 9), (6, 9)]


def test_mixture_uses_the_reach_weighted_behaviour_policy():
    rng = np.random.default_rng(4)
    members = [rng.dirichlet(np.ones(2), size=6) for _ in range(3)]
    weights = rng.dirichlet(np.ones(3))
    mixture = PolicyMixture([KuhnTablePolicy(m, 0) for m in members], weights)
    game = KuhnGame()
    np.testing.assert_allclose(game.table(mixture, 0), kuhn_mixture_table(members, weights, 0), atol=1e-6)
    opponent = rng.dirichlet(np.ones(2), size=6)
    expected = sum(w * kuhn_policy_value([m, opponent])[0] for w, m in zip(weights, members))
    assert game.values([game.table(mixture, 0), opponent])[0] == pytest.approx(expected, abs=1e-6)


def test_kuhn_profile_values_match_the_tree_walk():
    rng = np.random.default_rng(5)
    stack_0 = rng.dirichlet(np.ones(2), size=(7, 6))
    stack_1 = rng.dirichlet(np.ones(2), size=(7, 6))
    values = kuhn_profile_values(stack_0, stack_1)
    for k in range(7):
        assert values[k] == pytest.approx(kuhn_policy_value([stack_0[k], stack_1[k]])[0], abs=1e-12)
    game = KuhnGame()
    profiles = np.array([[2, 0], [0, 6], [3, 3]])
    both = game.profile_values([list(stack_0), list(stack_1)], profiles)
    for row, (i, j) in enumerate(profiles):
        assert both[row, 0] == pytest.approx(kuhn_policy_value([stack_0[i], stack_1[j]])[0], abs=1e-12)
        assert both[row, 1] == pytest.approx(-both[row, 0], abs=1e-15)
    with pytest.raises(ValueError, match=r"two stacks of the same length K"):
        kuhn_profile_values(stack_0, stack_1[:2])


def test_matrix_profile_values_match_a_naive_loop():
    rng = np.random.default_rng(6)
    payoffs = [rng.normal(size=(2, 3, 2)) for _ in range(3)]
    game = MatrixGame(payoffs)
    members = [[rng.dirichlet(np.ones(n)) for _ in range(2)] for n in (2, 3, 2)]
    profiles = np.array(list(itertools.product(range(2), repeat=3)))
    values = game.profile_values(members, profiles)
    for row, profile in enumerate(profiles):
        strategies = [members[p][i] for p, i in enumerate(profile)]
        for player in range(3):
            naive = sum(
                payoffs[player][a] * np.prod([strategies[q][a[q]] for q in range(3)])
                for a in itertools.product(range(2), range(3), range(2))
            )
            assert values[row, player] == pytest.approx(naive, abs=1e-12)


def test_matrix_game_nash_conv_of_policies():
    game = known_game("matrix_game_v0", {"game": "rps"})
    rock = ConstantPolicy([np.array([1.0, 0.0, 0.0])])
    uniform = ConstantPolicy([np.full(3, 1 / 3)])
    assert nash_conv(game, [rock, rock]) == pytest.approx(2.0)
    assert nash_conv(game, [uniform, uniform]) == pytest.approx(0.0, abs=1e-7)
    assert game.is_symmetric()
    assert known_game("matrix_game_v0", {"game": "prisoners_dilemma"}).is_symmetric()
    assert not MatrixGame([np.eye(2), np.zeros((2, 2))]).is_symmetric()
    value, table = game.best_response([np.array([1.0, 0.0, 0.0]), np.full(3, 1 / 3)], 1)
    assert value == pytest.approx(1.0) and table.tolist() == [0.0, 1.0, 0.0]
    custom = known_game("matrix_game_v0", {"payoffs": matrix_game_v0.GAMES["matching_pennies"]})
    assert custom.shape == (2, 2)


def test_resolve_game_errors():
    assert isinstance(resolve_game("kuhn_poker"), KuhnGame)
    assert isinstance(resolve_game([np.eye(2), -np.eye(2)]), MatrixGame)
    assert known_game("bucket_brigade_v0") is None
    with pytest.raises(ValueError, match=r"unknown game 'chess'"):
        resolve_game("chess")
    # The library looks no bundled env up: a matrix game by name comes from the env registry.
    with pytest.raises(ValueError, match=r"known_game\('matrix_game_v0', \{'game': 'rps'\}\)"):
        resolve_game("rps")
    with pytest.raises(ValueError, match="best_response_gain"):
        resolve_game(42)
    with pytest.raises(ValueError, match="got 1 policies for kuhn_poker, which has 2 players"):
        nash_conv("kuhn_poker", [UNIFORM])
    with pytest.raises(ValueError, match="player=2"):
        KuhnGame().table(UNIFORM, 2)
    assert kuhn_infoset_observations(0).shape == (6, 9)
