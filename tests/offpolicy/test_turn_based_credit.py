"""MASAC and MADDPG in turn-based games: a move is credited with the rewards its agent receives while it waits,
and bootstraps at the agent's next decision (or stops at its episode's end), as in PPO."""

import functools

import numpy as np
import pytest
import torch
from rollout_checks import same_state

from marljoint import PettingZooJointEnv
from marljoint.collect import JointRollout
from marljoint.env.base import JointObs
from marljoint.offpolicy import OffPolicyConfig, OffPolicyTrainer
from marljoint.offpolicy.transitions import rollout_moves, rollout_transitions
from marljoint_envs import counter_v0

from ._sac_helpers import DISCRETE, make_algorithm, make_batch
from ._two_moves import TwoMoves

SETTINGS = {"num_envs": 4, "rollout_steps": 8, "batch_size": 64, "learning_starts": 64, "hidden_sizes": (32,)}


def two_moves_trainer(algorithm, first_reward=1.0, **changes):
    env = PettingZooJointEnv(lambda: TwoMoves(first_reward), num_envs=changes.get("num_envs", 4), seed=0)
    return OffPolicyTrainer(env, OffPolicyConfig(algorithm=algorithm, **{**SETTINGS, **changes}))


def greedy(trainer, turn, picked_two=0.0):
    """The greedy action of the player to move (``turn``) in the state after player_0 picked (or not) 2."""
    obs = np.tile(np.array([turn == 0, turn == 1, picked_two, 1.0], np.float32), (1, 2, 1))
    acting = np.array([[turn == 0, turn == 1]])
    return int(trainer.act(JointObs((obs,), np.ones((1, 2), bool), acting, (None,)))[0][0, turn])


@pytest.mark.parametrize("algorithm", ["masac", "maddpg"])
def test_the_first_move_carries_the_reward_paid_on_the_second_and_is_terminal(algorithm):
    trainer = two_moves_trainer(algorithm, learning_starts=10_000, rollout_steps=4)
    trainer.collect()  # 4 copies x 4 steps: 2 games of 2 moves in every copy
    stored = trainer.buffer.gather(torch.arange(len(trainer.buffer)))
    assert len(trainer.buffer) == 16  # one row per move
    first, second = stored.deciding[:, 0], stored.deciding[:, 1]
    assert (first ^ second).all() and int(first.sum()) == 8
    assert torch.equal(stored.rewards[first, 0], (stored.actions[first, 0] == 2).float())
    assert torch.equal(stored.rewards[second, 1], 0.5 * (stored.actions[second, 1] == 1).float())
    # Both moves end the episode: nothing is bootstrapped, the first move's from the waiting state least of all.
    assert stored.terminated[first, 0].all() and not stored.next_present[first, 0].any()
    assert stored.terminated[second, 1].all() and not stored.next_present[second, 1].any()
    # The first move's next state is the game's end, not the state where player_0 waits for player_1.
    assert torch.equal(stored.next_obs[0][first], stored.next_obs[0][second])


def test_a_move_at_the_end_of_an_iteration_waits_for_the_next_one():
    trainer = two_moves_trainer("masac", learning_starts=10_000, rollout_steps=3)
    trainer.collect()  # each copy: a game, then player_0's move of the next one
    carried = trainer.carried  # row j: agent j's move waiting in each copy
    assert len(trainer.buffer) == 8 and carried.acting[0, :, 0].all() and not carried.acting[1].any()
    trainer.collect()
    stored = trainer.buffer.gather(torch.arange(8, 16))
    carried = stored.deciding[:4, 0]  # the held moves come first, completed by player_1's move
    assert carried.all() and torch.equal(stored.rewards[:4, 0], (stored.actions[:4, 0] == 2).float())


@pytest.mark.parametrize("algorithm", ["masac", "maddpg"])
def test_the_losses_depend_on_the_reward_paid_to_the_waiting_player(algorithm):
    losses = []
    for first_reward in (1.0, 100.0):
        trainer = two_moves_trainer(algorithm, first_reward)
        trainer.train(128)
        losses.append(trainer.update())
    assert losses[0]["critic_loss"] != losses[1]["critic_loss"]


