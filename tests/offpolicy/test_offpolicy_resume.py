"""A saved off-policy run resumes bit-identically: networks, targets, optimisers, replay buffer, generators and the
env copies mid-episode."""

import pytest
from rollout_checks import same_state

from ._helpers import mock_env, tiny_trainer


@pytest.mark.parametrize("algorithm", ["vdn", "qmix"])
def test_resume_is_bit_identical_to_an_uninterrupted_run(algorithm, tmp_path):
    settings = {"algorithm": algorithm, "target_update": "periodic", "target_update_interval": 3}
    straight = tiny_trainer(**settings)
    straight.train(72)  # 9 iterations of 2 copies x 4 steps
    first = tiny_trainer(**settings)
    first.train(32)  # mid-episode (episodes last 5 steps), after learning started
    first.save(tmp_path / "ckpt.pt")
    resumed = tiny_trainer(mock_env(), **settings)
    resumed.load(tmp_path / "ckpt.pt")
    resumed.train(72)
    assert resumed.env_steps == straight.env_steps == 72
    assert same_state(resumed.state_dict(), straight.state_dict())
    assert same_state(resumed.env_state()["copy_generators"], straight.env_state()["copy_generators"])


def test_a_checkpoint_of_other_agents_is_refused(tmp_path):
    from marljoint import PettingZooJointEnv
    from marljoint_envs import mock_v0

    tiny_trainer().save(tmp_path / "ckpt.pt")
    three = PettingZooJointEnv(lambda: mock_v0.parallel_env(num_agents=3), num_envs=2)
    with pytest.raises(ValueError, match=r"checkpoint agents \['agent_0', 'agent_1'\] differ from this env's"):
        tiny_trainer(three).load(tmp_path / "ckpt.pt")
