"""--self-play mmd's defaults: the PPO settings of every game and the magnet the game's size chooses, written to
config.toml with the rule's reason, and never over a setting the user gave."""

from __future__ import annotations

import numpy as np
import pytest

from marljoint.cli import main as run_cli
from marljoint.run.recipes import (
    EMA_MAGNET_DECISIONS,
    MEASURE_EVERY,
    MMD_MAGNETS,
    MMD_TRAINER,
    SELF_PLAY_TRAINER,
    SIMULTANEOUS_FLOOR,
    mmd_magnet_rule,
    payoff_sd,
    self_play_rule,
)
from marljoint.run.spec import RunSpec, read_config_file

pytest.importorskip("pyspiel")

DECISIONS = SELF_PLAY_TRAINER["num_envs"] * SELF_PLAY_TRAINER["rollout_steps"]


def _spec(values):
    rule, reasons = self_play_rule(values, "simple_spread_v3")
    return RunSpec.from_dict({"env_kwargs": {}, **rule, **values}), reasons


@pytest.mark.parametrize("env", ["kuhn_poker_v0", "openspiel:kuhn_poker"])
def test_kuhn_poker_gets_the_ema_magnet_from_its_twelve_information_states(env):
    magnet, reason = mmd_magnet_rule(env, {}, DECISIONS)
    assert magnet == MMD_MAGNETS["ema"]
    assert f"{DECISIONS:,} decisions per update over 12 information states, 341 each" in reason


def test_leduc_poker_gets_the_uniform_magnet_held_at_0_2_and_uniform_play_in_the_rollouts():
    magnet, reason = mmd_magnet_rule("openspiel:leduc_poker", {}, DECISIONS)
    assert magnet == {"mmd.magnet": "uniform", "mmd.alpha": 0.5, "mmd.alpha_min": 0.2, "uniform_mix": 0.1}
    assert "over 936 information states, 4.38 each, fewer than 32" in reason
    assert "payoff standard deviation under uniform play (4.513)" in reason


def test_the_uniform_regime_scales_alpha_to_the_game_s_payoff_spread():
    # liar's dice pays +-1 (spread 1.0 under uniform play, Leduc poker's 4.513): the same pull takes 0.22 times alpha
    assert payoff_sd("openspiel:liars_dice", {"dice_sides": 4}) == pytest.approx(1.0, abs=1e-3)
    magnet, reason = mmd_magnet_rule("openspiel:liars_dice", {"dice_sides": 4}, DECISIONS)
    assert magnet == {"mmd.magnet": "uniform", "mmd.alpha": 0.11, "mmd.alpha_min": 0.044, "uniform_mix": 0.1}
    assert "alpha 0.11 and alpha_min 0.044" in reason
    spec, _ = _spec({"env": "openspiel:liars_dice", "env_kwargs": {"dice_sides": 4}, "self_play": "mmd"})
    assert (spec.mmd.alpha, spec.mmd.alpha_min) == (0.11, 0.044)
    # an alpha the user gives is kept, and a floor above it would be none: it falls to the alpha
    spec, _ = _spec({"env": "openspiel:leduc_poker", "self_play": "mmd", "mmd": {"alpha": 0.1}})
    assert (spec.mmd.alpha, spec.mmd.alpha_min) == (0.1, 0.1)
    spec, _ = _spec({"env": "openspiel:leduc_poker", "self_play": "mmd", "mmd.alpha": 0.3})
    assert (spec.mmd.alpha, spec.mmd.alpha_min) == (0.3, 0.2)


