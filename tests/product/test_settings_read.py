"""Every setting of a run reachable by --set, --sweep, marljoint tune --param and a config file (the tables' keys
with dots: offpolicy.tau, offpolicy.sac.actor_lr, mmd.alpha), and a setting the run's algorithm does not read
refused, naming what it reads instead."""

from __future__ import annotations

import dataclasses
import re

import pytest
from _product_helpers import run_cli

from marljoint.offpolicy import OffPolicyConfig
from marljoint.run.algorithms import ALGORITHMS
from marljoint.run.errors import RunError
from marljoint.run.reads import SettingsRead, setting_keys, settings_not_read, unread_settings, with_dotted_keys
from marljoint.run.spec import RunSpec
from marljoint.run.tune import ParamRange, check_search_space

SMALL = {"learning_starts": 16, "batch_size": 8}
NO_TRAINING = ["--env", "counter_v0", "--total-steps", "16", "--num-envs", "1", "--rollout-steps", "16"]
"""A budget no off-policy run at its defaults trains in: refused (offpolicy.learning_starts) after the settings read,
so a command these tests expect refused for a setting never trains."""


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


@pytest.mark.parametrize(
    ("algorithm", "given", "match"),
    [
        ("qmix", {"clip_range": 0.2}, r"qmix does not read clip_range \(= 0.2\); it is a PPO setting"),
        ("vdn", {"n_epochs": 10}, r"vdn does not read n_epochs \(= 10\); it is a PPO setting"),
        ("masac", {"offpolicy.tau": 0.01}, r"masac does not read offpolicy.tau \(= 0.01\); set offpolicy.sac.tau"),
        ("maddpg", {"offpolicy": {"sac": {"init_alpha": 0.2}}}, r"maddpg does not read offpolicy.sac.init_alpha"),
    ],
)
def test_a_setting_the_command_line_gives_is_refused_at_its_default_too(algorithm, given, match):
    # The same values from a file (or a run's own config.toml) are defaults, and pass.
    values = {"algorithm": algorithm, "offpolicy": SMALL, **given}
    assert _spec(**values).algorithm == algorithm
    with pytest.raises(RunError, match=match):
        RunSpec.from_dict({"total_steps": 64, **values}, given=given)
    spec = RunSpec.from_dict({"total_steps": 64, **values}, given={"algorithm": algorithm})
    with pytest.raises(RunError, match=match):  # a sweep's point or a tune trial on the run
        RunSpec.from_dict(given, base=spec, given=given)


def test_the_command_line_refuses_a_ppo_setting_at_its_default(tmp_path, capsys):
    args = ["train", "--algorithm", "qmix", "--set", "clip_range=0.2", "--out", str(tmp_path / "run"), "--quiet"]
    args += NO_TRAINING
    assert run_cli(args) == 2
    err = capsys.readouterr().err
    assert err == (
        "marljoint train: error: qmix does not read clip_range (= 0.2); it is a PPO setting (--algorithm mappo or "
        "ippo); drop it\n"
    )
    assert not (tmp_path / "run").exists()


def test_a_sweep_and_a_search_refuse_a_ppo_setting_at_its_default(tmp_path, capsys):
    args = ["train", "--algorithm", "qmix", "--sweep", "clip_range=0.2", "--out", str(tmp_path / "sweep"), "--quiet"]
    one_iteration = [*NO_TRAINING, "--set", "offpolicy={learning_starts=16, batch_size=8}"]  # were it not refused
    assert run_cli([*args, *one_iteration]) == 2
    assert "qmix does not read clip_range (= 0.2); it is a PPO setting" in capsys.readouterr().err
    args = ["tune", "--algorithm", "qmix", "--param", "clip_range=0.2:0.3", "--out", str(tmp_path / "t"), "--quiet"]
    assert run_cli([*args, *one_iteration]) == 2
    err = capsys.readouterr().err
    assert (
        "--param clip_range=0.2:0.3: a trial could draw clip_range = 0.2, which the run refuses (qmix does not "
        "read clip_range (= 0.2)" in err
    ), err
    assert not (tmp_path / "sweep").exists() and not (tmp_path / "t").exists()


