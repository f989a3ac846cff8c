"""Frozen policies in the seats of a JointEnv: who acts, which rows the learner trains on, and simulation."""

import numpy as np
import pytest
import torch
from _kuhn_tables import ALWAYS_PASS

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv, compute_gae
from marljoint.best_response.games import KuhnGame
from marljoint.best_response.opponents import (
    LEARNER,
    AnticipatoryAssigner,
    MetaStrategyAssigner,
    PopulationEnv,
    mixture_profiles,
    simulate_profiles,
)
from marljoint.best_response.population import ConstantPolicy, KuhnTablePolicy, PolicyMixture
from marljoint_envs import kuhn_poker_v0, matrix_game_v0

ALWAYS_BET = np.tile([0.0, 1.0], (6, 1))


def kuhn_env(num_envs=4):
    return PettingZooJointEnv(kuhn_poker_v0.raw_env, num_envs=num_envs, seed=0)


def test_acting_marks_only_the_learners_decisions():
    env = PopulationEnv(kuhn_env(), [[], [KuhnTablePolicy(ALWAYS_BET, 1)]], MetaStrategyAssigner([[1.0], [1.0]], [0]))
    state = env.reset(seed=0)
    assert (env.controllers == [[LEARNER, 0]] * 4).all()
    np.testing.assert_array_equal(state.acting, [[True, False]] * 4)
    # The learner passes: player 1 (always bet) moves next, inside the wrapper, so its seat never acts here.
    for _ in range(12):
        step = env.step([np.zeros((4, 2), dtype=np.int64)])
        assert not step.acting[:, 1].any()
    # Every finished episode went "p", "b" (player 1 bets), then player 0's fold: 3 moves, player 0 loses 1.
    episodes = env.drain_log()
    assert episodes and all(e.returns.tolist() == [-1.0, 1.0] for e in episodes)
    assert env.drain_log() == []


def test_controllers_are_drawn_per_episode_and_kept_for_it():
    members = [[ConstantPolicy([np.eye(3)[k]]) for k in range(3)] for _ in range(2)]
    env = PopulationEnv(
        PettingZooJointEnv(lambda: matrix_game_v0.parallel_env(game="rps"), num_envs=64, seed=0),
        members,
        MetaStrategyAssigner([np.array([0.5, 0.5, 0.0]), np.array([0.0, 0.0, 1.0])]),
    )
    env.reset(seed=3)
    for _ in range(5):
        env.step(None)
    episodes = env.drain_log()
    assert len(episodes) == 5 * 64
    controllers = np.stack([e.controllers for e in episodes])
    assert set(controllers[:, 1]) == {2} and set(controllers[:, 0]) == {0, 1}
    # Rock beats scissors (+1); paper loses to scissors (-1).
    for e in episodes:
        assert e.returns[0] == (1.0 if e.controllers[0] == 0 else -1.0)


def test_anticipatory_assigner_frequency():
    assign = AnticipatoryAssigner(0.25, 3)
    controllers = assign(np.random.default_rng(0), np.arange(20_000))
    assert set(np.unique(controllers)) == {LEARNER, 0}
    assert abs((controllers == LEARNER).mean() - 0.25) < 0.01
    with pytest.raises(ValueError, match="must lie in"):
        AnticipatoryAssigner(1.5, 2)


def test_frozen_rows_never_reach_the_learner():
    env = PopulationEnv(kuhn_env(8), [[], [KuhnTablePolicy(ALWAYS_PASS, 1)]], MetaStrategyAssigner([[1.0], [1.0]], [0]))
    config = JointTrainerConfig(
        num_envs=8, rollout_steps=16, minibatch_size=32, share_parameters=False, hidden_sizes=(8,)
    )
    trainer = JointMultiAgentTrainer.from_env(env, config)
    frozen_before = [p.clone() for p in trainer.policies[0].parameters()]
    rollout = trainer.collect_rollout()
    assert rollout.valid[:, :, 0].any() and not rollout.valid[:, :, 1].any()
    advantages, returns = trainer.compute_advantages(rollout)
    assert (advantages[:, :, 1] == 0).all() and (returns[:, :, 1] == 0).all()
    stats = trainer.update(rollout, active=[True, False])
    assert np.isfinite(stats.policy_loss[0])
    # Both seats live in one stacked network here: the learner's member moved, the frozen member did not.
    after = list(trainer.policies[0].parameters())
    assert any(not torch.equal(a[0], b[0]) for a, b in zip(after, frozen_before))
    assert all(torch.equal(a[1], b[1]) for a, b in zip(after, frozen_before))