def test_the_payoff_spread_is_exact_and_absent_where_the_game_has_no_tree_here():
    from marljoint.best_response.openspiel_game import OpenSpielGame

    game = OpenSpielGame("kuhn_poker")
    shape = game.legal_mask(0).shape
    bet, check = np.zeros(shape), np.zeros(shape)
    bet[:, 1], check[:, 0] = 1.0, 1.0
    assert game.return_sd([bet, bet]) == pytest.approx([2.0, 2.0])  # both bet: +-2, the cards decide
    assert game.return_sd([check, check]) == pytest.approx([1.0, 1.0])  # both check: +-1
    # uniform play: E[r] = 1/4 (bet, fold) - 1/8 (check, bet, fold) = 0.125, E[r^2] = 1/4*4 + 1/4 + 1/4 + 1/8 + 1/8*4
    assert payoff_sd("openspiel:kuhn_poker", {}) == pytest.approx(np.sqrt(2.125 - 0.125**2))
    assert payoff_sd("kuhn_poker_v0", {}) is None  # a bundled game: alpha stays in payoff units
    magnet, reason = mmd_magnet_rule("kuhn_poker_v0", {}, 12)
    assert (magnet["mmd.alpha"], magnet["mmd.alpha_min"]) == (0.5, 0.2) and "not computed" in reason


def test_the_rule_reads_the_game_parameters_and_the_rollout_size():
    # Leduc with suits merged has 288 information states: 9,216 decisions per update (36 copies x 256 steps) is 32
    merged = {"suit_isomorphism": True}
    assert mmd_magnet_rule("openspiel:leduc_poker", merged, 32 * 288)[0] == MMD_MAGNETS["ema"]
    assert mmd_magnet_rule("openspiel:leduc_poker", merged, 32 * 288 - 1)[0]["mmd.magnet"] == "uniform"
    # Kuhn with a small rollout samples each state too rarely
    assert mmd_magnet_rule("kuhn_poker_v0", {}, 12 * EMA_MAGNET_DECISIONS - 1)[0]["mmd.magnet"] == "uniform"


def test_in_a_game_of_simultaneous_moves_every_seat_decides_at_every_step():
    kwargs = {"num_cards": 3, "imp_info": True, "points_order": "descending"}
    _, reason = mmd_magnet_rule("openspiel:goofspiel", kwargs, 100)
    assert "200 decisions per update" in reason


def test_a_game_of_simultaneous_moves_holds_alpha_at_twice_the_turn_based_floor(monkeypatch):
    import marljoint.run.recipes as recipes

    kwargs = {"num_cards": 3, "imp_info": True, "points_order": "descending"}
    spread = payoff_sd("openspiel:goofspiel", kwargs)
    magnet, reason = mmd_magnet_rule("openspiel:goofspiel", kwargs, 100)
    assert magnet["mmd.alpha_min"] == float(f"{SIMULTANEOUS_FLOOR * spread / recipes.PAYOFF_SD_REFERENCE:.2g}")
    assert magnet["mmd.alpha"] == float(f"{0.5 * spread / recipes.PAYOFF_SD_REFERENCE:.2g}")
    assert "alpha_min 0.4 in a game of simultaneous moves" in reason
    # where the payoff spread is not computed the floor stays unscaled, still the simultaneous one
    monkeypatch.setattr(recipes, "payoff_sd", lambda *args: None)
    magnet, reason = mmd_magnet_rule("openspiel:goofspiel", kwargs, 100)
    assert (magnet["mmd.alpha"], magnet["mmd.alpha_min"]) == (0.5, SIMULTANEOUS_FLOOR) and "not computed" in reason


def test_a_game_too_large_to_count_gets_the_uniform_magnet(monkeypatch):
    import marljoint.run.registry as registry

    def too_large(*args, **kwargs):
        raise ValueError("more than 300,000 information states")

    monkeypatch.setattr(registry, "known_game", too_large)
    magnet, reason = mmd_magnet_rule("openspiel:some_big_game", {}, DECISIONS)
    assert magnet["mmd.magnet"] == "uniform" and "too many to count" in reason


