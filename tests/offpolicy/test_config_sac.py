"""OffPolicyConfig.sac: MASAC's and MADDPG's settings as a SacConfig, parsed and validated when the config is built
(from a table of its fields or a SacConfig), written back as the table of the settings that differ from their
defaults."""

import pytest

from marljoint.offpolicy import OffPolicyConfig, SacConfig
from marljoint.offpolicy.config import SAC_TABLE_SETTINGS


def test_a_table_becomes_a_sac_config_with_the_run_settings():
    config = OffPolicyConfig(
        algorithm="maddpg",
        gamma=0.9,
        hidden_sizes=[8],
        share_parameters=False,
        sac={"tau": 0.1, "critic_hidden_sizes": [16]},
    )
    expected = SacConfig(
        variant="maddpg", gamma=0.9, hidden_sizes=(8,), share_parameters=False, tau=0.1, critic_hidden_sizes=(16,)
    )
    assert config.sac == expected
    assert config.to_dict()["sac"] == {"tau": 0.1, "critic_hidden_sizes": [16]}
    assert OffPolicyConfig(**config.to_dict()) == config
    assert OffPolicyConfig(algorithm="masac").sac == SacConfig(hidden_sizes=(64, 64), share_parameters=True)


def test_equal_settings_give_equal_configs():
    defaults = {name: getattr(SacConfig(), name) for name in SAC_TABLE_SETTINGS}
    assert OffPolicyConfig(algorithm="masac", sac=defaults) == OffPolicyConfig(algorithm="masac")
    assert OffPolicyConfig(algorithm="masac", sac=defaults).to_dict()["sac"] == {}


def test_the_run_settings_follow_the_off_policy_config():
    config = OffPolicyConfig(algorithm="masac", sac=SacConfig(variant="maddpg", gamma=0.5, tau=0.1))
    assert (config.sac.variant, config.sac.gamma, config.sac.tau) == ("masac", 0.99, 0.1)
    changed = config.replace(algorithm="maddpg", gamma=0.8, hidden_sizes=(4,))
    assert (changed.sac.variant, changed.sac.gamma, changed.sac.hidden_sizes, changed.sac.tau) == (
        "maddpg",
        0.8,
        (4,),
        0.1,
    )


def test_the_value_methods_have_none():
    assert OffPolicyConfig(algorithm="qmix").sac is None
    assert OffPolicyConfig(algorithm="vdn", sac={}).to_dict()["sac"] == {}
    assert OffPolicyConfig(algorithm="masac").replace(algorithm="vdn").sac is None
    with pytest.raises(ValueError, match=r"^sac settings apply to masac and maddpg, not qmix; drop them$"):
        OffPolicyConfig(algorithm="masac", sac={"tau": 0.1}).replace(algorithm="qmix")


@pytest.mark.parametrize(
    ("sac", "match"),
    [
        ({"taus": 0.1}, r"^sac.taus=0.1 is not a MASAC or MADDPG setting; valid keys: tau, actor_lr, critic_lr, "),
        (
            {"gamma": 0.5},
            r"^sac.gamma is set by the off-policy config itself \(.*\), got 0.5; set gamma there instead$",
        ),
        ({"variant": "maddpg"}, r"^sac.variant is set by .*, got 'maddpg'; set algorithm there instead$"),
        ({"tau": 0.0}, r"^sac.tau=0.0 must lie in \(0.0, 1.0\]; a Polyak coefficient such as 0.005"),
        ({"actor_lr": "1e-3"}, r"^sac.actor_lr='1e-3' must be a float, got str; a learning rate such as actor_lr"),
        ({"autotune_alpha": 1}, r"^sac.autotune_alpha=1 must be a bool, got int$"),
        ({"critic_hidden_sizes": [16, 0]}, r"^sac.critic_hidden_sizes=\[16, 0\] must be a non-empty tuple of positive"),
        ("tau=0.1", r"^sac must be a table of MASAC and MADDPG settings .* or a SacConfig, got 'tau=0.1'$"),
    ],
)
def test_a_bad_sac_key_or_value_is_refused_when_the_config_is_built(sac, match):
    with pytest.raises(ValueError, match=match):
        OffPolicyConfig(algorithm="masac", sac=sac)