def test_a_config_file_counts_only_the_values_other_than_their_defaults(tmp_path, capsys):
    from marljoint.run.spec import write_config

    # A PPO run's settings, every PPO setting at its default: taken by a qmix run (refused here only for the budget,
    # which is checked after the settings read).
    ppo = _spec(env="counter_v0", num_envs=1, rollout_steps=16, total_steps=16)
    write_config(ppo, tmp_path / "ppo.toml")
    args = ["train", "--config", str(tmp_path / "ppo.toml"), "--algorithm", "qmix", "--out", str(tmp_path / "q")]
    assert run_cli([*args, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "offpolicy.learning_starts = 1000 is more than" in err and "does not read" not in err, err
    # The command line counts whatever the file holds.
    assert run_cli([*args, "--set", "clip_range=0.2", "--quiet"]) == 2
    assert "qmix does not read clip_range (= 0.2)" in capsys.readouterr().err
    # A finished run's file holds the settings derived from its env as resolved (ent_coef 0.01 for discrete
    # actions, not its default None): those are values of its own, refused as any other.
    write_config(dataclasses.replace(ppo, trainer=ppo.trainer.replace(ent_coef=0.01)), tmp_path / "ppo.toml")
    assert run_cli([*args, "--quiet"]) == 2
    assert "qmix does not read ent_coef (= 0.01); it is a PPO setting" in capsys.readouterr().err


def test_a_resume_takes_the_settings_it_was_started_with(tmp_path):
    from marljoint.run.spec import resume_spec, write_config

    (tmp_path / "run").mkdir()
    started = {**SMALL, "tau": 0.01, "batch_size": 8}  # tau at its default: config.toml leaves it out
    write_config(_spec(algorithm="qmix", offpolicy=started), tmp_path / "run" / "config.toml")
    for same in ({"offpolicy": started}, {"offpolicy.tau": 0.01}, {"offpolicy": SMALL}, {"algorithm": "qmix"}):
        assert resume_spec(tmp_path / "run", same).offpolicy.tau == 0.01
    with pytest.raises(RunError, match=r"cannot resume with offpolicy = .*'tau': 0.02.*has offpolicy = "):
        resume_spec(tmp_path / "run", {"offpolicy": {**SMALL, "tau": 0.02}})
    with pytest.raises(RunError, match=r"qmix does not read clip_range \(= 0.2\)"):
        resume_spec(tmp_path / "run", {"clip_range": 0.2})


def test_dotted_keys_set_one_key_of_a_table():
    spec = _spec(algorithm="masac", **{"offpolicy.learning_starts": 16, "offpolicy.sac.actor_lr": 1e-3})
    assert spec.tables()["offpolicy"] == {"learning_starts": 16, "sac": {"actor_lr": 1e-3}}
    # Over a table given whole (a --config file's), a dotted key changes that key alone.
    spec = _spec(algorithm="qmix", offpolicy=SMALL, **{"offpolicy.tau": 0.05})
    assert spec.tables()["offpolicy"] == {**SMALL, "tau": 0.05}
    # Over the base run's table (a sweep's point, a tune trial).
    point = RunSpec.from_dict({"offpolicy.batch_size": 4}, base=spec)
    assert point.tables()["offpolicy"] == {**SMALL, "tau": 0.05, "batch_size": 4}
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
    assert "trainer" not in keys and set(RunSpec.__dataclass_fields__) - {"trainer", "given", "reasons"} <= set(keys)
    assert "given" not in keys and "reasons" not in keys  # what the command line gave and why a rule chose: no settings


def test_tune_refuses_a_range_the_algorithm_does_not_read():
    # Without the refusal every trial would train the same qmix run.
    spec = _spec(algorithm="qmix", offpolicy=SMALL)
    with pytest.raises(RunError, match=r"--param n_epochs=int:1:4: .*qmix does not read n_epochs"):
        check_search_space([ParamRange.parse("n_epochs=int:1:4")], spec)
    check_search_space([ParamRange.parse("offpolicy.learning_rate=log:1e-4:1e-2")], spec)
    check_search_space([ParamRange.parse("learning_rate=log:1e-4:1e-2")], spec)


def test_a_sweep_over_a_table_key_is_taken_and_refused_where_not_read(tmp_path, capsys):
    # offpolicy.tau is a known key; masac reads offpolicy.sac.tau, so its points are refused before any run starts,
    # the first at offpolicy.tau's default (0.01) too: the sweep gave it.
    args = ["train", "--algorithm", "masac", "--sweep", "offpolicy.tau=0.01,0.05", "--total-steps", "64"]
    args += ["--set", "offpolicy={learning_starts=16, batch_size=8}", "--out", str(tmp_path / "sweep"), "--quiet"]
    assert run_cli(args) == 2
    err = capsys.readouterr().err
    assert "masac does not read offpolicy.tau (= 0.01); set offpolicy.sac.tau instead" in err, err
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
    spec = _spec(algorithm="masac", num_envs=2, offpolicy={**SMALL, "sac": {"tau": 0.02}})
    config = spec.offpolicy
    assert isinstance(config, OffPolicyConfig) and spec.offpolicy_config() is config
    assert (config.algorithm, config.num_envs, config.batch_size, config.sac.tau) == ("masac", 2, 8, 0.02)
    assert spec.tables()["offpolicy"]["sac"] == {"tau": 0.02}
    assert RunSpec.from_dict(spec.to_dict()) == spec
    assert _spec().offpolicy_config() is None and _spec().offpolicy is None and _spec().psro is None


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
            {"algorithm": "masac", "offpolicy.sac.actor_lr": "1e-3"},
            r"^offpolicy.sac.actor_lr='1e-3' must be a float, got str; a learning rate such as actor_lr=3e-4$",
        ),
        (
            {"algorithm": "masac", "offpolicy": {"sac": {"gamma": 0.5}}},
            r"^offpolicy.sac.gamma is set by the off-policy config itself .*, got 0.5; set gamma there instead$",
        ),
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


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ("[offpolicy]\nbatch_sz = 4\n", r"unknown setting offpolicy.batch_sz; valid keys: offpolicy.learning_rate, "),
        ("[offpolicy]\nexploration = 'ucb'\n", r"offpolicy.exploration must be one of \['epsilon', 'boltzmann'\]"),
        ("[offpolicy.sac]\ntaus = 0.1\n", r"unknown setting offpolicy.sac.taus; valid keys: offpolicy.sac.tau, "),
    ],
)
def test_a_config_file_table_key_that_is_no_setting_is_refused_in_one_line(tmp_path, capsys, table, match):
    (tmp_path / "c.toml").write_text(table)
    args = ["train", "--config", str(tmp_path / "c.toml"), "--algorithm", "masac", "--out", str(tmp_path / "r")]
    assert run_cli([*args, "--quiet", *NO_TRAINING]) == 2
    err = capsys.readouterr().err
    assert re.match(r"marljoint train: error: " + match, err) and err.count("\n") == 1, err


def test_a_resume_compares_a_dotted_key_with_the_saved_table(tmp_path):
    from marljoint.run.spec import resume_spec, write_config

    (tmp_path / "run").mkdir()
    write_config(_spec(algorithm="qmix", offpolicy={**SMALL, "tau": 0.05}), tmp_path / "run" / "config.toml")
    assert resume_spec(tmp_path / "run", {"offpolicy.tau": 0.05}).offpolicy.tau == 0.05
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
