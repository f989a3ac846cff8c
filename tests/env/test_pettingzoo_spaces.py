"""How PettingZooJointEnv turns each kind of observation and action space into arrays, and back."""

from __future__ import annotations

import numpy as np
import pytest
from _custom_envs import ScriptedEnv, box_obs, constant_obs
from gymnasium import spaces

from marljoint.env import PettingZooJointEnv, check_joint_env


def make(observation_space, action_space, *, num_envs=1, **kwargs) -> PettingZooJointEnv:
    return PettingZooJointEnv(lambda: ScriptedEnv(observation_space, action_space, **kwargs), num_envs=num_envs)


def by_agent(table: dict) -> callable:
    """An observation function that looks the raw observation up by (agent, t), falling back to (agent, None)."""
    return lambda agent, t: table.get((agent, t), table.get((agent, None)))


# ------------------------------------------------------------------------------------------------ observations
def test_dict_observation_with_action_mask() -> None:
    space = spaces.Dict(observation=box_obs(2), action_mask=spaces.Box(0, 1, (4,), np.int8))
    table = {
        ("agent_0", 0): {"observation": np.array([0.5, -0.5], np.float32), "action_mask": np.array([1, 0, 0, 1])},
        ("agent_1", 0): {"observation": np.array([0.25, 1.0], np.float32), "action_mask": np.array([0, 1, 0, 0])},
        ("agent_0", 1): {"observation": np.array([0.0, 0.1], np.float32), "action_mask": np.array([0, 0, 1, 0])},
        ("agent_1", 1): {"observation": np.array([0.0, 0.2], np.float32), "action_mask": np.array([1, 1, 1, 1])},
    }
    env = make(space, spaces.Discrete(4), observation=by_agent(table))
    layout = env.spec.observations[0]
    assert (layout.kind, layout.shape, layout.has_mask) == ("flat", (2,), True)
    state = env.reset(seed=0)
    np.testing.assert_array_equal(state.obs[0], np.array([[[0.5, -0.5], [0.25, 1.0]]], np.float32))
    assert state.action_masks[0].tolist() == [[[True, False, False, True], [False, True, False, False]]]
    out = env.step([np.array([[3, 1]])])
    assert env.envs[0].received == [{"agent_0": 3, "agent_1": 1}]
    np.testing.assert_array_equal(out.obs[0], np.array([[[0.0, 0.1], [0.0, 0.2]]], np.float32))
    assert out.action_masks[0].tolist() == [[[False, False, True, False], [True, True, True, True]]]


def test_action_mask_from_the_infos() -> None:
    info = {0: {"action_mask": np.array([0, 1, 1], np.int8)}, 1: {"action_mask": np.array([1, 0, 0], np.int8)}}
    env = make(box_obs(), spaces.Discrete(3), observation=constant_obs(), info=lambda agent, t: info.get(t, {}))
    state = env.reset(seed=0)
    assert state.action_masks[0].tolist() == [[[False, True, True]] * 2]
    out = env.step([np.array([[1, 2]])])
    assert out.action_masks[0].tolist() == [[[True, False, False]] * 2]
    out = env.step([np.array([[0, 0]])])
    # No mask given any more: everything is allowed.
    assert out.action_masks[0].all()


