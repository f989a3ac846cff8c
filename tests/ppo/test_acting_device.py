"""Acting where it pays: the rule of ``acting_device="auto"``, its checks, and the learner/acting split.

Without a GPU, torch's ``meta`` device stands in for one (as in ``test_device.py``): its tensors hold no data and
any operation mixing them with CPU tensors raises, so a collection that ran on a CPU copy of the networks and
handed the learner a rollout on meta shows that nothing of the acting touched the learner's device. Reading meta
weights out to the CPU copy is the one step that cannot run there: it is replaced by a copy from an identical
CPU trainer, and where it was asked to copy from and to is checked.
"""

import pytest
import torch

import marljoint.ppo.derived
import marljoint.threads
from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.collect import CollectionConfig
from marljoint.policies.joint import JointPolicy
from marljoint.ppo.derived import ACTING_WORK_THRESHOLD, derive_acting_device, derive_threads
from marljoint_envs import mock_v0


class _Net(torch.nn.Module):
    """A network of ``parameters`` weights serving ``num_agents`` agents (shared or each with its own weights)."""

    def __init__(self, parameters, num_agents=1, share_parameters=True, conv=False):
        super().__init__()
        self.weights = torch.nn.Parameter(torch.zeros(parameters))
        self.conv = torch.nn.Conv2d(1, 1, 1) if conv else None
        self.num_agents = num_agents
        self.share_parameters = share_parameters


def _rule(networks, **cfg):
    config, reason = derive_acting_device(JointTrainerConfig(**{"device": "meta", **cfg}), networks)
    return config.acting_device, reason.get("acting_device")


def test_on_a_cpu_learner_the_policy_acts_on_the_cpu_whatever_the_networks():
    assert _rule([_Net(10**8)], device="cpu") == ("cpu", "cpu: the learner's device is the CPU")


def test_a_small_network_acts_on_a_cpu_copy():
    device, reason = _rule([_Net(10_000, num_agents=3)], num_envs=64)
    assert device == "cpu"
    assert reason.startswith("cpu: about 1,920,000 multiply-adds per env step (64 copies), below 10,000,000")


def test_a_large_network_acts_on_the_learners_device():
    device, reason = _rule([_Net(600_000, num_agents=3)], num_envs=64)
    assert device == "meta" and "115,200,000 multiply-adds" in reason


def test_many_env_copies_make_a_small_network_act_on_the_learners_device():
    per_copy = 10_000
    assert _rule([_Net(per_copy)], num_envs=ACTING_WORK_THRESHOLD // per_copy - 1)[0] == "cpu"
    assert _rule([_Net(per_copy)], num_envs=ACTING_WORK_THRESHOLD // per_copy)[0] == "meta"


def test_per_agent_weights_count_once_per_copy_and_shared_weights_once_per_agent():
    # 3 agents over 600,000 weights: stacked per-agent weights run 200,000 for each agent, a shared network
    # runs all 600,000 for each agent.
    assert _rule([_Net(600_000, num_agents=3, share_parameters=False)], num_envs=16)[0] == "cpu"
    assert _rule([_Net(600_000, num_agents=3, share_parameters=True)], num_envs=16)[0] == "meta"


def test_a_convolutional_network_acts_on_the_learners_device():
    device, reason = _rule([_Net(10, conv=True)], num_envs=1)
    assert device == "meta" and "convolutional" in reason


def test_env_workers_act_on_cpu_copies_whatever_the_networks():
    device, reason = _rule([_Net(10**8, conv=True)], collection=CollectionConfig("subprocess", 2))
    assert device == "cpu" and "env workers act on CPU copies" in reason and "moved to meta" in reason


@pytest.mark.parametrize("explicit", ["cpu", "meta"])
def test_an_explicit_acting_device_is_kept_without_a_reason(explicit):
    config, reason = derive_acting_device(JointTrainerConfig(device="meta", acting_device=explicit), [_Net(10)])
    assert config.acting_device == explicit and reason == {}


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ({"acting_device": "gpu"}, "acting_device must be auto or name a torch device such as 'cpu'.*got 'gpu'"),
        ({"acting_device": 0}, "acting_device must be auto or name a torch device.*got 0"),
        ({"acting_device": "cuda"}, r"acting_device must be 'auto', 'cpu' or the learner's device 'cpu', got 'cuda'"),
        ({"device": "meta", "acting_device": "cuda"}, "the learner's device 'meta', got 'cuda'"),
    ],
)
def test_bad_acting_devices_are_refused(cfg, match):
    with pytest.raises(ValueError, match=match):
        JointTrainerConfig(**cfg)


def _config(**cfg):
    return JointTrainerConfig(**{"num_envs": 4, "rollout_steps": 8, "minibatch_size": 16, "n_epochs": 1, **cfg})


