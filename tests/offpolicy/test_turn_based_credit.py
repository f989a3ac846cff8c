"""MASAC and MADDPG in turn-based games: a move is credited with the rewards its agent receives while it waits,
and bootstraps at the agent's next decision (or stops at its episode's end), as in PPO."""

import numpy as np
import pytest
import torch
from rollout_checks import same_state

from marljoint import PettingZooJointEnv
from marljoint.env.base import JointObs
from marljoint.offpolicy import OffPolicyConfig, OffPolicyTrainer
from marljoint.offpolicy.replay import JointTransitions
from marljoint.offpolicy.transitions import PendingMoves

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
    assert len(trainer.buffer) == 8 and trainer.moves.waiting[:, 0].all() and not trainer.moves.waiting[:, 1].any()
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
    assert first.moves.waiting.any()
    first.save(tmp_path / "ckpt.pt")
    resumed = two_moves_trainer("maddpg", **settings)
    resumed.load(tmp_path / "ckpt.pt")
    resumed.train(36)
    assert same_state(resumed.state_dict(), straight.state_dict())


def _steps(**fields):
    """One copy, two agents: JointTransitions with the given per-agent flags (rows of 1) and the rest idle."""
    flags = {
        name: torch.tensor([fields.get(name, [False, False])])
        for name in ("terminated", "truncated", "next_present", "next_deciding")
    }
    obs = torch.full((1, 2, 1), float(fields["t"]))
    return JointTransitions(
        obs=(obs,),
        actions=torch.zeros(1, 2, dtype=torch.int64),
        rewards=torch.tensor([fields.get("rewards", [0.0, 0.0])]),
        alive=torch.ones(1, 2, dtype=torch.bool),
        deciding=torch.tensor([fields["deciding"]]),
        next_obs=(obs + 1,),
        next_masks=(torch.ones(1, 2, 3, dtype=torch.bool),),
        **flags,
    )


def test_pending_moves_by_hand_rewards_while_waiting_and_the_next_decision():
    moves = PendingMoves()
    both = [True, True]
    # t=0: player 0 moves and waits; t=1: player 1 moves, player 0 gets 2; t=2: player 0 decides again.
    assert moves.complete(_steps(t=0, deciding=[True, False], next_present=both, next_deciding=[False, True])) is None
    out = moves.complete(
        _steps(t=1, deciding=[False, True], rewards=[2.0, 0.0], next_present=both, next_deciding=[True, False])
    )
    assert out is not None and out.deciding.tolist() == [[True, False]]  # player 0's move; player 1's is held
    assert out.rewards[0, 0] == 2.0 and out.obs[0][0, 0, 0] == 0.0 and out.next_obs[0][0, 0, 0] == 2.0
    assert out.next_deciding.tolist() == [[True, False]] and not out.terminated.any()
    # t=2: player 0 moves; the episode terminates: player 1's held move gets its reward and no bootstrap.
    out = moves.complete(_steps(t=2, deciding=[True, False], rewards=[0.0, 3.0], terminated=both))
    assert out.deciding.tolist() == [[False, True], [True, False]]
    assert out.rewards[0, 1] == 3.0 and out.terminated[0, 1] and not out.next_present[0, 1]
    assert not moves.waiting.any()


def test_pending_moves_by_hand_a_truncation_bootstraps_only_the_agent_to_move():
    moves = PendingMoves()
    both = [True, True]
    moves.complete(_steps(t=0, deciding=[True, False], next_present=both, next_deciding=[False, True]))
    # Truncated after player 1's move with player 0 to move: player 0's move bootstraps from the final state;
    # player 1's, whose next decision never comes, is left out.
    out = moves.complete(
        _steps(
            t=1,
            deciding=[False, True],
            rewards=[1.0, 0.0],
            truncated=both,
            next_present=both,
            next_deciding=[True, False],
        )
    )
    assert out.deciding.tolist() == [[True, False]]
    assert out.truncated[0, 0] and out.next_present[0, 0] and out.rewards[0, 0] == 1.0
    assert not moves.waiting.any()


def test_pending_moves_pass_simultaneous_steps_through_unchanged():
    step = _steps(t=0, deciding=[True, True], next_present=[True, True], next_deciding=[True, True])
    assert PendingMoves().complete(step) is step


def test_pending_moves_refuse_a_step_of_another_env():
    moves = PendingMoves()
    moves.complete(_steps(t=0, deciding=[True, True], next_present=[True, True], next_deciding=[True, True]))
    one = _steps(t=0, deciding=[True, True])
    three = JointTransitions(*(f if isinstance(f, tuple) else torch.cat([f, f, f]) for f in one))
    with pytest.raises(ValueError, match=r"a step of 3 env copies and 2 agents follows steps of \(1, 2\); use one"):
        moves.complete(three)


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
    assert trainer.moves.state_dict()["waiting"].any()
    trainer.load_env_state(None)
    assert trainer.moves.state_dict() is None
    assert two_moves_trainer("vdn").moves is None and two_moves_trainer("qmix").moves is None
