"""JointTrainerConfig's groups of settings: each field in exactly one group, flat and grouped access agreeing, and
each group validating its own fields with errors that name the field, the value and the fix."""

from __future__ import annotations

import dataclasses
import math

import pytest

from marljoint import JointTrainerConfig
from marljoint.collect import CollectionConfig
from marljoint.ppo.config import GROUPS, NetworkConfig, OptimConfig, PpoConfig, RuntimeConfig

FIELDS = {f.name: f for f in dataclasses.fields(JointTrainerConfig)}


def test_every_field_is_in_exactly_one_group():
    grouped = [f.name for group in GROUPS.values() for f in dataclasses.fields(group)]
    assert len(grouped) == len(set(grouped))
    assert set(FIELDS) - set(grouped) == {"num_agents", "collection"}
    assert set(grouped) <= set(FIELDS)


@pytest.mark.parametrize("name", list(GROUPS))
def test_groups_declare_no_defaults_of_their_own(name):
    # Each setting has one default, JointTrainerConfig's; a group is built from the config's fields.
    assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(GROUPS[name]))
    with pytest.raises(TypeError, match="missing"):
        GROUPS[name]()
    config = JointTrainerConfig()
    assert getattr(config, name) == GROUPS[name](**_group_values(GROUPS[name], config))


def _group_values(group, config):
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(group)}


def test_groups_hold_the_expected_settings():
    assert {"clip_range", "vf_coef", "ent_coef", "n_epochs", "num_minibatches", "target_kl", "gamma"} <= set(
        f.name for f in dataclasses.fields(PpoConfig)
    )
    assert {f.name for f in dataclasses.fields(OptimConfig)} == {
        "learning_rate",
        "critic_lr",
        "adam_eps",
        "max_grad_norm",
        "anneal_lr",
    }
    assert {"hidden_sizes", "centralized_critic", "recurrent", "share_trunk"} <= {
        f.name for f in dataclasses.fields(NetworkConfig)
    }
    assert {f.name for f in dataclasses.fields(RuntimeConfig)} == {"seed", "device", "acting_device", "torch_threads"}


def test_flat_and_grouped_access_agree():
    config = JointTrainerConfig(
        learning_rate=1e-3,
        clip_range=0.1,
        hidden_sizes=[32, 16],
        seed=7,
        num_minibatches=4,
        recurrent="gru",
        bptt_length=8,
        collection={"backend": "subprocess", "workers": 3},
    )
    for name, group in GROUPS.items():
        for f in dataclasses.fields(group):
            assert getattr(getattr(config, name), f.name) == getattr(config, f.name), f.name
    assert config.network.hidden_sizes == config.hidden_sizes == (32, 16)
    assert config.collection == CollectionConfig(backend="subprocess", workers=3)
    assert config.ppo.minibatches_per_epoch == config.minibatches_per_epoch == 4
    assert config.ppo.chunk_length == config.chunk_length == 8


def test_replace_rebuilds_the_groups():
    config = JointTrainerConfig().replace(learning_rate=5e-4, minibatch_size=64)
    assert config.optim.learning_rate == 5e-4
    assert config.ppo.minibatch_size == 64 and config.ppo.num_minibatches is None


def test_groups_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        JointTrainerConfig().ppo.clip_range = 0.3


@pytest.mark.parametrize(
    ("group", "changes", "match"),
    [
        (PpoConfig, {"clip_range": 0}, r"clip_range must be > 0, got 0 \(e.g. 0.2\)"),
        (PpoConfig, {"gae_lambda": 1.5}, r"gae_lambda must be in \[0, 1\], got 1.5"),
        (PpoConfig, {"n_epochs": 0}, "n_epochs must be a positive integer, got 0"),
        (PpoConfig, {"normalize_advantages": "true"}, "write it without quotes in TOML"),
        (PpoConfig, {"bptt_length": 9, "rollout_steps": 8}, r"bptt_length must be .* \(lower bptt_length or raise"),
        (OptimConfig, {"learning_rate": math.inf}, "learning_rate must be finite, got inf"),
        (OptimConfig, {"max_grad_norm": -1.0}, "use math.inf to disable clipping"),
        (OptimConfig, {"anneal_lr": 1}, r"anneal_lr must be true, false or None \(derived .*, got 1"),
        (NetworkConfig, {"hidden_sizes": "64"}, r"hidden_sizes must be a list .* such as \[64, 64\], got '64'"),
        (NetworkConfig, {"recurrent": "rnn"}, r"recurrent must be one of \['gru', 'lstm'\].*got 'rnn'"),
        (NetworkConfig, {"normalize_observations": 1}, "normalize_observations must be true, false or None"),
        (RuntimeConfig, {"seed": -1}, r"seed must be an integer in \[0, 2\*\*63 - 1\], got -1"),
        (RuntimeConfig, {"device": "gpu0"}, "device must name a torch device such as 'cpu'"),
        (RuntimeConfig, {"torch_threads": 0}, "torch_threads must be a positive integer, 'auto'"),
    ],
)
def test_each_group_validates_its_fields(group, changes, match):
    with pytest.raises(ValueError, match=match):
        group(**{**_group_values(group, JointTrainerConfig()), **changes})
    with pytest.raises(ValueError, match=match):
        JointTrainerConfig(**changes)


def test_config_checks_what_spans_two_groups():
    with pytest.raises(ValueError, match=r"critic_lr=0.001 .* set share_trunk=False for a split critic"):
        JointTrainerConfig(critic_lr=1e-3, share_trunk=True)
    assert JointTrainerConfig(critic_lr=1e-3, share_trunk=True, centralized_critic=True).network.own_critic_trunk
    with pytest.raises(ValueError, match="num_agents must be a positive integer, got 0"):
        JointTrainerConfig(num_agents=0)