@pytest.mark.parametrize("algorithm", ["masac", "maddpg"])
def test_both_players_learn_the_cooperative_moves(algorithm):
    trainer = two_moves_trainer(algorithm)
    trainer.train(1000)
    assert greedy(trainer, 0) == 2
    assert greedy(trainer, 1, picked_two=1.0) == 1


def test_a_resumed_run_with_held_moves_is_bit_identical(tmp_path):
    settings = {"rollout_steps": 3, "learning_starts": 16, "batch_size": 16, "num_envs": 2}
    straight = two_moves_trainer("maddpg", **settings)
    straight.train(36)
    first = two_moves_trainer("maddpg", **settings)
    first.train(18)
    assert first.carried is not None and first.carried.acting.any()
    first.save(tmp_path / "ckpt.pt")
    resumed = two_moves_trainer("maddpg", **settings)
    resumed.load(tmp_path / "ckpt.pt")
    resumed.train(36)
    assert same_state(resumed.state_dict(), straight.state_dict())


def _rollout(acting, next_acting, num_agents=2, **fields):
    """A hand-made rollout of one copy: every agent present throughout, ``acting[t]`` deciding at step t,
    observation t at step t, final observation t + 1 (the state after the last step: observation T, with
    ``next_acting`` deciding); ``fields`` set the rest per step (rewards, terminated, truncated,
    truncated_waiting, resets)."""
    env_fn = functools.partial(counter_v0.parallel_env, num_agents=num_agents)
    spec = PettingZooJointEnv(env_fn, num_envs=1, seed=0).spec
    steps = len(acting)
    ro = JointRollout.allocate(spec, steps, 1)
    ro.keep_successors()
    for t in range(steps):
        ro.obs[0][t] = float(t)
        ro.final_obs[0][t] = float(t + 1)
    ro.alive[:] = True
    ro.acting[:, 0] = torch.tensor(acting)
    for name in ("rewards", "terminated", "truncated", "truncated_waiting"):
        if name in fields:
            getattr(ro, name)[:, 0] = torch.tensor(fields[name])
    if "resets" in fields:
        ro.resets[:, 0] = torch.tensor(fields["resets"])
    ro.next_obs[0][:] = float(steps)
    ro.next_alive[:] = True
    ro.next_acting[0] = torch.tensor(next_acting)
    return spec, ro


def test_moves_by_hand_rewards_while_waiting_and_the_next_decision():
    # t=0: player 0 moves and waits; t=1: player 1 moves, player 0 gets 2; t=2: player 0 decides again, and the
    # episode terminates with 3 for player 1.
    spec, ro = _rollout(
        acting=[[True, False], [False, True], [True, False]],
        next_acting=[True, False],
        rewards=[[0.0, 0.0], [2.0, 0.0], [0.0, 3.0]],
        terminated=[[False, False], [False, False], [True, True]],
        resets=[False, False, True],
    )
    out, carried, _ = rollout_moves(spec, ro)
    assert carried is None
    # Player 0's first move, completed at t=1 by its decision at t=2; player 1's move, completed by the
    # termination; player 0's second move, which the termination ends at once (its step's own row).
    assert out.deciding.tolist() == [[True, False], [False, True], [True, False]]
    assert out.rewards[0, 0] == 2.0 and out.obs[0][0, 0, 0] == 0.0 and out.next_obs[0][0, 0, 0] == 2.0
    assert out.next_deciding[0].tolist() == [True, False] and not out.terminated[0].any()
    assert out.rewards[1, 1] == 3.0 and out.terminated[1, 1] and not out.next_present[1, 1]
    assert out.obs[0][1, 0, 0] == 1.0 and out.next_obs[0][1, 1, 0] == 3.0  # the final observation
    assert out.terminated[2, 0] and out.rewards[2, 0] == 0.0


