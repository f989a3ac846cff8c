"""Off-policy rollouts collected by Ray actors (the Ray collector, acting in the actors) give the in-process run bit
for bit, resume exactly on Ray or on subprocess workers, and fail loudly when an env copy raises in an actor."""

import pytest
from pettingzoo.utils.wrappers import BaseParallelWrapper

from marljoint import EnvCopyError, PettingZooJointEnv
from marljoint.collect import CollectionConfig, RayCollector
from marljoint.env import SubprocessJointEnv
from marljoint.offpolicy import OffPolicyConfig, OffPolicyTrainer

from ._backends import ALGORITHMS, DISCRETE, ENV_FNS, NUM_ENVS, assert_gives_the_in_process_run, assert_same_run
from ._backends import trainer_on as _trainer_on
from ._helpers import TINY

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.usefixtures("ray_local")

RAY = CollectionConfig("ray", workers=2)


def ray_trainer(algorithm):
    """A tiny trainer whose rollouts two Ray actors collect."""
    return _trainer_on(PettingZooJointEnv(ENV_FNS[algorithm], num_envs=NUM_ENVS, seed=0), algorithm, RAY)


# One algorithm of each family in the default run (they share the acting and transitions code per family); the
# others with -m slow.
SLOW_TWINS = {"qmix", "maddpg"}


def _by_family(names):
    return [pytest.param(name, marks=pytest.mark.slow) if name in SLOW_TWINS else name for name in names]


@pytest.mark.parametrize("algorithm", _by_family(ALGORITHMS))
def test_ray_actors_give_the_in_process_transitions_and_weights(algorithm):
    assert_gives_the_in_process_run(
        algorithm, lambda env_fn, num_envs, seed: PettingZooJointEnv(env_fn, num_envs, seed=seed), RAY
    )


@pytest.mark.parametrize("algorithm", _by_family(["qmix", "masac"]))
def test_a_run_saved_over_ray_actors_resumes_bit_identically(algorithm, tmp_path):
    straight = _trainer_on(PettingZooJointEnv(ENV_FNS[algorithm], num_envs=NUM_ENVS, seed=0), algorithm)
    straight.train(96)
    first = ray_trainer(algorithm)
    try:
        assert isinstance(first.collector, RayCollector)
        first.train(48)  # mid-episode for some copies, after learning started
        first.save(tmp_path / "ckpt.pt")
    finally:
        first.close()
    resumed = ray_trainer(algorithm)
    try:
        resumed.load(tmp_path / "ckpt.pt")
        resumed.train(96)
        assert_same_run(straight, resumed)
    finally:
        resumed.close()


def test_a_ray_run_resumes_in_subprocess_workers_bit_identically(tmp_path):
    straight = _trainer_on(PettingZooJointEnv(DISCRETE, num_envs=NUM_ENVS, seed=0), "vdn")
    straight.train(96)
    first = ray_trainer("vdn")
    try:
        first.train(48)
        first.save(tmp_path / "ckpt.pt")
    finally:
        first.close()
    workers = SubprocessJointEnv(DISCRETE, num_envs=NUM_ENVS, num_workers=2, seed=0)
    try:
        resumed = _trainer_on(workers, "vdn")
        resumed.load(tmp_path / "ckpt.pt")
        resumed.train(96)
        assert_same_run(straight, resumed)
    finally:
        workers.close()


class _ThirdCopyFails(BaseParallelWrapper):
    """mock_v0 whose copy 2 (first reset with seed 2) raises on its first step."""

    def reset(self, seed=None, options=None):
        if seed is not None and not hasattr(self, "first_seed"):
            self.first_seed = seed
        return super().reset(seed=seed, options=options)

    def step(self, actions):
        if self.first_seed == 2:
            raise ValueError("this copy refuses to step")
        return super().step(actions)


def test_an_env_error_in_an_actor_names_the_global_copy_and_stores_nothing():
    env = PettingZooJointEnv(lambda: _ThirdCopyFails(DISCRETE()), num_envs=3, seed=0)
    trainer = OffPolicyTrainer(env, OffPolicyConfig(**{**TINY, "num_envs": 3}), collection=RAY)
    try:
        with pytest.raises(EnvCopyError, match=r"^env copy 2 raised ValueError: this copy refuses to step"):
            trainer.collect()
        assert trainer.buffer is None and trainer.env_steps == 0
    finally:
        trainer.close()