def test_gae_gives_a_frozen_episode_no_credit():
    # One agent, rows: [learner episode: reward 1, terminated] [frozen episode: 2 rows, reward 5 at its end].
    rewards = torch.tensor([1.0, 0.0, 5.0])
    values = torch.tensor([0.5, 9.0, 9.0])
    terminated = torch.tensor([True, False, True])
    valid = torch.tensor([True, False, False])
    advantages, returns = compute_gae(
        rewards, values, terminated, torch.zeros(3, dtype=torch.bool), torch.tensor(0.0), 1.0, 1.0, valid=valid
    )
    assert advantages.tolist() == [0.5, 0.0, 0.0] and returns.tolist() == [1.0, 0.0, 0.0]


def test_simulate_profiles_exact_in_a_deterministic_game():
    members = [[ConstantPolicy([np.eye(3)[k]]) for k in range(3)] for _ in range(2)]
    env = PettingZooJointEnv(lambda: matrix_game_v0.parallel_env(game="rps"), num_envs=3, seed=0)
    profiles = np.array([[0, 0], [0, 1], [2, 1], [1, 0], [2, 2]])
    means, errors = simulate_profiles(env, members, profiles, 4, seed=0)
    np.testing.assert_array_equal(means[:, 0], [0.0, -1.0, 1.0, 1.0, 0.0])
    np.testing.assert_array_equal(means[:, 1], -means[:, 0])
    assert (errors == 0).all()
    empty, _ = simulate_profiles(env, members, np.zeros((0, 2), dtype=np.int64), 4, seed=0)
    assert empty.shape == (0, 2)
    with pytest.raises(ValueError, match="episodes_per_profile"):
        simulate_profiles(env, members, profiles, 0, seed=0)


def test_simulated_kuhn_values_match_the_exact_ones():
    rng = np.random.default_rng(0)
    tables = [[rng.dirichlet(np.ones(2), size=6) for _ in range(2)] for _ in range(2)]
    members = [[KuhnTablePolicy(t, p) for t in tables[p]] for p in range(2)]
    profiles = np.array([[0, 1], [1, 0]])
    means, errors = simulate_profiles(kuhn_env(32), members, profiles, 1000, seed=1)
    exact = KuhnGame().profile_values(tables, profiles)
    assert np.all(np.abs(means - exact) < 4.5 * errors + 1e-9)
    assert np.all(errors < 0.08)


def test_mixture_profiles_and_assigner_errors():
    coin = ConstantPolicy([np.ones(2)])
    mixtures = [PolicyMixture([coin, coin], [0.0, 1.0]), PolicyMixture([coin])]
    members, profiles = mixture_profiles(mixtures, 10, np.random.default_rng(0))
    assert [len(m) for m in members] == [2, 1] and (profiles == [1, 0]).all()
    with pytest.raises(ValueError, match="is not a probability vector"):
        MetaStrategyAssigner([np.array([0.5, 0.2])])
    with pytest.raises(ValueError, match="out of range"):
        MetaStrategyAssigner([np.ones(1)], [1])
    with pytest.raises(ValueError, match="pass one list of frozen policies per seat"):
        PopulationEnv(kuhn_env(), [[]], MetaStrategyAssigner([[1.0], [1.0]], [0]))
    env = PopulationEnv(kuhn_env(), [[], []], MetaStrategyAssigner([[1.0], [1.0]], [0]))
    with pytest.raises(ValueError, match="which has 0 members"):
        env.reset(seed=0)
    with pytest.raises(RuntimeError, match="before reset"):
        PopulationEnv(kuhn_env(), [[], []], MetaStrategyAssigner([[1.0], [1.0]], [0, 1])).step(None)


