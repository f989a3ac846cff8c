"""Recurrent frozen policies in the best-response tools: an AgentPolicy carries its own state through an episode
in a PopulationEnv seat, and exact tables of a recurrent policy follow the player's own earlier decisions."""

import functools

import numpy as np
import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.best_response import KuhnGame, simulate_profiles
from marljoint_envs import kuhn_poker_v0, memory_v0

MEMORY = functools.partial(memory_v0.parallel_env, num_agents=2, num_cues=4, delay=3)


def trainer_on(env_fn, **cfg):
    settings = dict(
        num_envs=16, rollout_steps=32, minibatch_size=256, n_epochs=4, learning_rate=3e-3, rnn_hidden_size=32,
        bptt_length=8, hidden_sizes=(32,), seed=0,
    )
    config = JointTrainerConfig(**{**settings, **cfg})
    return JointMultiAgentTrainer.from_env(PettingZooJointEnv(env_fn, num_envs=config.num_envs, seed=0), config)


def test_a_frozen_recurrent_member_remembers_through_its_episode():
    trainer = trainer_on(MEMORY, recurrent="gru")
    for _ in range(50):
        trainer.update(trainer.collect_rollout())
    members = [[trainer.agent_policy(0)], [trainer.agent_policy(1)]]
    assert all(m[0].recurrent for m in members)
    env = PettingZooJointEnv(MEMORY, num_envs=8, seed=3)
    means, _ = simulate_profiles(env, members, np.zeros((1, 2), dtype=np.int64), 64, seed=1)
    # Recalling the cue three steps later needs the state carried from the first step (chance is 0.25).
    assert means.min() >= 0.9 * memory_v0.optimal_return()


def test_a_recurrent_policy_needs_its_state_and_a_feed_forward_one_refuses_one():
    recurrent = trainer_on(MEMORY, recurrent="lstm").agent_policy(0)
    obs = torch.zeros(3, 5)
    with pytest.raises(ValueError, match=r"this policy is recurrent \(lstm\): pass state \[3, 64\]"):
        recurrent.act(obs, torch.Generator())
    actions, state = recurrent.step(obs, torch.Generator(), state=recurrent.initial_state(3))
    assert actions.shape == (3,) and state.shape == (3, recurrent.state_size) == (3, 64)
    feed_forward = trainer_on(MEMORY).agent_policy(0)
    assert not feed_forward.recurrent and feed_forward.state_size == 0
    with pytest.raises(ValueError, match="this policy is feed-forward; pass state=None"):
        feed_forward.act(obs, torch.Generator(), state=torch.zeros(3, 1))
    with pytest.raises(ValueError, match="next_state needs a recurrent policy"):
        feed_forward.next_state(obs, torch.zeros(3, 0))


def test_exact_kuhn_tables_of_a_recurrent_policy_match_play():
    trainer = trainer_on(kuhn_poker_v0.env, recurrent="gru", rollout_steps=8)
    for _ in range(3):
        trainer.update(trainer.collect_rollout())
    policies = [trainer.agent_policy(0), trainer.agent_policy(1)]
    game = KuhnGame()
    tables = game.tables(policies)
    # Player 0's second decision (after pass-bet) acts from the state its first one left; zeros would differ.
    observations = torch.as_tensor(game.infoset_observations(0))
    fresh = policies[0].action_probs(observations, state=policies[0].initial_state(6))[0].double().numpy()
    assert np.abs(fresh[1::2] - tables[0][1::2]).max() > 1e-3
    np.testing.assert_allclose(fresh[0::2], tables[0][0::2], atol=1e-6)  # first decisions start afresh
    exact = game.values(tables)
    env = PettingZooJointEnv(kuhn_poker_v0.env, num_envs=32, seed=5)
    means, errors = simulate_profiles(env, [[policies[0]], [policies[1]]], np.zeros((1, 2), np.int64), 6000, seed=2)
    assert abs(means[0, 0] - exact[0]) < 4 * errors[0, 0] + 1e-3


def test_a_recurrent_policy_in_a_game_without_its_decision_order_is_refused():
    class Unlisted(KuhnGame):
        def previous_infosets(self, player):
            return None

    policy = trainer_on(kuhn_poker_v0.env, recurrent="gru", rollout_steps=8).agent_policy(0)
    with pytest.raises(ValueError, match="does not list each information set's earlier ones.*best_response_gain"):
        Unlisted().table(policy, 0)


def test_psro_and_nfsp_train_recurrent_best_responses_and_score_them_exactly():
    from marljoint.best_response import NFSP, PSRO, NfspConfig, PsroConfig

    small = JointTrainerConfig(
        num_envs=16, rollout_steps=8, gamma=1.0, gae_lambda=1.0, minibatch_size=64, n_epochs=2, hidden_sizes=(16,),
        share_parameters=False, recurrent="gru", rnn_hidden_size=16, seed=0,
    )
    psro = PSRO(kuhn_poker_v0.raw_env, PsroConfig(iterations=2, br_steps=512, trainer=small, seed=0), game=KuhnGame())
    history = psro.run()
    assert all(member.recurrent for seat in psro.populations for member in seat[1:])  # [0]: the uniform start
    assert np.isfinite(history[-1]["exploitability"]) and history[-1]["population"] == 3
    nfsp = NFSP(
        kuhn_poker_v0.raw_env,
        NfspConfig(trainer=small, rollouts_per_iteration=2, min_reservoir_size=8, sl_batch_size=32),
        game=KuhnGame(),
    )
    metrics = [nfsp.step() for _ in range(2)][-1]
    assert np.isfinite(metrics["br_exploitability"]) and np.isfinite(metrics["exploitability"])


def test_a_psro_run_with_recurrent_members_saves_and_loads_them(tmp_path):
    from marljoint.best_response import PSRO, PsroConfig

    small = JointTrainerConfig(
        num_envs=16, rollout_steps=8, minibatch_size=64, n_epochs=1, hidden_sizes=(16,), share_parameters=False,
        recurrent="lstm", rnn_hidden_size=8, seed=0,
    )
    psro = PSRO(kuhn_poker_v0.raw_env, PsroConfig(iterations=1, br_steps=256, trainer=small, seed=0), game=KuhnGame())
    psro.run()
    psro.save(tmp_path)
    loaded = PSRO.load(tmp_path, kuhn_poker_v0.raw_env, game=KuhnGame())
    game = KuhnGame()
    for seat in range(2):
        saved, restored = psro.populations[seat][-1], loaded.populations[seat][-1]
        assert restored.recurrent
        np.testing.assert_array_equal(game.table(saved, seat), game.table(restored, seat))
