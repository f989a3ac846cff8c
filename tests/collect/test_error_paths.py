"""The remaining public error paths of the collection layer and the run settings, each with its message."""

import pytest

from marljoint import PettingZooJointEnv
from marljoint.collect import RayCollector
from marljoint.run.registry import EnvSpecError, supersuit_wrappers
from marljoint.run.train import RunError, RunSpec
from marljoint_envs import counter_v0, mock_v0


def test_joining_snapshots_needs_some_of_the_same_agents():
    with pytest.raises(ValueError, match="join_states needs at least one snapshot"):
        PettingZooJointEnv.join_states([])
    a = PettingZooJointEnv(mock_v0.parallel_env, num_envs=1)
    b = PettingZooJointEnv(counter_v0.parallel_env, num_envs=1)
    c = PettingZooJointEnv(lambda: mock_v0.parallel_env(num_agents=3), num_envs=1)
    c.reset(seed=0)
    a.reset(seed=0)
    b.reset(seed=0)
    with pytest.raises(ValueError, match="the snapshots hold (different agents|copies of different envs)"):
        PettingZooJointEnv.join_states([a.get_state(), PettingZooJointEnv.split_state(b.get_state(), [(0, 1)])[0]])
    with pytest.raises(ValueError, match="the snapshots hold different agents"):
        PettingZooJointEnv.join_states([a.get_state(), c.get_state()])


def test_a_ray_collector_refuses_snapshots_of_other_copies_and_has_no_actors_before_its_first_rollout():
    env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=4)
    env.reset(seed=0)
    collector = RayCollector(mock_v0.parallel_env, env.spec, 4, 2, seed=0)
    two = PettingZooJointEnv.split_state(env.get_state(), [(0, 1), (1, 2)])  # copies 0 and 1 only
    with pytest.raises(ValueError, match="the saved state holds 2 env copies, this collector has 4; resume with"):
        collector.load_state({"workers": [{"env": s} for s in two]})
    collector._ray = object()  # as if Ray were started: the actors still need the policy of a first rollout
    with pytest.raises(RuntimeError, match="the actors start with the first rollout"):
        collector.pids()


@pytest.mark.parametrize(
    "wrappers,match",
    [
        ("resize_v1", "wrappers must be a list of SuperSuit wrappers, got 'resize_v1'"),
        ([3], r"a wrapper is a SuperSuit wrapper name or a table such as"),
        ([{"x_size": 84}], r"a wrapper is a SuperSuit wrapper name or a table"),
    ],
)
def test_bad_wrappers_are_refused(wrappers, match):
    with pytest.raises(EnvSpecError, match=match):
        supersuit_wrappers(wrappers)
    with pytest.raises(RunError, match=match):
        RunSpec(wrappers=wrappers)


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"wandb_project": ""}, "wandb_project must be a project name, got ''"),
        ({"eval_every": 0}, "eval_every must be a positive integer, got 0"),
        ({"eval_episodes": -1}, "eval_episodes must be a positive integer, got -1"),
    ],
)
def test_bad_run_settings_are_refused(changes, match):
    with pytest.raises(RunError, match=match):
        RunSpec(**changes)
