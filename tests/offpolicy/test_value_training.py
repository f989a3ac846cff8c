"""VDN and QMIX learn a small bundled env clearly above random, and their settings are validated."""

import pytest

from marljoint.offpolicy import OffPolicyConfig
from marljoint.run.episodes import play_episodes

from ._helpers import mock_env, tiny_trainer


@pytest.mark.parametrize("algorithm", ["vdn", "qmix"])
def test_value_decomposition_learns_the_best_joint_action_of_mock(algorithm):
    # Every agent gets (sum of the actions) / 10 per step for 5 steps: random play returns 1.0, the best 2.0.
    trainer = tiny_trainer(
        algorithm=algorithm,
        num_envs=4,
        batch_size=32,
        learning_starts=64,
        exploration_steps=400,
        learning_rate=3e-3,
        target_update="periodic",
        target_update_interval=20,
    )
    trainer.train(1200)
    returns, _ = play_episodes(trainer, mock_env(4, seed=1), 8, deterministic=True, seed=1)
    assert returns.mean() > 1.6


def test_boltzmann_exploration_and_polyak_targets_run():
    trainer = tiny_trainer(exploration="boltzmann", exploration_start=2.0, exploration_end=0.1, double_q=False)
    rows = trainer.train(64)
    assert rows[-1]["offpolicy/gradient_steps"] > 0 and rows[-1]["exploration"] < 2.0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"algorithm": "dqn"}, r"algorithm must be one of \['vdn', 'qmix', 'masac', 'maddpg'\], got 'dqn'"),
        ({"exploration": "ucb"}, r"exploration must be one of \['epsilon', 'boltzmann'\], got 'ucb'"),
        ({"target_update": "hard"}, r"target_update must be one of \['polyak', 'periodic'\]"),
        ({"team_reward": "max"}, r"team_reward must be one of \['mean', 'sum'\]"),
        ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
        ({"learning_starts": -1}, "learning_starts must be a non-negative integer, got -1"),
        ({"gamma": 1.5}, r"gamma must be a discount in \[0, 1\], got 1.5"),
        ({"tau": 0.0}, r"tau must be a Polyak coefficient in \(0, 1\], got 0.0"),
        ({"exploration_start": 2.0}, "epsilon-greedy exploration needs probabilities in"),
        ({"learning_rate": 0}, "learning_rate must be a positive number, got 0"),
        ({"reward_scale": -1.0}, "reward_scale must be 'auto' or a positive number, got -1.0"),
        ({"double_q": 1}, "double_q and share_parameters must be true or false"),
        ({"seed": -1}, r"seed must be an integer in \[0, 2\*\*63 - 1\], got -1"),
        ({"hidden_sizes": "64"}, "hidden_sizes must be a list of positive integer widths"),
        ({"batch_size": 64, "buffer_size": 32}, "batch_size=64 exceeds buffer_size=32"),
    ],
)
def test_bad_settings_name_the_field_and_the_value(changes, message):
    with pytest.raises(ValueError, match=message):
        OffPolicyConfig(**changes)


def test_the_trainer_refuses_an_env_of_another_size():
    with pytest.raises(ValueError, match="the env has 2 copies but num_envs=4; build the env with num_envs=4"):
        tiny_trainer(mock_env(2), num_envs=4)


@pytest.mark.parametrize("algorithm", ["vdn", "qmix"])
def test_agents_that_leave_and_join_and_heterogeneous_groups_train(algorithm):
    import functools

    from marljoint import PettingZooJointEnv
    from marljoint_envs import variable_agents_v0

    from ._helpers import tiny_trainer

    # variable_agents_v0: reward = own action (1 is best), agent_1 dies early, agent_2 joins late.
    env_fn = functools.partial(variable_agents_v0.parallel_env, episode_length=4, death_step=2, join_step=1)
    trainer = tiny_trainer(PettingZooJointEnv(env_fn, num_envs=2, seed=0), algorithm=algorithm)
    rows = trainer.train(64)
    assert rows[-1]["offpolicy/gradient_steps"] > 0
    assert not trainer.buffer.storage.deciding[: len(trainer.buffer), 2].all()  # agent_2 absent at first
    speaker_listener = pytest.importorskip("mpe2.simple_speaker_listener_v4")
    listener = PettingZooJointEnv(functools.partial(speaker_listener.parallel_env, max_cycles=5), num_envs=2, seed=0)
    trainer = tiny_trainer(listener, algorithm=algorithm)
    assert len(trainer.algorithm.groups) == 2  # speaker and listener: different spaces, one network each
    assert trainer.train(32)[-1]["offpolicy/gradient_steps"] > 0


def test_turn_based_games_store_one_deciding_agent_per_move():
    from marljoint import PettingZooJointEnv
    from marljoint_envs import kuhn_poker_v0

    from ._helpers import tiny_trainer

    trainer = tiny_trainer(PettingZooJointEnv(kuhn_poker_v0.env, num_envs=2, seed=0), algorithm="qmix")
    assert trainer.train(48)[-1]["offpolicy/gradient_steps"] > 0
    stored = trainer.buffer.storage
    size = len(trainer.buffer)
    assert (stored.deciding[:size].sum(-1) == 1).all()  # one player moves per joint step
    assert stored.alive[:size].all()  # the waiting player is present: its rewards count for the team
    assert (stored.next_deciding[:size].sum(-1) <= 1).all()
