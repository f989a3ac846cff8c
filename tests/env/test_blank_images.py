"""Image observations that never change (an env that draws only when it renders) are reported, not trained on
silently; observations that change, and flat constant ones, are not."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from _custom_envs import ScriptedEnv, box_obs, constant_obs
from gymnasium import spaces

from marljoint import BlankImageWarning, JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.env import blank_image_agents

IMAGE = spaces.Box(0, 255, (4, 5, 3), np.uint8)


def trainer_on(observation_space, observation, num_agents: int = 2) -> JointMultiAgentTrainer:
    env = PettingZooJointEnv(
        lambda: ScriptedEnv(
            observation_space, spaces.Discrete(2), num_agents=num_agents, episode_length=5, observation=observation
        ),
        num_envs=2,
        seed=0,
    )
    config = JointTrainerConfig(num_envs=2, rollout_steps=8, n_epochs=1, minibatch_size=8)
    return JointMultiAgentTrainer.from_env(env, config)


def black(agent: str, t: int) -> np.ndarray:
    return np.zeros((4, 5, 3), np.uint8)


def moving(agent: str, t: int) -> np.ndarray:
    image = np.zeros((4, 5, 3), np.uint8)
    image[t % 4, t % 5] = 255
    return image


def test_black_frames_warn_once_naming_the_agents_and_the_fix() -> None:
    trainer = trainer_on(IMAGE, black)
    with pytest.warns(
        BlankImageWarning,
        match=r"'agent_0' \(4, 5, 3\), every pixel 0; 'agent_1' \(4, 5, 3\), every pixel 0.*first 8 steps.*"
        r"render_mode='rgb_array'",
    ):
        trainer.train(16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BlankImageWarning)
        trainer.train(16)  # only the first rollout is checked


def test_only_the_agent_with_blank_frames_is_named() -> None:
    trainer = trainer_on(IMAGE, lambda agent, t: black(agent, t) if agent == "agent_1" else moving(agent, t))
    with pytest.warns(BlankImageWarning, match=r"of 'agent_1' \(4, 5, 3\), every pixel 0 were") as caught:
        trainer.train(16)
    assert "agent_0" not in str(caught[0].message)


@pytest.mark.parametrize(
    ("space", "observation"),
    [(IMAGE, moving), (box_obs(), constant_obs())],
    ids=["changing images", "constant flat observations"],
)
def test_no_warning_for_changing_images_or_flat_observations(space, observation) -> None:
    trainer = trainer_on(space, observation)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BlankImageWarning)
        trainer.train(16)


def test_steps_where_the_agent_is_absent_do_not_count() -> None:
    env = PettingZooJointEnv(lambda: ScriptedEnv(IMAGE, spaces.Discrete(2), observation=black), num_envs=1)
    obs = np.zeros((3, 1, 2, 4, 5, 3), np.uint8)
    obs[1, 0, 0] = 7  # agent_0 saw something else only while absent
    alive = np.ones((3, 1, 2), bool)
    alive[1, 0, 0] = False
    assert blank_image_agents(env.spec, [obs], alive) == {"agent_0": 0.0, "agent_1": 0.0}
    alive[1, 0, 0] = True
    assert blank_image_agents(env.spec, [obs], alive) == {"agent_1": 0.0}
    assert blank_image_agents(env.spec, [obs], np.zeros_like(alive)) == {}
