"""PSRO: the three steps, exact and PPO oracles, simulation, determinism, resume, and configuration errors."""

import numpy as np
import pytest
import torch

from marljoint import JointTrainerConfig
from marljoint.best_response import PSRO, PSRO_METRICS, PsroConfig
from marljoint.best_response.games import KuhnGame
from marljoint.best_response.population import UniformPolicy
from marljoint.run.registry import known_game
from marljoint_envs import bucket_brigade_v0, kuhn_poker_v0, matrix_game_v0

SMALL_PPO = JointTrainerConfig(
    num_envs=32,
    rollout_steps=4,
    gamma=1.0,
    gae_lambda=1.0,
    learning_rate=1e-2,
    ent_coef=0.0,
    n_epochs=4,
    minibatch_size=128,
    hidden_sizes=(16,),
    share_parameters=False,
)


def biased_rps():
    return matrix_game_v0.parallel_env(game="biased_rps")


def test_exact_oracle_solves_kuhn_within_ten_iterations():
    psro = PSRO(kuhn_poker_v0.raw_env, PsroConfig(oracle="exact", meta_solver="nash", iterations=10), game=KuhnGame())
    history = psro.run()
    assert [row["iteration"] for row in history] == list(range(11))
    assert history[0]["exploitability"] == pytest.approx(11 / 24)
    assert min(row["exploitability"] for row in history) < 0.01
    assert history[-1]["exploitability"] < 0.01
    assert psro.meta_game.shape == (11, 11) and psro.meta_game.is_complete
    # The exact oracle's policies are exact best responses: no regret.
    assert all(abs(row["br_regret/player_0"]) < 1e-9 for row in history[1:])
    assert psro.exploitability() == pytest.approx(history[-1]["exploitability"])


def test_three_steps_grow_only_new_entries():
    psro = PSRO(kuhn_poker_v0.raw_env, PsroConfig(oracle="exact"), game=KuhnGame())
    assert psro.meta_game.shape == (1, 1) and isinstance(psro.populations[0][0], UniformPolicy)
    psro.add_best_responses()
    assert [len(p) for p in psro.populations] == [2, 2] and psro.meta_game.shape == (1, 1)
    metrics = psro.update_meta_game()
    assert metrics["meta_game_entries"] == 3 and psro.meta_game.shape == (2, 2)
    previous = psro.strategies
    metrics = psro.solve_meta_game()
    assert metrics["psro_gap"] == pytest.approx(psro.meta_game.nash_conv(previous))
    assert metrics["meta_nash_conv"] == pytest.approx(0.0, abs=1e-9)


def test_ppo_oracle_on_a_matrix_game_reaches_low_exploitability():
    config = PsroConfig(iterations=10, br_steps=1024, trainer=SMALL_PPO, seed=0)
    psro = PSRO(biased_rps, config, game=known_game("matrix_game_v0", {"game": "biased_rps"}))
    history = psro.run()
    assert history[0]["exploitability"] > 1.0
    assert history[-1]["exploitability"] < 0.02
    row = history[-1]
    assert set(PSRO_METRICS) >= {key.replace("player_0", "<agent>").replace("player_1", "<agent>") for key in row}
    assert np.isfinite(row["br_explained_var/player_0"]) and row["br_env_steps"] == 1024


def test_symmetric_population_and_simulated_meta_game():
    config = PsroConfig(
        iterations=3, br_steps=512, trainer=SMALL_PPO, symmetric=True, evaluation="simulation", episodes_per_entry=16
    )
    psro = PSRO(biased_rps, config, game=known_game("matrix_game_v0", {"game": "biased_rps"}))
    history = psro.run()
    assert psro.populations[0] is psro.populations[1] and len(psro.populations[0]) == 4
    np.testing.assert_allclose(psro.meta_game.payoffs[1], psro.meta_game.payoffs[0].T)
    assert history[-1]["eval_episodes"] > 0 and np.allclose(psro.strategies[0], psro.strategies[1])


def parameters_of(psro):
    return [torch.cat([p.flatten() for p in member.parameters()]) for member in psro.populations[0][1:]]


def test_same_seed_same_run_and_resume_continues_identically(tmp_path):
    config = PsroConfig(iterations=3, br_steps=256, trainer=SMALL_PPO, evaluation="simulation", episodes_per_entry=8)
    game = known_game("matrix_game_v0", {"game": "biased_rps"})
    straight = PSRO(biased_rps, config, game=game)
    straight.run()
    again = PSRO(biased_rps, config, game=game)
    again.run(iterations=2)
    again.save(tmp_path)
    resumed = PSRO.load(tmp_path, biased_rps, game=game)
    assert resumed.iteration == 2 and len(resumed.history) == 3
    resumed.run()
    for a, b in zip(straight.meta_game.payoffs, resumed.meta_game.payoffs):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(parameters_of(straight), parameters_of(resumed)):
        assert torch.equal(a, b)
    assert resumed.history[-1]["wall_time"] >= resumed.history[-2]["wall_time"]
    np.testing.assert_array_equal(straight.strategies[0], resumed.strategies[0])