@pytest.mark.parametrize(
    ("space", "raw", "expected"),
    [
        (spaces.Discrete(4), 2, [0, 0, 1, 0]),
        (spaces.Discrete(3, start=-1), 1, [0, 0, 1]),
        (spaces.MultiDiscrete([2, 3]), np.array([1, 0]), [0, 1, 1, 0, 0]),
        (spaces.MultiBinary(4), np.array([1, 0, 1, 1], np.int8), [1, 0, 1, 1]),
        (spaces.MultiBinary((2, 2)), np.array([[0, 1], [1, 1]], np.int8), [0, 1, 1, 1]),
        (spaces.Box(0, 5, (2, 3), np.float64), np.arange(6.0).reshape(2, 3), [0, 1, 2, 3, 4, 5]),
        (spaces.Box(0, 5, (2, 1, 2, 1), np.float32), np.arange(4.0).reshape(2, 1, 2, 1), [0, 1, 2, 3]),
        (spaces.Box(0, 255, (3,), np.uint8), np.array([0, 7, 255], np.uint8), [0, 7, 255]),
        (
            spaces.Dict(pos=spaces.Box(-1, 1, (2,)), team=spaces.Discrete(2)),
            {"pos": np.array([0.5, -0.5]), "team": 1},
            [0.5, -0.5, 0, 1],
        ),
        (spaces.Tuple((spaces.Discrete(2), spaces.Box(-1, 1, (1,)))), (0, np.array([0.25])), [1, 0, 0.25]),
    ],
    ids=[
        "discrete",
        "discrete-start",
        "multidiscrete",
        "multibinary",
        "multibinary-2d",
        "box-2d",
        "box-4d",
        "box-uint8-flat",
        "dict",
        "tuple",
    ],
)
def test_flat_observations(space, raw, expected) -> None:
    env = make(space, spaces.Discrete(2), observation=lambda agent, t: raw)
    layout = env.spec.observations[0]
    assert (layout.kind, layout.shape, layout.dtype) == ("flat", (len(expected),), np.dtype(np.float32))
    state = env.reset(seed=0)
    assert state.obs[0].dtype == np.float32
    np.testing.assert_array_equal(state.obs[0], np.array([[expected, expected]], np.float32))
    np.testing.assert_array_equal(state.obs[0][0, 0], spaces.flatten(space, raw).astype(np.float32))


def test_uint8_image_observation_kept_as_hwc_bytes() -> None:
    space = spaces.Box(0, 255, (4, 5, 3), np.uint8)
    image = np.arange(60, dtype=np.uint8).reshape(4, 5, 3) * 4
    env = make(space, spaces.Discrete(2), num_envs=2, observation=lambda agent, t: image + t)
    layout = env.spec.observations[0]
    assert (layout.kind, layout.shape, layout.dtype) == ("image", (4, 5, 3), np.dtype(np.uint8))
    state = env.reset(seed=0)
    assert state.obs[0].dtype == np.uint8 and state.obs[0].shape == (2, 2, 4, 5, 3)
    np.testing.assert_array_equal(state.obs[0], np.broadcast_to(image, (2, 2, 4, 5, 3)))
    out = env.step([np.zeros((2, 2), np.int64)])
    np.testing.assert_array_equal(out.obs[0][1, 0], image + 1)
    check_joint_env(env, num_steps=10)


def test_float_image_observation_becomes_float32() -> None:
    space = spaces.Box(0.0, 1.0, (2, 2, 1), np.float64)
    image = np.array([[[0.25], [0.5]], [[0.75], [1.0]]])
    env = make(space, spaces.Discrete(2), observation=lambda agent, t: image)
    layout = env.spec.observations[0]
    assert (layout.kind, layout.shape, layout.dtype) == ("image", (2, 2, 1), np.dtype(np.float32))
    state = env.reset(seed=0)
    assert state.obs[0].dtype == np.float32
    np.testing.assert_array_equal(state.obs[0][0, 1], image.astype(np.float32))


def test_masked_image_observation() -> None:
    space = spaces.Dict(
        observation=spaces.Box(0, 255, (2, 2, 3), np.uint8), action_mask=spaces.Box(0, 1, (2,), np.int8)
    )
    image = np.full((2, 2, 3), 9, np.uint8)
    env = make(space, spaces.Discrete(2), observation=lambda agent, t: {"observation": image, "action_mask": [0, 1]})
    layout = env.spec.observations[0]
    assert (layout.kind, layout.shape, layout.dtype, layout.has_mask) == ("image", (2, 2, 3), np.uint8, True)
    state = env.reset(seed=0)
    np.testing.assert_array_equal(state.obs[0][0, 0], image)
    assert state.action_masks[0].tolist() == [[[False, True], [False, True]]]


