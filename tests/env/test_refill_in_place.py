"""The adapter's common parallel step (same agents before and after) against its full clear-and-refill path."""

from __future__ import annotations

import numpy as np
import pytest
from _custom_envs import ScriptedEnv, box_obs
from gymnasium import spaces
from mpe2 import simple_spread_v3

from marljoint import PettingZooJointEnv
from marljoint.env.parallel import ParallelAdapter
from marljoint_envs import variable_agents_v0


def _trajectory(env_fn, steps: int, in_place: bool, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, np.ndarray]]:
    with monkeypatch.context() as patch:
        if not in_place:
            patch.setattr(ParallelAdapter, "_refill_in_place", lambda self, *args: False)
        env = PettingZooJointEnv(env_fn, num_envs=3, seed=4)
        env.reset(seed=4)
        rng = np.random.default_rng(0)
        out = []
        for _ in range(steps):
            actions = [rng.integers(0, g.action.nvec[0], (3, g.size)) for g in env.spec.groups]
            step = env.step(actions)
            record = {name: getattr(step, name).copy() for name in ("alive", "acting", "rewards", "terminated")}
            for g in range(len(env.spec.groups)):
                record[f"obs{g}"] = step.obs[g].copy()
                record[f"final{g}"] = step.final_obs[g].copy()
                if step.action_masks[g] is not None:
                    record[f"mask{g}"] = step.action_masks[g].copy()
            out.append(record)
        env.close()
    return out


@pytest.mark.parametrize(
    "env_fn",
    [lambda: simple_spread_v3.parallel_env(max_cycles=7), variable_agents_v0.parallel_env],
    ids=["spread", "variable-agents"],
)
def test_in_place_refill_gives_the_steps_the_full_refill_gives(env_fn, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _trajectory(env_fn, 40, True, monkeypatch)
    full = _trajectory(env_fn, 40, False, monkeypatch)
    for a, b in zip(fast, full):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_a_mask_that_first_appears_mid_episode_is_written() -> None:
    mask = np.array([1, 0, 1], np.int8)
    env = PettingZooJointEnv(
        lambda: ScriptedEnv(
            box_obs(),
            spaces.Discrete(3),
            episode_length=6,
            info=lambda agent, t: {"action_mask": mask} if t == 3 else {},
        ),
        num_envs=1,
        seed=0,
    )
    env.reset(seed=0)
    seen = []
    for _ in range(4):
        step = env.step([np.zeros((1, 2), np.int64)])
        seen.append(step.action_masks[0][0].copy())
    assert seen[0].all() and seen[1].all()  # no mask yet: everything allowed
    np.testing.assert_array_equal(seen[2], np.tile(mask.astype(bool), (2, 1)))
    assert seen[3].all()  # the mask is gone again: the row is all-allowed once more


def test_an_observation_that_cannot_be_written_directly_still_gets_the_checked_error() -> None:
    def observation(agent: str, t: int) -> np.ndarray:
        return np.zeros(4 if (t == 2 and agent == "agent_1") else 3, np.float32)

    env = PettingZooJointEnv(
        lambda: ScriptedEnv(box_obs(), spaces.Discrete(2), episode_length=5, observation=observation),
        num_envs=1,
        seed=0,
    )
    env.reset(seed=0)
    env.step([np.zeros((1, 2), np.int64)])
    with pytest.raises(ValueError, match="agent_1"):
        env.step([np.zeros((1, 2), np.int64)])