def test_moves_by_hand_the_rewards_between_decisions_are_summed_undiscounted():
    # Three players in turn; player 0 receives 1, 2 and 4 at steps 0, 1, 2 and decides again at step 3: its
    # move's reward is 1 + 2 + 4 (no discount while it waits), and it bootstraps (discounted once, by the loss)
    # from step 3's observation.
    turns = [[True, False, False], [False, True, False], [False, False, True], [True, False, False]]
    spec, ro = _rollout(
        acting=turns,
        next_acting=[False, True, False],
        num_agents=3,
        rewards=[[1.0, 0, 0], [2.0, 0, 0], [4.0, 0, 0], [8.0, 0, 0]],
    )
    out, carried, _ = rollout_moves(spec, ro)
    first = out.deciding[:, 0].nonzero().flatten()[0]
    assert out.rewards[first, 0] == 7.0 and out.next_obs[0][first, 0, 0] == 3.0 and out.next_deciding[first, 0]
    # Player 0's move at step 3 waits for its next decision in the next rollout, with what it has received so far.
    assert carried is not None and carried.acting[0, 0].tolist() == [True, False, False]
    assert carried.rewards[0, 0, 0] == 8.0 and not carried.acting[1:, 0, 0].any()


def test_moves_by_hand_a_truncation_bootstraps_only_the_agent_to_move():
    # Truncated after player 1's move with player 0 to move: player 0's move bootstraps from the final state;
    # player 1's, whose next decision never comes, is left out.
    spec, ro = _rollout(
        acting=[[True, False], [False, True]],
        next_acting=[True, False],
        rewards=[[0.0, 0.0], [1.0, 0.0]],
        truncated=[[False, False], [True, True]],
        truncated_waiting=[[False, False], [False, True]],
        resets=[False, True],
    )
    out, carried, deferred = rollout_moves(spec, ro)
    assert out.deciding.tolist() == [[True, False]] and carried is None and deferred[1, 0, 1]
    assert out.truncated[0, 0] and out.next_present[0, 0] and out.next_deciding[0, 0] and out.rewards[0, 0] == 1.0
    assert out.next_obs[0][0, 0, 0] == 2.0  # the final observation


def test_moves_of_simultaneous_steps_are_the_team_transitions():
    both = [[True, True]] * 3
    spec, ro = _rollout(acting=both, next_acting=[True, True], rewards=[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    moves, carried, deferred = rollout_moves(spec, ro)
    assert carried is None and deferred is None
    assert same_state(moves._asdict(), rollout_transitions(spec, ro)._asdict())


def test_moves_need_a_rollout_that_kept_its_successors():
    spec, ro = _rollout(acting=[[True, True]], next_acting=[True, True])
    ro.final_obs = None
    with pytest.raises(
        ValueError, match=r"the rollout holds no final observations .* call rollout.keep_successors\(\)"
    ):
        rollout_moves(spec, ro)


def test_only_the_agents_deciding_next_have_a_next_action_in_the_target():
    batch = make_batch(DISCRETE)
    plain = make_algorithm(DISCRETE, variant="maddpg").loss(batch)[1]["critic_loss"]
    same = make_algorithm(DISCRETE, variant="maddpg").loss({**batch, "next_acting": batch["next_alive"]})[1]
    waiting = batch["next_alive"].clone()
    waiting[:, 1] = False
    other = make_algorithm(DISCRETE, variant="maddpg").loss({**batch, "next_acting": waiting})[1]
    assert same["critic_loss"] == plain and other["critic_loss"] != plain


def test_restarting_the_env_copies_drops_the_held_moves_and_value_methods_hold_none():
    trainer = two_moves_trainer("masac", learning_starts=10_000, rollout_steps=3)
    trainer.collect()
    assert trainer.carried.acting.any()
    trainer.load_env_state(None)
    assert trainer.carried is None
    for algorithm in ("vdn", "qmix"):
        value = two_moves_trainer(algorithm, learning_starts=10_000, rollout_steps=3)
        value.collect()
        assert value.carried is None and len(value.buffer) == 12  # one team transition per joint step
