"""Every setting of a run reachable by --set, --sweep, marljoint tune --param and a config file (the tables' keys
with dots: offpolicy.tau, offpolicy.sac.actor_lr, mmd.alpha), and a setting the run's algorithm does not read
refused, naming what it reads instead."""

from __future__ import annotations

import pytest
from _product_helpers import run_cli

from marljoint.run.algorithms import ALGORITHMS
from marljoint.run.errors import RunError
from marljoint.run.reads import SettingsRead, setting_keys, settings_not_read, unread_settings, with_dotted_keys
from marljoint.run.spec import RunSpec
from marljoint.run.tune import ParamRange, check_search_space

SMALL = {"learning_starts": 16, "batch_size": 8}


READS = {name: row.reads for name, row in ALGORITHMS.items()}


def _spec(**values):
    return RunSpec.from_dict({"total_steps": 64, **values})


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"algorithm": "qmix", "clip_range": 0.1}, r"qmix does not read clip_range \(= 0.1\); it is a PPO setting"),
        ({"algorithm": "vdn", "n_epochs": 3}, r"vdn does not read n_epochs \(= 3\); it is a PPO setting"),
        ({"algorithm": "qmix", "max_grad_norm": 1.0}, r"qmix does not read max_grad_norm .*set offpolicy.max_grad"),
        (
            {"algorithm": "masac", "learning_rate": 0.01},
            r"masac does not read learning_rate \(= 0.01\); set offpolicy.sac.actor_lr, offpolicy.sac.critic_lr and "
            r"offpolicy.sac.alpha_lr instead",
        ),
        ({"algorithm": "maddpg", "offpolicy.tau": 0.1}, r"maddpg does not read offpolicy.tau .*set offpolicy.sac.tau"),
        ({"algorithm": "vdn", "offpolicy.mixer_embed_dim": 8}, r"vdn does not read offpolicy.mixer_embed_dim .*qmix"),
        ({"algorithm": "maddpg", "offpolicy.sac.init_alpha": 0.3}, r"maddpg does not read offpolicy.sac.init_alpha"),
        ({"algorithm": "masac", "offpolicy.sac.exploration_noise": 0.3}, r"masac does not read .*exploration_noise"),
    ],
)
def test_a_setting_the_algorithm_does_not_read_is_refused_naming_what_it_reads(values, match):
    values = {**values, "offpolicy": {**SMALL, **values.get("offpolicy", {})}}
    with pytest.raises(RunError, match=match):
        _spec(**values)


def test_settings_at_their_defaults_are_not_refused():
    # A run's config.toml holds every trainer setting, PPO's included: read back (or passed as --config) it is
    # accepted, and so is a setting given at the value the run holds anyway.
    written = _spec(algorithm="qmix", offpolicy=SMALL).to_dict()
    assert "clip_range" in written and "n_epochs" in written
    assert RunSpec.from_dict(written).algorithm == "qmix"
    assert (
        unread_settings(_spec(algorithm="masac", offpolicy={**SMALL, "tau": 0.01}, clip_range=0.2), READS["masac"])
        == []
    )


def test_the_algorithm_reads_what_it_reads():
    spec = _spec(algorithm="qmix", learning_rate=0.01, offpolicy={**SMALL, "mixer_embed_dim": 8}, num_envs=2)
    assert unread_settings(spec, READS[spec.algorithm] if spec.algorithm else SettingsRead()) == []
    assert settings_not_read(READS["mappo"]) == [] and settings_not_read(SettingsRead()) == []
    assert "learning_rate" not in settings_not_read(READS["vdn"]) and "learning_rate" in settings_not_read(
        READS["masac"]
    )
    assert {"num_envs", "rollout_steps", "seed", "gamma", "hidden_sizes"}.isdisjoint(settings_not_read(READS["masac"]))


