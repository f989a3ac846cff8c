"""Every user-facing error of PettingZooJointEnv: the exception type and the words that explain it."""

from __future__ import annotations

import types

import numpy as np
import pytest
from _custom_envs import LeaverEnv, OldApiEnv, ScriptedEnv, box_obs, constant_obs
from gymnasium import spaces

from marljoint.env import PettingZooJointEnv


def make(observation_space=None, action_space=None, *, num_envs=1, **kwargs) -> PettingZooJointEnv:
    observation_space = box_obs() if observation_space is None else observation_space
    action_space = spaces.Discrete(3) if action_space is None else action_space
    kwargs.setdefault("observation", constant_obs() if observation_space == box_obs() else None)
    return PettingZooJointEnv(lambda: ScriptedEnv(observation_space, action_space, **kwargs), num_envs=num_envs)


# ------------------------------------------------------------------------------------------------ spaces
@pytest.mark.parametrize(
    "space",
    [
        spaces.Text(5),
        spaces.Sequence(spaces.Discrete(3)),
        spaces.Graph(spaces.Box(0, 1, (2,)), spaces.Discrete(2)),
        spaces.Dict(a=box_obs(), b=spaces.Text(5)),
        spaces.Tuple((box_obs(), spaces.Sequence(spaces.Discrete(2)))),
        spaces.Dict(observation=spaces.Text(4), action_mask=spaces.MultiBinary(3)),
    ],
    ids=["text", "sequence", "graph", "dict-with-text", "tuple-with-sequence", "masked-text"],
)
def test_unsupported_observation_space(space) -> None:
    with pytest.raises(ValueError, match=r"agent 'agent_0': observation space .* is not supported.*supersuit"):
        make(space)


@pytest.mark.parametrize(
    "space",
    [
        spaces.Dict(move=spaces.Discrete(2), talk=spaces.Discrete(3)),
        spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3))),
        spaces.MultiBinary(3),
        spaces.Text(3),
    ],
    ids=["dict", "tuple", "multibinary", "text"],
)
def test_unsupported_action_space(space) -> None:
    with pytest.raises(ValueError, match=r"agent 'agent_0': action space .* is not supported.*action_lambda"):
        make(action_space=space)


@pytest.mark.parametrize(
    "space",
    [
        spaces.Box(-np.inf, np.inf, (2,), np.float32),
        spaces.Box(np.array([0.0, 0.0], np.float32), np.array([1.0, np.inf], np.float32)),
    ],
    ids=["unbounded", "half-bounded"],
)
def test_unbounded_box_action(space) -> None:
    with pytest.raises(ValueError, match=r"agent 'agent_0': action space .* is unbounded"):
        make(action_space=space)


def test_two_dimensional_multidiscrete_action() -> None:
    with pytest.raises(ValueError, match=r"2-D nvec; marljoint needs a 1-D MultiDiscrete"):
        make(action_space=spaces.MultiDiscrete(np.array([[2, 3], [4, 5]])))


# ------------------------------------------------------------------------------------------------ construction
def test_env_instance_instead_of_factory() -> None:
    with pytest.raises(TypeError, match=r"needs a function that builds a new env .* not an env instance"):
        PettingZooJointEnv(ScriptedEnv(box_obs(), spaces.Discrete(2)), num_envs=2)


def test_non_callable_env_fn() -> None:
    with pytest.raises(TypeError, match=r"env_fn must be callable .* got str"):
        PettingZooJointEnv("simple_spread_v3", num_envs=1)


def test_factory_that_builds_something_else() -> None:
    with pytest.raises(TypeError, match=r"env_fn returned dict, which is neither a PettingZoo ParallelEnv"):
        PettingZooJointEnv(dict, num_envs=1)


def test_module_without_factories() -> None:
    with pytest.raises(TypeError, match=r"module 'empty_env' has neither parallel_env\(\) nor env\(\)"):
        PettingZooJointEnv(types.ModuleType("empty_env"), num_envs=1)


