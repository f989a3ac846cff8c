"""Off-policy rollouts collected in this process or by subprocess workers (acting there) give the same run, bit for
bit, in simultaneous-move and turn-based games; a run resumes bit-identically with its carried moves."""

import pytest
import torch
from rollout_checks import same_state

from marljoint import PettingZooJointEnv
from marljoint.collect import SubprocessCollector
from marljoint.env import SubprocessJointEnv
from marljoint_envs import kuhn_poker_v0

from ._backends import ALGORITHMS, NUM_ENVS, assert_gives_the_in_process_run, assert_same_run, trainer_on
from ._helpers import mock_env, tiny_trainer


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_subprocess_workers_give_the_in_process_transitions_and_weights(algorithm):
    assert_gives_the_in_process_run(
        algorithm, lambda env_fn, num_envs, seed: SubprocessJointEnv(env_fn, num_envs, num_workers=2, seed=seed)
    )


def test_a_copys_exploration_does_not_depend_on_the_other_copies():
    # Copy 0 of a 2-copy run and of a 4-copy run draws the same actions (its generator is addressed by its index).
    two, four = tiny_trainer(mock_env(2), num_envs=2), tiny_trainer(mock_env(4), num_envs=4)
    two.collect(), four.collect()
    assert torch.equal(two.buffer.storage.actions[0:8:2], four.buffer.storage.actions[0:16:4])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_subprocess_workers_give_the_in_process_run_in_a_turn_based_game(algorithm):
    assert_gives_the_in_process_run(
        algorithm,
        lambda env_fn, num_envs, seed: SubprocessJointEnv(env_fn, num_envs, num_workers=2, seed=seed),
        env_fn=kuhn_poker_v0.env,
    )


def test_the_workers_act_for_the_off_policy_algorithms():
    workers = SubprocessJointEnv(kuhn_poker_v0.env, NUM_ENVS, num_workers=2, seed=0)
    try:
        trainer = trainer_on(workers, "masac")
        trainer.collect()
        assert isinstance(trainer.collector, SubprocessCollector) and trainer.collector.in_workers
    finally:
        workers.close()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_turn_based_run_resumes_bit_identically_with_its_carried_moves(algorithm, tmp_path):
    straight = trainer_on(PettingZooJointEnv(kuhn_poker_v0.env, num_envs=NUM_ENVS, seed=0), algorithm)
    straight.train(120)
    first = trainer_on(PettingZooJointEnv(kuhn_poker_v0.env, num_envs=NUM_ENVS, seed=0), algorithm)
    first.train(60)  # rollouts of 4 steps end mid-hand: the per-agent learners carry waiting moves
    assert (first.carried is not None) == first.credits_own_moves
    first.save(tmp_path / "ckpt.pt")
    resumed = trainer_on(PettingZooJointEnv(kuhn_poker_v0.env, num_envs=NUM_ENVS, seed=0), algorithm)
    resumed.load(tmp_path / "ckpt.pt")
    resumed.train(120)
    assert_same_run(straight, resumed)
    assert same_state(straight.state_dict()["carried"], resumed.state_dict()["carried"])