def test_the_command_line_refuses_a_ppo_setting_of_an_offpolicy_run(tmp_path, capsys):
    args = ["train", "--algorithm", "qmix", "--set", "clip_range=0.1", "--out", str(tmp_path / "run"), "--quiet"]
    assert run_cli(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("marljoint train: error: qmix does not read clip_range (= 0.1)") and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_dotted_keys_set_one_key_of_a_table():
    spec = _spec(algorithm="masac", **{"offpolicy.learning_starts": 16, "offpolicy.sac.actor_lr": 1e-3})
    assert spec.offpolicy == {"learning_starts": 16, "sac": {"actor_lr": 1e-3}}
    # Over a table given whole (a --config file's), a dotted key changes that key alone.
    spec = _spec(algorithm="qmix", offpolicy=SMALL, **{"offpolicy.tau": 0.05})
    assert spec.offpolicy == {**SMALL, "tau": 0.05}
    # Over the base run's table (a sweep's point, a tune trial).
    point = RunSpec.from_dict({"offpolicy.batch_size": 4}, base=spec)
    assert point.offpolicy == {**SMALL, "tau": 0.05, "batch_size": 4}
    mmd = _spec(self_play="mmd", env="kuhn_poker_v0", **{"mmd.alpha": 0.3})
    assert mmd.mmd_config().alpha == 0.3


def test_an_unknown_dotted_key_is_refused_listing_the_valid_ones():
    with pytest.raises(RunError, match=r"unknown setting offpolicy.batch_sz; valid keys: offpolicy.learning_rate, "):
        _spec(algorithm="qmix", **{"offpolicy.batch_sz": 4})
    with pytest.raises(RunError, match=r"unknown setting trainer.gamma; valid keys: offpolicy.learning_rate, .*mmd"):
        with_dotted_keys({"trainer.gamma": 0.9}, {})


def test_every_setting_is_a_key_of_set_sweep_and_tune():
    keys = setting_keys(RunSpec.__dataclass_fields__)
    assert {"algorithm", "offpolicy", "clip_range", "offpolicy.tau", "offpolicy.sac.actor_lr", "mmd.alpha"} <= set(keys)
    assert "offpolicy.num_envs" not in keys and "offpolicy.sac.gamma" not in keys  # the run's own settings
    assert "trainer" not in keys and set(RunSpec.__dataclass_fields__) - {"trainer"} <= set(keys)


def test_tune_refuses_a_range_the_algorithm_does_not_read():
    # Without the refusal every trial would train the same qmix run.
    spec = _spec(algorithm="qmix", offpolicy=SMALL)
    with pytest.raises(RunError, match=r"--param n_epochs=int:1:4: .*qmix does not read n_epochs"):
        check_search_space([ParamRange.parse("n_epochs=int:1:4")], spec)
    check_search_space([ParamRange.parse("offpolicy.learning_rate=log:1e-4:1e-2")], spec)
    check_search_space([ParamRange.parse("learning_rate=log:1e-4:1e-2")], spec)


def test_a_sweep_over_a_table_key_is_taken_and_refused_where_not_read(tmp_path, capsys):
    # offpolicy.tau is a known key; masac reads offpolicy.sac.tau, so its points are refused before any run starts.
    args = ["train", "--algorithm", "masac", "--sweep", "offpolicy.tau=0.01,0.05", "--total-steps", "64"]
    args += ["--set", "offpolicy={learning_starts=16, batch_size=8}", "--out", str(tmp_path / "sweep"), "--quiet"]
    assert run_cli(args) == 2
    err = capsys.readouterr().err
    assert "masac does not read offpolicy.tau (= 0.05); set offpolicy.sac.tau instead" in err, err
    assert not (tmp_path / "sweep").exists()


def test_a_sweep_over_the_algorithm_is_taken(tmp_path, capsys):
    # algorithm is a known key: the points are built (and here refused for a budget no off-policy run trains in).
    args = ["train", "--sweep", "algorithm=vdn,qmix", "--total-steps", "16", "--num-envs", "1", "--rollout-steps", "16"]
    args += ["--out", str(tmp_path / "s"), "--quiet"]
    assert run_cli(args) == 2
    err = capsys.readouterr().err
    assert "unknown setting" not in err and "algorithm=vdn" in err and "offpolicy.learning_starts = 1000" in err, err


def test_the_tables_are_parsed_when_the_spec_is_built():
    from marljoint.best_response import MmdConfig

    spec = _spec(self_play="mmd", env="kuhn_poker_v0", mmd={"alpha": 0.3})
    assert spec.mmd == MmdConfig(alpha=0.3) and spec.mmd_config() is spec.mmd
    assert spec.to_dict()["mmd"] == MmdConfig(alpha=0.3).to_dict()  # written back as a table, every setting
    assert RunSpec.from_dict(spec.to_dict()) == spec
    assert _spec(mmd=None).mmd is None
    config = _spec(algorithm="masac", num_envs=2, offpolicy={**SMALL, "sac": {"tau": 0.02}}).offpolicy_config()
    assert (config.algorithm, config.num_envs, config.batch_size, config.sac) == ("masac", 2, 8, {"tau": 0.02})
    assert _spec().offpolicy_config() is None


@pytest.mark.parametrize(
    ("values", "match"),
    [
        (
            {"algorithm": "qmix", "offpolicy": {"batch_sz": 4}},
            r"^unknown setting offpolicy.batch_sz; valid keys: offpolicy.learning_rate, offpolicy.adam_eps",
        ),
        (
            {"algorithm": "masac", "offpolicy": {"sac": {"taus": 0.1}}},
            r"^unknown setting offpolicy.sac.taus; valid keys: offpolicy.sac.tau, offpolicy.sac.actor_lr",
        ),
        ({"algorithm": "qmix", "offpolicy": {"batch_size": 0}}, r"^offpolicy.batch_size must be a positive integer"),
        ({"algorithm": "maddpg", "offpolicy": {"sac": {"tau": 0.0}}}, r"^offpolicy.sac.tau=0.0 must lie in"),
        (
            {"self_play": "mmd", "env": "kuhn_poker_v0", "mmd": {"alfa": 0.1}},
            r"^unknown setting mmd.alfa; valid keys: mmd.alpha, mmd.alpha_units",
        ),
        ({"self_play": "mmd", "env": "kuhn_poker_v0", "mmd.magnet": "x"}, r"^mmd.magnet must be one of"),
    ],
)
def test_a_table_key_that_is_no_setting_or_a_bad_value_is_named_with_its_table(values, match):
    with pytest.raises(RunError, match=match):
        _spec(**values)


def test_a_resume_compares_a_dotted_key_with_the_saved_table(tmp_path):
    from marljoint.run.spec import resume_spec, write_config

    (tmp_path / "run").mkdir()
    write_config(_spec(algorithm="qmix", offpolicy={**SMALL, "tau": 0.05}), tmp_path / "run" / "config.toml")
    assert resume_spec(tmp_path / "run", {"offpolicy.tau": 0.05}).offpolicy["tau"] == 0.05
    with pytest.raises(RunError, match=r"cannot resume with offpolicy = .*'tau': 0.1.*has offpolicy = .*'tau': 0.05"):
        resume_spec(tmp_path / "run", {"offpolicy.tau": 0.1})


def test_the_examples_in_the_docstrings_hold():
    import doctest

    import marljoint.collect.settings
    import marljoint.offpolicy.defaults
    import marljoint.ppo.network
    import marljoint.ppo.optim
    import marljoint.ppo.ppo_settings
    import marljoint.ppo.runtime
    import marljoint.run.migrations
    import marljoint.run.reads

    modules = [marljoint.run.reads, marljoint.run.migrations, marljoint.collect.settings, marljoint.offpolicy.defaults]
    modules += [marljoint.ppo.ppo_settings, marljoint.ppo.optim, marljoint.ppo.network, marljoint.ppo.runtime]
    for module in modules:
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__
