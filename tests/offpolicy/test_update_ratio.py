"""How many gradient steps an iteration takes when ``updates_per_iteration`` is left to the algorithm."""

import pytest

from marljoint.offpolicy import OffPolicyConfig


@pytest.mark.parametrize(("algorithm", "per_update"), [("vdn", 16), ("qmix", 16), ("masac", 4), ("maddpg", 4)])
def test_one_gradient_step_per_so_many_stored_transitions(algorithm, per_update):
    config = OffPolicyConfig(algorithm=algorithm, num_envs=8, rollout_steps=16)
    assert config.transitions_per_update == per_update
    assert config.updates == 8 * 16 // per_update


def test_a_set_count_wins_and_a_tiny_iteration_still_takes_one_step():
    assert OffPolicyConfig(algorithm="masac", num_envs=8, rollout_steps=16, updates_per_iteration=3).updates == 3
    assert OffPolicyConfig(algorithm="vdn", num_envs=1, rollout_steps=2).updates == 1