# ------------------------------------------------------------------------------------------------ actions
def test_discrete_action_with_start() -> None:
    env = make(box_obs(), spaces.Discrete(3, start=10), observation=constant_obs())
    layout = env.spec.actions[0]
    assert (layout.kind, layout.nvec, layout.shape, layout.start, layout.dtype) == (
        "discrete",
        (3,),
        (),
        (10,),
        np.dtype(np.int64),
    )
    env.reset(seed=0)
    env.step([np.array([[0, 2]])])
    assert env.envs[0].received == [{"agent_0": 10, "agent_1": 12}]


def test_multidiscrete_action_with_start() -> None:
    space = spaces.MultiDiscrete([3, 2, 4], start=[5, -1, 0])
    env = make(box_obs(), space, num_envs=2, observation=constant_obs())
    layout = env.spec.actions[0]
    assert (layout.kind, layout.nvec, layout.shape, layout.start, layout.mask_size) == (
        "multidiscrete",
        (3, 2, 4),
        (3,),
        (5, -1, 0),
        9,
    )
    state = env.reset(seed=0)
    assert state.action_masks[0].shape == (2, 2, 9)
    actions = np.array([[[0, 0, 0], [2, 1, 3]], [[1, 0, 2], [2, 0, 1]]])
    env.step([actions])
    for e, expected in enumerate([[[5, -1, 0], [7, 0, 3]], [[6, -1, 2], [7, -1, 1]]]):
        received = env.envs[e].received[-1]
        for j, agent in enumerate(("agent_0", "agent_1")):
            np.testing.assert_array_equal(received[agent], expected[j])
            assert received[agent].dtype == space.dtype
    with pytest.raises(ValueError, match=r"action \[0, 2, 0\] is out of range for head 1 with 2 choices"):
        env.step([np.array([[[0, 2, 0], [0, 0, 0]], [[0, 0, 0], [0, 0, 0]]])])


def test_multidiscrete_mask_per_head() -> None:
    mask = np.array([1, 0, 1, 0, 1], np.int8)  # head 0 (3 choices): 0 or 2; head 1 (2 choices): 1
    env = make(
        box_obs(), spaces.MultiDiscrete([3, 2]), observation=constant_obs(), info=lambda agent, t: {"action_mask": mask}
    )
    env.reset(seed=0)
    env.step([np.array([[[2, 1], [0, 1]]])])
    with pytest.raises(
        ValueError, match=r"agent 'agent_1' .*action \[0, 0\] is forbidden by its action mask \(head 1\)"
    ):
        env.step([np.array([[[2, 1], [0, 0]]])])
    with pytest.raises(
        ValueError, match=r"agent 'agent_0' .*action \[1, 1\] is forbidden by its action mask \(head 0\)"
    ):
        env.step([np.array([[[1, 1], [0, 1]]])])


def test_box_action_of_shape_2x3_is_flat_for_the_policy_and_reshaped_for_the_env() -> None:
    low = -np.arange(1, 7, dtype=np.float64).reshape(2, 3)
    space = spaces.Box(low, -low, dtype=np.float64)
    env = make(box_obs(), space, observation=constant_obs())
    layout = env.spec.actions[0]
    assert (layout.kind, layout.shape, layout.env_shape, layout.mask_size, layout.dtype) == (
        "box",
        (6,),
        (2, 3),
        0,
        np.dtype(np.float32),
    )
    np.testing.assert_array_equal(layout.low, [-1, -2, -3, -4, -5, -6])
    np.testing.assert_array_equal(layout.high, [1, 2, 3, 4, 5, 6])
    state = env.reset(seed=0)
    assert state.action_masks == (None,)
    flat = np.array([[[0.5, -2.0, 3.0, 0.0, 4.5, -6.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]]], np.float32)
    env.step([flat])
    received = env.envs[0].received[-1]
    assert received["agent_0"].shape == (2, 3) and received["agent_0"].dtype == np.float64
    np.testing.assert_array_equal(received["agent_0"], [[0.5, -2.0, 3.0], [0.0, 4.5, -6.0]])
    np.testing.assert_array_equal(received["agent_1"], np.ones((2, 3)))
    # Bounds are per element: 1.5 is inside dimension 1's [-2, 2] but outside dimension 0's [-1, 1].
    with pytest.raises(ValueError, match=r"outside its Box bounds"):
        env.step([np.array([[[1.5, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]]], np.float32)])
    env.step([np.array([[[0, 1.5, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]]], np.float32)])