def test_on_the_cpu_the_learners_networks_act_themselves():
    env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=4, seed=0)
    trainer = JointMultiAgentTrainer.from_env(env, _config())
    assert trainer.config.acting_device == "cpu" and trainer.collector_policy is trainer.joint_policy
    assert trainer.derived["acting_device"] == "cpu: the learner's device is the CPU"


def _copy_from(reference, calls):
    original = JointPolicy.copy_weights_from

    def copy_weights_from(self, source):
        calls.append((source.device.type, self.device.type))
        original(self, reference)

    return copy_weights_from


def _split_and_reference(monkeypatch, collection=None):
    """A trainer learning on meta (acting on a CPU copy) and an identical one on the CPU."""
    cfg = _config() if collection is None else _config(collection=collection)
    reference_env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=4, seed=0)
    reference = JointMultiAgentTrainer.from_env(reference_env, _config())
    calls = []
    monkeypatch.setattr(JointPolicy, "copy_weights_from", _copy_from(reference.joint_policy, calls))
    env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=4, seed=0)
    if collection is not None:
        env = collection.make_env(mock_v0.parallel_env, 4, 0)
    split = JointMultiAgentTrainer.from_env(env, cfg.replace(device="meta"))
    return split, reference, calls


def _assert_same_rollout(acted, reference):
    for name in ("rewards", "log_probs", "values", "alive", "bootstrap_values"):
        assert torch.equal(getattr(acted, name), getattr(reference, name)), name
    assert all(torch.equal(a, b) for a, b in zip(acted.actions, reference.actions))


def test_a_learner_on_another_device_collects_on_a_cpu_copy_and_gets_its_rollout_there(monkeypatch):
    split, reference, calls = _split_and_reference(monkeypatch)
    assert split.config.acting_device == "cpu" and split.derived["acting_device"].startswith("cpu: about")
    assert split.collector_policy is not split.joint_policy and split.collector_policy.device.type == "cpu"
    assert all(p.device.type == "cpu" for n in split.collector_policy.networks for p in n.parameters())
    assert all(p.device.type == "meta" for n in split.joint_policy.networks for p in n.parameters())
    for _ in range(2):
        rollout = split.collect_rollout()
        assert rollout.rewards.device.type == "meta" and rollout.obs[0].device.type == "meta"
        # The CPU copy acted as the CPU trainer's own networks do: the same bits in its CPU storage.
        _assert_same_rollout(split.collector._storage, reference.collect_rollout())
    # Once when the copy is made, then before every rollout: always from the learner's device to the CPU.
    assert calls == [("meta", "cpu")] * 3


def test_env_workers_get_the_cpu_copy_and_the_learner_its_rollout_on_its_device(monkeypatch):
    lag = CollectionConfig("subprocess", 2, policy_lag=1)
    split, reference, calls = _split_and_reference(monkeypatch, collection=lag)
    try:
        assert split.config.acting_device == "cpu" and "env workers" in split.derived["acting_device"]
        sent = []
        inner = split.collector.inner
        run_in_workers = inner.env.run_in_workers

        def record(*args):
            if len(args) > 5:  # a rollout: its weights are numpy copies of the CPU networks
                sent.append(args[5])
            return run_in_workers(*args)

        monkeypatch.setattr(inner.env, "run_in_workers", record)
        for k in range(2):
            rollout = split.collect_rollout()
            assert rollout.rewards.device.type == "meta"
            if k == 0:  # collected now, with the initial weights: the same bits as in one process
                _assert_same_rollout(inner._storage, reference.collect_rollout())
        assert inner._policy is split.collector_policy
        arrays = [v for weights in sent for state in weights["policies"] for v in state.values()]
        assert arrays and all(type(v).__module__ == "numpy" for v in arrays)
        assert calls == [("meta", "cpu")] * 3
    finally:
        split.close()
        split.env.close()


@pytest.mark.parametrize("collection", [CollectionConfig(), CollectionConfig("subprocess", 4)])
def test_a_learner_updating_on_another_device_takes_one_thread(collection, monkeypatch):
    monkeypatch.setattr(marljoint.ppo.derived, "usable_cores", lambda: 16)
    monkeypatch.setattr(marljoint.threads, "usable_cores", lambda: 16)
    config, reason = derive_threads(JointTrainerConfig(device="meta", collection=collection))
    assert config.torch_threads == 1
    assert reason["torch_threads"].startswith("1: the update runs on meta, which this process drives from one core")
    on_cpu, _ = derive_threads(JointTrainerConfig(collection=collection))
    assert on_cpu.torch_threads == (12 if collection.multiprocess else 1)