def test_many_players_with_regret_matching_on_bucket_brigade():
    def env_fn():
        return bucket_brigade_v0.parallel_env(
            scenario="minimal_specialization", num_houses=4, num_agents=3, max_nights=6, min_nights=2
        )

    trainer = SMALL_PPO.replace(num_envs=6, rollout_steps=8, gamma=0.99, gae_lambda=0.95, minibatch_size=48)
    config = PsroConfig(
        iterations=1, meta_solver="regret_matching", br_steps=48, trainer=trainer, episodes_per_entry=1, eval_num_envs=8
    )
    psro = PSRO(env_fn, config)
    history = psro.run()
    assert psro.meta_game.shape == (2, 2, 2) and np.isnan(history[-1]["exploitability"])
    assert "br_explained_var/agent_2" in history[-1] and np.isfinite(history[-1]["psro_gap"])


def test_leduc_through_the_aec_adapter_smoke():
    leduc = pytest.importorskip("pettingzoo.classic.leduc_holdem_v4")
    trainer = SMALL_PPO.replace(num_envs=8, rollout_steps=8, minibatch_size=64)
    config = PsroConfig(iterations=1, br_steps=64, trainer=trainer, episodes_per_entry=2, eval_num_envs=8)
    psro = PSRO(leduc.env, config)
    psro.run()
    assert psro.meta_game.shape == (2, 2) and psro.meta_game.is_complete


def test_configuration_errors_name_the_field_and_fix():
    with pytest.raises(ValueError, match=r"meta_solver='best' is not one of"):
        PsroConfig(meta_solver="best")
    with pytest.raises(ValueError, match="br_steps must be a positive integer, got 0"):
        PsroConfig(br_steps=0)
    with pytest.raises(ValueError, match=r"oracle='dqn' is not one of \['ppo', 'exact'\]"):
        PsroConfig(oracle="dqn")
    with pytest.raises(ValueError, match="oracle='exact' needs the env's known game tree"):
        PSRO(kuhn_poker_v0.raw_env, PsroConfig(oracle="exact"))
    with pytest.raises(ValueError, match="is not symmetric"):
        PSRO(kuhn_poker_v0.raw_env, PsroConfig(oracle="exact", symmetric=True), game=KuhnGame())
    with pytest.raises(ValueError, match="has 2 players but the env has 3 agents"):
        PSRO(lambda: matrix_game_v0.parallel_env(game="three_player"), PsroConfig(), game=KuhnGame())
    with pytest.raises(ValueError, match="use 'prd'"):
        PSRO(lambda: matrix_game_v0.parallel_env(game="three_player"), PsroConfig(br_steps=1, trainer=SMALL_PPO))
    assert PsroConfig.from_dict(PsroConfig(seed=3).to_dict()) == PsroConfig(seed=3)
    with pytest.raises(ValueError, match=r"unknown PsroConfig field\(s\) \['iters'\]"):
        PsroConfig.from_dict({"iters": 3})


def test_warm_start_copies_the_newest_member_into_the_learners_slot():
    from marljoint import JointMultiAgentTrainer, PettingZooJointEnv
    from marljoint.best_response.oracles import warm_start_seat

    env = PettingZooJointEnv(biased_rps, num_envs=2)
    source = JointMultiAgentTrainer.from_env(env, SMALL_PPO.replace(seed=1, num_envs=2))
    fresh = JointMultiAgentTrainer.from_env(env, SMALL_PPO.replace(seed=2, num_envs=2))
    member = source.agent_policy(1)
    assert warm_start_seat(fresh, 1, member)
    for (name, mine), (_, theirs) in zip(fresh.policies[0].named_parameters(), source.policies[0].named_parameters()):
        assert torch.equal(mine[1], theirs[1]), name
        if name.endswith("weight"):  # the other seat keeps its own fresh weights (biases start at zero in both)
            assert not torch.equal(mine[0], theirs[0]), name
    assert not warm_start_seat(fresh, 0, UniformPolicy(env.spec.groups[0].action))
    # another architecture is left alone
    other = JointMultiAgentTrainer.from_env(env, SMALL_PPO.replace(hidden_sizes=(8,), num_envs=2))
    assert not warm_start_seat(fresh, 0, other.agent_policy(0))


