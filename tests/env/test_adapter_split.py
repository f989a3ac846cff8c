"""PettingZooJointEnv over its two adapters, parallel and turn-based: one class for users, one set of checks and
messages for both kinds of env, and one snapshot format, which still reads the snapshots written before the
adapters had a module each."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _custom_envs import ScriptedEnv
from gymnasium import spaces
from pettingzoo.classic import rps_v2, tictactoe_v3
from pettingzoo.utils.conversions import parallel_to_aec, turn_based_aec_to_parallel

from marljoint import PettingZooJointEnv
from marljoint.trust import resign
from marljoint_envs import counter_v0, kuhn_poker_v0

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "env_snapshots_before_split"


def _counter_turns():
    return parallel_to_aec(counter_v0.parallel_env(num_agents=2))


@pytest.mark.parametrize(
    ("env_fn", "turn_based"),
    [
        (counter_v0.parallel_env, False),
        (_counter_turns, True),
        (lambda: turn_based_aec_to_parallel(kuhn_poker_v0.env()), True),
    ],
    ids=["parallel", "aec", "turn-based-parallel-conversion"],
)
def test_every_kind_of_env_is_a_pettingzoo_joint_env(env_fn, turn_based) -> None:
    env = PettingZooJointEnv(env_fn, num_envs=2, seed=0)
    assert type(env) is PettingZooJointEnv
    assert env.spec.turn_based is turn_based
    assert repr(env).startswith("PettingZooJointEnv(AEC," if turn_based else "PettingZooJointEnv(parallel,")
    env.close()


def _text_observations():
    return ScriptedEnv(spaces.Text(5), spaces.Discrete(2))


def test_a_space_the_adapters_cannot_hold_is_refused_in_the_same_words_for_both() -> None:
    messages = []
    for env_fn in (_text_observations, lambda: parallel_to_aec(_text_observations())):
        with pytest.raises(
            ValueError, match=r"^agent 'agent_0': observation space Text\(.* is not supported"
        ) as refused:
            PettingZooJointEnv(env_fn, num_envs=1)
        messages.append(str(refused.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("env_fn", [counter_v0.parallel_env, _counter_turns], ids=["parallel", "aec"])
def test_an_action_out_of_range_is_refused_in_the_same_words_for_both(env_fn) -> None:
    env = PettingZooJointEnv(env_fn, num_envs=2, seed=0)
    env.reset()
    actions = np.zeros((2, 2), np.int64)
    actions[0, 0] = 7  # agent_0 moves first in the turn-based conversion too
    expected = "agent 'agent_0' (env copy 0): action [7] is out of range for head 0 with 3 choices (valid: 0..2)"
    with pytest.raises(ValueError, match=r"out of range") as refused:
        env.step([actions])
    assert str(refused.value) == expected


def _first_allowed(obs) -> list[np.ndarray]:
    return [np.argmax(mask, axis=-1) for mask in obs.action_masks]


@pytest.mark.parametrize(
    ("name", "env_fn"),
    [("rps_parallel", rps_v2.parallel_env), ("tictactoe_turn_based", tictactoe_v3.env)],
)
@pytest.mark.parametrize("cut", [False, True], ids=["whole", "split-and-joined"])
def test_a_snapshot_written_before_the_split_restores_and_plays_on(name, env_fn, cut) -> None:
    # Written with this user's key in the fixture's place, as marljoint.trust.resign does for a trusted file.
    state = resign((FIXTURES / f"{name}.bin").read_bytes())
    if cut:
        state = PettingZooJointEnv.join_states(PettingZooJointEnv.split_state(state, [(0, 1), (1, 2)]))
    expected = np.load(FIXTURES / f"{name}.npz")
    env = PettingZooJointEnv(env_fn, num_envs=2, seed=0)
    env.reset(seed=0)
    restored = env.set_state(state)
    np.testing.assert_array_equal(restored.obs[0], expected["obs"])
    np.testing.assert_array_equal(restored.alive, expected["alive"])
    np.testing.assert_array_equal(restored.acting, expected["acting"])
    np.testing.assert_array_equal(restored.action_masks[0], expected["mask"])
    step = env.step(_first_allowed(restored))
    np.testing.assert_array_equal(step.obs[0], expected["next_obs"])
    np.testing.assert_array_equal(step.rewards, expected["next_rewards"])
    np.testing.assert_array_equal(step.reset_envs, expected["next_reset"])
    env.close()