def test_actions_may_be_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    env = make(box_obs(), spaces.Box(-1.0, 1.0, (2,), np.float32), observation=constant_obs())
    env.reset(seed=0)
    env.step([torch.tensor([[[0.5, -0.5], [0.0, 1.0]]])])
    np.testing.assert_array_equal(env.envs[0].received[-1]["agent_1"], np.array([0.0, 1.0], np.float32))
    discrete = make(box_obs(), spaces.Discrete(3), observation=constant_obs())
    discrete.reset(seed=0)
    discrete.step([torch.tensor([[2, 0]])])
    assert discrete.envs[0].received[-1] == {"agent_0": 2, "agent_1": 0}


# ------------------------------------------------------------------------------------------------ groups
def test_agents_with_different_spaces_form_groups_in_first_member_order() -> None:
    obs = {"agent_0": box_obs(3), "agent_1": box_obs(4), "agent_2": box_obs(3), "agent_3": box_obs(3)}
    act = {
        "agent_0": spaces.Discrete(2),
        "agent_1": spaces.Discrete(2),
        "agent_2": spaces.Discrete(2),
        "agent_3": spaces.Discrete(5),
    }
    table = {(f"agent_{i}", None): np.full(obs[f"agent_{i}"].shape, 0.1 * i, np.float32) for i in range(4)}
    env = make(obs, act, num_agents=4, num_envs=2, observation=by_agent(table))
    assert [g.agents for g in env.spec.groups] == [("agent_0", "agent_2"), ("agent_1",), ("agent_3",)]
    assert [g.name for g in env.spec.groups] == ["agent_0", "agent_1", "agent_3"]
    assert env.spec.group_of(2) == (0, 1) and env.spec.group_of(3) == (2, 0)
    with pytest.raises(IndexError, match=r"agent index 4 is out of range for 4 agents"):
        env.spec.group_of(4)
    state = env.reset(seed=0)
    np.testing.assert_array_equal(state.obs[0][1], np.array([[0.0] * 3, [0.2] * 3], np.float32))
    np.testing.assert_array_equal(state.obs[1][1], np.array([[0.1] * 4], np.float32))
    actions = [np.array([[0, 1], [1, 0]]), np.array([[1], [0]]), np.array([[4], [3]])]
    out = env.step(actions)
    assert env.envs[0].received[-1] == {"agent_0": 0, "agent_1": 1, "agent_2": 1, "agent_3": 4}
    assert env.envs[1].received[-1] == {"agent_0": 1, "agent_1": 0, "agent_2": 0, "agent_3": 3}
    assert out.rewards.shape == (2, 4) and out.alive.shape == (2, 4)


def test_equal_spaces_but_different_box_bounds_are_different_groups() -> None:
    act = {"agent_0": spaces.Box(-1.0, 1.0, (2,), np.float32), "agent_1": spaces.Box(-2.0, 2.0, (2,), np.float32)}
    env = make(box_obs(), act, observation=constant_obs())
    assert [g.agents for g in env.spec.groups] == [("agent_0",), ("agent_1",)]