def test_mmd_runs_start_from_the_ppo_settings_and_the_magnet_and_say_why():
    spec, reasons = _spec({"env": "openspiel:kuhn_poker", "self_play": "mmd"})
    assert spec.trainer.clip_range == MMD_TRAINER["clip_range"] and spec.trainer.uniform_mix == 0.0
    assert spec.mmd.magnet == "ema" and spec.mmd.alpha_min == 0.0
    assert set(reasons) == {"mmd", "exploitability_every"} and "ema magnet" in reasons["mmd"]
    spec, reasons = _spec({"env": "openspiel:leduc_poker", "self_play": "mmd"})
    assert spec.mmd.magnet == "uniform" and spec.mmd.alpha_min == 0.2 and spec.trainer.uniform_mix == 0.1
    assert set(reasons) == {"mmd", "uniform_mix", "exploitability_every"}
    assert "uniform magnet" in reasons["uniform_mix"]


def test_plain_self_play_and_other_envs_are_left_as_they_were():
    spec, reasons = _spec({"env": "openspiel:kuhn_poker", "self_play": "ppo"})
    assert spec.trainer.clip_range == 0.2 and spec.trainer.uniform_mix == 0.0
    assert set(reasons) == {"exploitability_every"}  # plain self-play is measured, and nothing else is chosen
    assert self_play_rule({"env": "simple_spread_v3", "self_play": "mmd"}, "simple_spread_v3") == ({}, {})
    assert self_play_rule({"env": "openspiel:kuhn_poker"}, "simple_spread_v3") == ({}, {})


def test_settings_the_user_gave_are_kept():
    # a magnet given: no rule, no reason
    spec, reasons = _spec({"env": "openspiel:leduc_poker", "self_play": "mmd", "mmd.magnet": "moving"})
    assert spec.mmd.magnet == "moving" and spec.mmd.alpha_min == 0.0 and "mmd" not in reasons
    # a floor given: the rule's magnet with the user's floor
    spec, reasons = _spec({"env": "openspiel:leduc_poker", "self_play": "mmd", "mmd": {"alpha_min": 0.1}})
    assert spec.mmd.magnet == "uniform" and spec.mmd.alpha_min == 0.1 and "mmd" in reasons
    spec, reasons = _spec({"env": "openspiel:leduc_poker", "self_play": "mmd", "uniform_mix": 0.05})
    assert spec.trainer.uniform_mix == 0.05 and "uniform_mix" not in reasons and spec.mmd.alpha_min == 0.2
    # PPO settings given keep their values; a rollout given changes the count the rule reads
    spec, _ = _spec({"env": "kuhn_poker_v0", "self_play": "mmd", "clip_range": 0.3, "num_envs": 8})
    assert spec.trainer.clip_range == 0.3 and spec.mmd.magnet == "uniform"  # 64 decisions over 12 states