def always_pass_return(seed: int) -> float:
    """Player 0's return in one Kuhn poker game that both players check down, played on the raw AEC env."""
    env = kuhn_poker_v0.raw_env()
    env.reset(seed=seed)
    total = 0.0
    for agent in env.agent_iter():
        _, reward, terminated, truncated, _ = env.last()
        if agent == env.possible_agents[0]:
            total += reward
        env.step(None if terminated or truncated else 0)
    return total


def test_common_random_numbers_give_every_profile_the_same_deals():
    # Four copies of one "always pass" table: every profile's return is decided by the cards alone.
    members = [[KuhnTablePolicy(ALWAYS_PASS, p) for _ in range(2)] for p in range(2)]
    profiles = np.array([[0, 0], [1, 1], [0, 1]])
    seeds = np.arange(100, 124)
    env = kuhn_env(5)
    means, errors = simulate_profiles(env, members, profiles, 24, seed=3, episode_seeds=seeds)
    expected = np.mean([always_pass_return(int(s)) for s in seeds])
    np.testing.assert_array_equal(means[:, 0], [expected] * 3)  # the same 24 deals for every profile
    np.testing.assert_array_equal(errors[0], errors[1])
    assert env.episode_seed_source is None  # the hook is taken off again
    fresh, _ = simulate_profiles(env, members, profiles, 24, seed=3)
    assert len(set(fresh[:, 0].tolist())) > 1  # without them each profile meets its own deals


def test_common_random_numbers_reject_bad_seeds_and_envs_that_cannot_take_them():
    members = [[KuhnTablePolicy(ALWAYS_PASS, p)] for p in range(2)]
    profiles = np.array([[0, 0]])
    with pytest.raises(ValueError, match=r"episode_seeds has shape \(3,\).*one integer seed per repetition \(4\)"):
        simulate_profiles(kuhn_env(), members, profiles, 4, seed=0, episode_seeds=[1, 2, 3])
    with pytest.raises(ValueError, match="dtype float64; pass one integer seed per repetition"):
        simulate_profiles(kuhn_env(), members, profiles, 2, seed=0, episode_seeds=[1.0, 2.0])

    class NoSeedHook:
        spec = kuhn_env().spec
        num_envs = 4

    with pytest.raises(TypeError, match="NoSeedHook cannot seed its copies' resets"):
        simulate_profiles(NoSeedHook(), members, profiles, 2, seed=0, episode_seeds=[1, 2])


def test_the_episode_seed_source_seeds_the_resets_it_chooses():
    env, reference = kuhn_env(3), PettingZooJointEnv(kuhn_poker_v0.raw_env, num_envs=1, seed=0)
    asked = []

    def source(copy):
        asked.append(copy)
        return 77 if copy == 1 else None

    env.episode_seed_source = source
    first = env.reset(seed=0)
    assert asked == [0, 1, 2]
    seeded = reference.reset(seed=77)
    np.testing.assert_array_equal(first.obs[0][1], seeded.obs[0][0])
    plain = PettingZooJointEnv(kuhn_poker_v0.raw_env, num_envs=3, seed=0).reset(seed=0)
    np.testing.assert_array_equal(first.obs[0][[0, 2]], plain.obs[0][[0, 2]])  # the others keep their streams
    assert not np.array_equal(plain.obs[0][1], seeded.obs[0][0])  # seed 77 deals copy 1 other cards than its own
    env.episode_seed_source = lambda copy: "seven"
    with pytest.raises(TypeError, match="episode_seed_source returned 'seven' for copy 0; return an int or None"):
        env.reset(seed=0)