@pytest.mark.parametrize("num_envs", [0, -1, 1.5, True, "2"])
def test_bad_num_envs(num_envs) -> None:
    with pytest.raises(ValueError, match=r"num_envs must be a positive integer, got"):
        PettingZooJointEnv(lambda: ScriptedEnv(box_obs(), spaces.Discrete(2)), num_envs=num_envs)


def test_mismatched_possible_agents_across_copies() -> None:
    sizes = iter([2, 2, 3])
    with pytest.raises(ValueError, match=r"env copy 2 has possible_agents .*agent_2.* copy 0 has"):
        PettingZooJointEnv(lambda: ScriptedEnv(box_obs(), spaces.Discrete(2), num_agents=next(sizes)), num_envs=3)


def test_env_without_agents() -> None:
    with pytest.raises(ValueError, match=r"no possible_agents"):
        PettingZooJointEnv(lambda: ScriptedEnv(box_obs(), spaces.Discrete(2), num_agents=0), num_envs=1)


def test_old_api_reset() -> None:
    env = PettingZooJointEnv(OldApiEnv, num_envs=1)
    with pytest.raises(TypeError, match=r"must return \(observations, infos\).*old PettingZoo API"):
        env.reset(seed=0)


def test_step_before_reset() -> None:
    env = make()
    with pytest.raises(RuntimeError, match=r"step\(\) was called before reset\(\)"):
        env.step([np.zeros((1, 2), np.int64)])


# ------------------------------------------------------------------------------------------------ actions
def test_wrong_number_of_action_arrays() -> None:
    env = make(num_envs=2)
    env.reset(seed=0)
    action = np.zeros((2, 2), np.int64)
    with pytest.raises(ValueError, match=r"one action array per agent group \(1 groups: .*got 2 arrays"):
        env.step([action, action])
    with pytest.raises(ValueError, match=r"one action array per agent group .*got 0 arrays"):
        env.step([])
    with pytest.raises(ValueError, match=r"one action array per agent group .*got an array"):
        env.step(action)


@pytest.mark.parametrize("shape", [(2,), (2, 3), (1, 2), (2, 2, 1)])
def test_wrong_action_shape(shape) -> None:
    env = make(num_envs=2)
    env.reset(seed=0)
    expected = r"\(2, 2\)"
    with pytest.raises(ValueError, match=rf"have shape \(.*\), expected {expected}"):
        env.step([np.zeros(shape, np.int64)])


def test_wrong_multidiscrete_action_shape() -> None:
    env = make(action_space=spaces.MultiDiscrete([2, 3]), num_envs=1)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"have shape \(1, 2\), expected \(1, 2, 2\).*multidiscrete"):
        env.step([np.zeros((1, 2), np.int64)])


@pytest.mark.parametrize("value", [3, -1, 100])
def test_out_of_range_discrete_action(value) -> None:
    env = make(num_envs=2)
    env.reset(seed=0)
    actions = np.zeros((2, 2), np.int64)
    actions[1, 0] = value
    with pytest.raises(ValueError, match=rf"agent 'agent_0' \(env copy 1\): action \[{value}\] is out of range.*0..2"):
        env.step([actions])


def test_out_of_range_multidiscrete_head() -> None:
    env = make(action_space=spaces.MultiDiscrete([2, 3]))
    env.reset(seed=0)
    actions = np.zeros((1, 2, 2), np.int64)
    actions[0, 1] = [1, 3]
    with pytest.raises(ValueError, match=r"agent 'agent_1' .*action \[1, 3\] is out of range for head 1 with 3"):
        env.step([actions])


@pytest.mark.parametrize(
    "actions",
    [np.array([[0.5, 1.0]]), np.array([[np.nan, 1.0]]), np.array([[True, False]]), np.array([["a", "b"]])],
    ids=["fraction", "nan", "bool", "str"],
)
def test_non_integer_categorical_actions(actions) -> None:
    env = make()
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"have dtype .*; discrete actions must be integers"):
        env.step([actions])