def test_config_toml_holds_the_magnet_with_the_reason_and_a_resume_reads_it_back(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--env", "openspiel:leduc_poker", "--self-play", "mmd", "--num-envs", "64", "--total-steps", "512"]
    assert run_cli([*args, "--out", str(out), "--quiet"]) == 0
    text = (out / "config.toml").read_text()
    comment = next(line for line in text.splitlines() if line.startswith("# derived from the env (a uniform magnet"))
    assert "512 decisions per update over 936 information states" in comment
    config = read_config_file(out / "config.toml")
    assert config["mmd"]["magnet"] == "uniform" and config["mmd"]["alpha_min"] == 0.2
    assert config["clip_range"] == 0.1 and config["uniform_mix"] == 0.1
    assert "# derived from the env (a uniform magnet" in text.split("\nuniform_mix = ")[0].splitlines()[-1]
    # a config file holds every setting: the rule adds nothing to it, even with a rollout that would choose ema
    again = tmp_path / "again"
    more = ["--config", str(out / "config.toml"), "--env", "openspiel:kuhn_poker", "--total-steps", "512"]
    assert run_cli(["train", *more, "--out", str(again), "--quiet"]) == 0
    assert read_config_file(again / "config.toml")["mmd"]["magnet"] == "uniform"


def test_self_play_on_a_game_collects_in_one_worker_per_core_at_policy_lag_0():
    values = {"env": "openspiel:kuhn_poker", "self_play": "ppo"}
    settings, reasons = self_play_rule(values, "simple_spread_v3", cores=4)
    assert settings["collection"] == {"backend": "subprocess", "workers": 4}
    assert "4 env worker processes at policy lag 0" in reasons["collection"]
    assert "collection" not in self_play_rule(values, "simple_spread_v3", cores=1)[0]  # one core: in this process
    assert self_play_rule({**values, "num_envs": 3}, "simple_spread_v3", cores=8)[0]["collection"]["workers"] == 3
    # a collection given, or no cores to plan for (several runs, ranks): the run's own
    given = {**values, "collection": {"backend": "local"}}
    assert "collection" not in self_play_rule(given, "simple_spread_v3", cores=4)[0]
    assert "collection" not in self_play_rule(values, "simple_spread_v3")[0]


def test_the_collection_rule_is_written_as_this_machine_s_and_env_workers_0_opts_out(tmp_path, monkeypatch):
    import marljoint.threads

    monkeypatch.setattr(marljoint.threads, "usable_cores", lambda: 2)
    args = ["train", "--env", "kuhn_poker_v0", "--self-play", "ppo", "--num-envs", "8", "--total-steps", "64"]
    assert run_cli([*args, "--out", str(tmp_path / "rule"), "--quiet"]) == 0
    text = (tmp_path / "rule" / "config.toml").read_text()
    assert "# derived from this machine (2 env worker processes at policy lag 0" in text
    assert read_config_file(tmp_path / "rule" / "config.toml")["collection"]["backend"] == "subprocess"
    assert run_cli([*args, "--env-workers", "0", "--out", str(tmp_path / "local"), "--quiet"]) == 0
    assert read_config_file(tmp_path / "local" / "config.toml")["collection"]["backend"] == "local"
    rule = (tmp_path / "rule" / "metrics.csv").read_text().splitlines()[1].split(",")
    local = (tmp_path / "local" / "metrics.csv").read_text().splitlines()[1].split(",")
    assert rule[5:] == local[5:]  # the same run (the columns after the clock and speed ones)


def test_env_workers_0_refuses_what_needs_workers_in_one_line(tmp_path, capsys):
    args = ["train", "--env", "kuhn_poker_v0", "--env-workers", "0", "--policy-lag", "1", "--total-steps", "64"]
    with pytest.raises(SystemExit, match="2"):
        run_cli([*args, "--out", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--env-workers 0 collects in this process" in err[0]
    with pytest.raises(SystemExit, match="2"):
        run_cli(["train", "--env-workers", "-1", "--out", str(tmp_path / "other")])
    assert "must be an integer >= 0 (0: in this process) or 'auto', got -1" in capsys.readouterr().err


def test_self_play_on_a_countable_game_measures_its_exploitability_every_10_iterations(monkeypatch):
    settings, reasons = self_play_rule({"env": "openspiel:leduc_poker", "self_play": "ppo"}, "simple_spread_v3")
    assert settings["exploitability_every"] == MEASURE_EVERY == 10
    assert "936 information states give an exact exploitability" in reasons["exploitability_every"]
    given = {"env": "openspiel:leduc_poker", "self_play": "mmd", "exploitability_every": 3}
    assert "exploitability_every" not in self_play_rule(given, "simple_spread_v3")[0]
    import marljoint.run.recipes as recipes

    monkeypatch.setattr(recipes, "game_size", lambda *args: None)  # a game too large to tabulate
    settings, reasons = self_play_rule({"env": "openspiel:some_big_game", "self_play": "mmd"}, "simple_spread_v3")
    assert "exploitability_every" not in settings and "exploitability_every" not in reasons
    assert settings["mmd.magnet"] == "uniform"


def test_a_no_flag_mmd_run_writes_its_average_policy(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--env", "openspiel:kuhn_poker", "--self-play", "mmd", "--num-envs", "64", "--total-steps", "5120"]
    assert run_cli([*args, "--env-workers", "0", "--out", str(out), "--quiet"]) == 0
    assert (out / "openspiel_average_policy.json").is_file()
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "exploit/average_exploitability" in header