def test_warm_start_policy_scale_shrinks_only_the_copied_policy_output_layer():
    from marljoint import JointMultiAgentTrainer, PettingZooJointEnv
    from marljoint.best_response.oracles import warm_start_seat

    env = PettingZooJointEnv(biased_rps, num_envs=2)
    source = JointMultiAgentTrainer.from_env(env, SMALL_PPO.replace(seed=1, num_envs=2))
    fresh = JointMultiAgentTrainer.from_env(env, SMALL_PPO.replace(seed=2, num_envs=2))
    with torch.no_grad():
        source.policies[0].actor_head.bias.fill_(0.5)  # a nonzero bias, to see it scaled too
    assert warm_start_seat(fresh, 1, source.agent_policy(1), policy_scale=0.25)
    for (name, mine), (_, theirs) in zip(fresh.policies[0].named_parameters(), source.policies[0].named_parameters()):
        expected = theirs[1] * 0.25 if name.startswith("actor_head.") else theirs[1]
        assert torch.allclose(mine[1], expected), name
    assert warm_start_seat(fresh, 1, source.agent_policy(1), policy_scale=0.0)
    obs = torch.zeros(4, *env.spec.groups[0].observation.shape)
    logits = fresh.policies[0].actor_head(fresh.policies[0].encoder(obs.unsqueeze(1).expand(4, 2, -1)))[:, 1]
    assert torch.count_nonzero(logits) == 0  # scale 0: a uniform policy on the copied encoder


def test_psro_warm_start_policy_scale_changes_the_run_and_is_seeded():
    def run(scale):
        config = PsroConfig(
            iterations=2, br_steps=256, trainer=SMALL_PPO, warm_start=True, warm_start_policy_scale=scale, seed=0
        )
        psro = PSRO(biased_rps, config, game=known_game("matrix_game_v0", {"game": "biased_rps"}))
        history = psro.run()
        return history, np.stack(psro.meta_game.payoffs)

    (history, shrunk), (_, again), (_, full) = run(0.3), run(0.3), run(1.0)
    assert [row["br_warm_started"] for row in history[1:]] == [0.0, 2.0]
    assert np.array_equal(shrunk, again)
    assert not np.array_equal(shrunk, full)
    for bad in (-0.1, 1.5, "half", True):
        with pytest.raises(ValueError, match="warm_start_policy_scale must be"):
            PsroConfig(warm_start=True, warm_start_policy_scale=bad)


def test_psro_with_warm_start_reports_which_learners_started_warm():
    config = PsroConfig(iterations=2, br_steps=256, trainer=SMALL_PPO, warm_start=True, seed=0)
    history = PSRO(biased_rps, config, game=known_game("matrix_game_v0", {"game": "biased_rps"})).run()
    # iteration 1 answers the uniform initial policies (nothing to start from); iteration 2 starts both seats warm
    assert [row["br_warm_started"] for row in history[1:]] == [0.0, 2.0]
    with pytest.raises(ValueError, match="warm_start must be True or False"):
        PsroConfig(warm_start="yes")


def test_estimating_the_exploitability_leaves_the_run_as_it_is():
    def run(gain_every):
        config = PsroConfig(
            iterations=2,
            br_steps=256,
            trainer=SMALL_PPO,
            seed=3,
            gain_every=gain_every,
            gain_steps=256,
            gain_episodes=16,
        )
        psro = PSRO(biased_rps, config, game=known_game("matrix_game_v0", {"game": "biased_rps"}))
        return psro, psro.run()

    plain, plain_rows = run(0)
    gained, gained_rows = run(1)
    assert all("best_response_gain" in row and row["best_response_gain_ci"] >= 0 for row in gained_rows)
    for a, b in zip(plain_rows, gained_rows):
        assert a["exploitability"] == b["exploitability"] and a["meta_nash_conv"] == b["meta_nash_conv"]
    for a, b in zip(plain.strategies, gained.strategies):
        np.testing.assert_array_equal(a, b)
    # With a known game the estimate can be checked against the exact figure: the estimate is a lower bound up
    # to its noise (its best responses are approximate).
    last = gained_rows[-1]
    assert last["best_response_gain"] <= last["exploitability"] + 2 * last["best_response_gain_ci"] + 1e-9


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"gain_every": -1}, r"gain_every must be an integer >= 0 \(0: never estimate\), got -1"),
        ({"gain_steps": 0}, r"gain_steps must be a positive integer"),
        ({"gain_episodes": 1}, r"gain_episodes must be an integer >= 2"),
    ],
)
def test_bad_gain_settings_are_refused(changes, message):
    from marljoint.best_response import NfspConfig

    with pytest.raises(ValueError, match=message):
        PsroConfig(**changes)
    with pytest.raises(ValueError, match=message):
        NfspConfig(**changes)
