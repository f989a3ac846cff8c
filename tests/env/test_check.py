"""check_joint_env catches envs that break the JointEnv contract."""

from __future__ import annotations

import numpy as np
import pytest
from _custom_envs import ScriptedEnv, box_obs
from gymnasium import spaces

from marljoint.env import JointEnvCheckError, JointObs, PettingZooJointEnv, check_joint_env


def test_unseeded_randomness_is_caught() -> None:
    entropy = np.random.default_rng()
    env = PettingZooJointEnv(
        lambda: ScriptedEnv(box_obs(), spaces.Discrete(2), observation=lambda agent, t: entropy.random(3)),
        num_envs=2,
    )
    with pytest.raises(JointEnvCheckError, match=r"diverged.*not seeded by reset\(seed=\.\.\.\)"):
        check_joint_env(env, num_steps=5)


def test_seeded_randomness_passes() -> None:
    env = PettingZooJointEnv(lambda: ScriptedEnv(box_obs(), spaces.Discrete(2)), num_envs=2)
    check_joint_env(env, num_steps=10)


def test_acting_agent_without_allowed_action_is_caught() -> None:
    space = spaces.Dict(observation=box_obs(), action_mask=spaces.Box(0, 1, (2,), np.int8))

    def observation(agent: str, t: int) -> dict:
        return {"observation": np.zeros(3, np.float32), "action_mask": np.zeros(2, np.int8)}

    env = PettingZooJointEnv(lambda: ScriptedEnv(space, spaces.Discrete(2), observation=observation), num_envs=1)
    with pytest.raises(
        JointEnvCheckError, match=r"acting agent 'agent_0' \(copy 0\) has a head with no allowed action"
    ):
        check_joint_env(env)


class _BrokenEnv:
    """A JointEnv whose alive array has the wrong dtype."""

    def __init__(self) -> None:
        inner = PettingZooJointEnv(lambda: ScriptedEnv(box_obs(), spaces.Discrete(2)), num_envs=1)
        self.spec, self.num_envs, self._inner = inner.spec, 1, inner

    def reset(self, seed=None) -> JointObs:
        state = self._inner.reset(seed=seed)
        return state._replace(alive=state.alive.astype(np.int8))

    def step(self, actions):
        return self._inner.step(actions)

    def close(self) -> None:
        self._inner.close()


def test_wrong_dtype_is_caught() -> None:
    with pytest.raises(JointEnvCheckError, match=r"reset\(\): alive must be a bool array of shape \(1, 2\)"):
        check_joint_env(_BrokenEnv())


def test_non_joint_env_is_refused() -> None:
    with pytest.raises(TypeError, match=r"ScriptedEnv does not implement the JointEnv protocol"):
        check_joint_env(ScriptedEnv(box_obs(), spaces.Discrete(2)))


class _BadWaitingEnv(_BrokenEnv):
    """A JointEnv whose final_waiting flags have the wrong shape."""

    def reset(self, seed=None) -> JointObs:
        return self._inner.reset(seed=seed)

    def step(self, actions):
        return self._inner.step(actions)._replace(final_waiting=np.zeros(3, bool))


def test_wrong_final_waiting_is_caught() -> None:
    with pytest.raises(JointEnvCheckError, match=r"final_waiting must be None or a bool array of shape \(1, 2\)"):
        check_joint_env(_BadWaitingEnv())
