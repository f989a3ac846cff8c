"""The memory estimate of a run: its parts follow from the spaces and the sizes, and the available memory is read."""

import pytest

from marljoint import JointTrainerConfig, PettingZooJointEnv
from marljoint.collect.rollout import storage_bytes
from marljoint.run import memory
from marljoint_envs import mock_v0


@pytest.fixture(scope="module")
def spec():
    env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=1, seed=0)
    env.close()
    return env.spec


def test_the_rollout_part_is_the_storage_and_the_copies_scale_with_num_envs(spec):
    config = JointTrainerConfig(num_envs=4, rollout_steps=8, minibatch_size=16, hidden_sizes=[8])
    estimate = memory.estimate_memory(spec, config, per_copy=1000)
    assert estimate.rollout == storage_bytes(spec, 8, 4)
    assert estimate.env_copies == 4000 and estimate.per_copy == 1000
    # Six [R, N] float32 targets, and one minibatch of 16 rows: 2 agents x 4 bytes x (2 x 4 obs + 4 x 2 x 8 hidden).
    assert estimate.update == 32 * 2 * 4 * 6 + 16 * 2 * 4 * (2 * 4 + 4 * 16)
    assert estimate.host == estimate.rollout + estimate.update + estimate.env_copies and estimate.device == 0


def test_overlapped_collection_holds_two_rollouts_and_ray_copies_live_elsewhere(spec):
    lagged = JointTrainerConfig(num_envs=4, rollout_steps=8, collection={"backend": "subprocess", "policy_lag": 1})
    ray = JointTrainerConfig(num_envs=4, rollout_steps=8, collection={"backend": "ray"})
    assert memory.estimate_memory(spec, lagged).rollout == 2 * storage_bytes(spec, 8, 4)
    assert memory.estimate_memory(spec, ray, per_copy=1000).env_copies == 0


def test_on_an_accelerator_only_the_env_copies_count_against_the_hosts_memory(spec):
    estimate = memory.MemoryEstimate(rollout=10, update=5, env_copies=7, per_copy=1, on_device="cuda:0")
    assert (estimate.host, estimate.device) == (7, 15)


def test_available_memory_from_meminfo_or_sysconf(monkeypatch):
    found = memory.available_memory()
    assert found is None or found > 0

    def missing(*args, **kwargs):
        raise OSError("no /proc here")

    monkeypatch.setattr(memory, "open", missing, raising=False)
    fallback = memory.available_memory()
    assert fallback is None or fallback > 0


def test_one_env_copy_is_measured():
    allocated, seconds = memory.measure_env_copy(lambda: mock_v0.parallel_env(obs_dim=100_000))
    assert allocated >= 100_000 * 8 and seconds >= 0  # its frequency table alone: 100,000 float64


@pytest.mark.parametrize(
    ("size", "text"), [(512, "512 B"), (1536, "1.5 KiB"), (3 * 2**30, "3.0 GiB"), (2**41, "2.0 TiB")]
)
def test_format_bytes(size, text):
    assert memory.format_bytes(size) == text