def test_whole_floats_are_accepted_as_integers() -> None:
    env = make()
    env.reset(seed=0)
    env.step([np.array([[2.0, 1.0]])])
    assert env.envs[0].received[-1] == {"agent_0": 2, "agent_1": 1}


BOX = spaces.Box(-1.0, 1.0, (2,), np.float32)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_box_action(bad) -> None:
    env = make(action_space=BOX, num_envs=2)
    env.reset(seed=0)
    actions = np.zeros((2, 2, 2), np.float32)
    actions[1, 1, 0] = bad
    with pytest.raises(ValueError, match=r"agent 'agent_1' \(env copy 1\): action .* is not finite"):
        env.step([actions])


@pytest.mark.parametrize("bad", [1.5, -1.01, 1.0 + 1e-4])
def test_out_of_bounds_box_action(bad) -> None:
    env = make(action_space=BOX)
    env.reset(seed=0)
    actions = np.zeros((1, 2, 2), np.float32)
    actions[0, 0, 1] = bad
    with pytest.raises(ValueError, match=r"agent 'agent_0' \(env copy 0\): action .* is outside its Box bounds.*clip"):
        env.step([actions])


def test_box_action_within_tolerance_is_clipped_onto_the_bound() -> None:
    env = make(action_space=BOX)
    env.reset(seed=0)
    env.step([np.array([[[1.0 + 5e-7, -1.0 - 5e-7], [0.25, -0.5]]], np.float32)])
    received = env.envs[0].received[-1]
    np.testing.assert_array_equal(received["agent_0"], np.array([1.0, -1.0], np.float32))
    np.testing.assert_array_equal(received["agent_1"], np.array([0.25, -0.5], np.float32))


def test_a_failed_check_does_not_step_the_env() -> None:
    env = make()
    env.reset(seed=0)
    with pytest.raises(ValueError):
        env.step([np.array([[0, 7]])])
    assert env.envs[0].received == []


# ------------------------------------------------------------------------------------------------ masks
MASKED = spaces.Dict(observation=box_obs(), action_mask=spaces.Box(0, 1, (3,), np.int8))


def masked_obs(agent: str, t: int) -> dict:
    return {"observation": np.zeros(3, np.float32), "action_mask": np.array([1, 0, 1], np.int8)}


def test_masked_out_action_is_refused() -> None:
    env = make(MASKED, observation=masked_obs, num_envs=2)
    env.reset(seed=0)
    actions = np.array([[0, 2], [2, 1]])
    with pytest.raises(
        ValueError, match=r"agent 'agent_1' \(env copy 1\): action \[1\] is forbidden by its action mask"
    ):
        env.step([actions])
    env.step([np.array([[0, 2], [2, 0]])])


def test_mask_of_the_wrong_length_from_the_observation() -> None:
    space = spaces.Dict(observation=box_obs(), action_mask=spaces.Box(0, 1, (4,), np.int8))

    def obs(agent: str, t: int) -> dict:
        return {"observation": np.zeros(3, np.float32), "action_mask": np.ones(4, np.int8)}

    env = make(space, observation=obs)
    with pytest.raises(ValueError, match=r"agent 'agent_0': action mask of length 4 does not fit .*expected 3"):
        env.reset(seed=0)


def test_mask_of_the_wrong_length_from_the_infos() -> None:
    env = make(info=lambda agent, t: {"action_mask": np.ones(2 if t == 1 else 3, np.int8)})
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action mask of length 2 does not fit its action space Discrete\(3\)"):
        env.step([np.zeros((1, 2), np.int64)])


def test_multidiscrete_mask_must_cover_every_head() -> None:
    env = make(
        action_space=spaces.MultiDiscrete([2, 3]),
        info=lambda agent, t: {"action_mask": np.ones(3, np.int8)},
    )
    with pytest.raises(ValueError, match=r"action mask of length 3 .*expected 5 entries, one per choice of every head"):
        env.reset(seed=0)


# ------------------------------------------------------------------------------------------------ observations
def nan_at(t_bad: int):
    def observation(agent: str, t: int) -> np.ndarray:
        value = np.nan if (t == t_bad and agent == "agent_1") else 0.0
        return np.full(3, value, np.float32)

    return observation


def test_nan_observation_at_reset() -> None:
    env = make(observation=nan_at(0), num_envs=2)
    with pytest.raises(ValueError, match=r"agent 'agent_1' \(env copy 0\): the env returned a non-finite observation"):
        env.reset(seed=0)


def test_nan_observation_during_an_episode() -> None:
    env = make(observation=nan_at(1))
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"non-finite observation \(NaN or inf\).*nan_to_num"):
        env.step([np.zeros((1, 2), np.int64)])


def test_inf_in_a_final_observation() -> None:
    def observation(agent: str, t: int) -> np.ndarray:
        return np.full(3, np.inf if t == 2 else 0.0, np.float32)

    env = make(observation=observation, episode_length=2)
    env.reset(seed=0)
    env.step([np.zeros((1, 2), np.int64)])
    with pytest.raises(ValueError, match=r"agent 'agent_0' \(env copy 0\): the env returned a non-finite observation"):
        env.step([np.zeros((1, 2), np.int64)])


def test_observation_that_does_not_fit_its_space() -> None:
    env = make(observation=lambda agent, t: np.zeros(4, np.float32))
    with pytest.raises(ValueError, match=r"observation of shape \(4,\) does not match its space .*expected 3 values"):
        env.reset(seed=0)


# ------------------------------------------------------------------------------------------------ tolerated slips
def test_agent_that_leaves_without_a_flag_counts_as_terminated() -> None:
    env = PettingZooJointEnv(LeaverEnv, num_envs=1)
    env.reset(seed=0)
    out = env.step([np.zeros((1, 2), np.int64)])
    assert out.terminated.tolist() == [[False, True]]
    assert out.truncated.tolist() == [[False, False]]
    assert out.alive.tolist() == [[True, False]]
    # No final observation came back for it: the last one it was given stands in.
    np.testing.assert_array_equal(out.final_obs[0][0, 1], np.zeros(3, np.float32))
    np.testing.assert_array_equal(out.obs[0][0], np.array([[0.1, 0.1, 0.1], [0.0, 0.0, 0.0]], np.float32))
    out = env.step([np.array([[1, 99]])])  # the absent agent's action is ignored, however invalid
    assert env.envs[0].received[-1] == {"agent_0": 1}


def test_non_finite_reward_is_refused():

    import numpy as np
    import pytest
    from gymnasium import spaces
    from pettingzoo import ParallelEnv

    from marljoint import PettingZooJointEnv

    class NanReward(ParallelEnv):
        metadata = {"name": "nan_reward_v0"}
        possible_agents = ["a"]

        def observation_space(self, agent):
            return spaces.Box(-1, 1, (2,), np.float32)

        def action_space(self, agent):
            return spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            self.agents = ["a"]
            return {"a": np.zeros(2, np.float32)}, {"a": {}}

        def step(self, actions):
            return {"a": np.zeros(2, np.float32)}, {"a": float("nan")}, {"a": False}, {"a": False}, {"a": {}}

    env = PettingZooJointEnv(NanReward, num_envs=1, seed=0)
    env.reset()
    with pytest.raises(ValueError, match=r"agent 'a' \(env copy 0\): the env returned a non-finite reward"):
        env.step([np.zeros((1, 1), np.int64)])


def test_copies_with_different_spaces_are_refused():
    import itertools

    import pytest
    from mpe2 import simple_spread_v3

    from marljoint import PettingZooJointEnv

    counter = itertools.count()

    def factory():
        return simple_spread_v3.parallel_env(N=3, continuous_actions=next(counter) > 0)

    with pytest.raises(ValueError, match="env copy 1 gives agent 'agent_0' the spaces"):
        PettingZooJointEnv(factory, num_envs=2)
