"""Magnetic mirror descent self-play: the KL term by hand, the schedule, the magnet, the run settings and the CLI."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.best_response import KuhnGame, MmdConfig, magnet_kl, mmd_regularizer
from marljoint.best_response.mmd import advantage_scale
from marljoint.ppo.losses import masked_mean
from marljoint.run.errors import RunError
from marljoint.run.train import RunSpec, read_config_file, write_config
from marljoint_envs import kuhn_poker_v0, mock_v0

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "product"))
from _product_helpers import run_cli  # noqa: E402


def _softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def test_the_kl_to_the_magnet_and_its_gradient_match_the_hand_computed_values():
    logits = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64, requires_grad=True)
    magnet = torch.tensor([0.0, 1.0, 3.0], dtype=torch.float64)
    kl = magnet_kl(logits, magnet, None, (3,))
    p, rho = _softmax(np.array([1.0, 2.0, 0.5])), _softmax(np.array([0.0, 1.0, 3.0]))
    expected = float((p * (np.log(p) - np.log(rho))).sum())
    assert float(kl.detach()) == pytest.approx(expected, abs=1e-12)
    kl.backward()
    # d KL / d z_j = p_j (log p_j - log rho_j - KL): the softmax Jacobian applied to log(p / rho) + 1.
    expected_grad = p * (np.log(p) - np.log(rho) - expected)
    np.testing.assert_allclose(logits.grad.numpy(), expected_grad, atol=1e-12)
    assert logits.grad.sum().item() == pytest.approx(0.0, abs=1e-12)


def test_illegal_actions_are_left_out_and_the_uniform_magnet_is_uniform_over_the_legal_ones():
    logits = torch.tensor([[1.0, 2.0, 50.0]], requires_grad=True)
    mask = torch.tensor([[True, True, False]])
    kl = magnet_kl(logits, None, mask, (3,))
    p = _softmax(np.array([1.0, 2.0]))
    assert float(kl.detach()) == pytest.approx(float((p * np.log(p)).sum() + math.log(2)), abs=1e-6)
    kl.sum().backward()
    assert torch.isfinite(logits.grad).all() and logits.grad[0, 2] == 0.0
    equal = magnet_kl(torch.tensor([[0.3, -1.0, 2.0]]), torch.tensor([[1.3, 0.0, 3.0]]), None, (3,))
    assert float(equal) == pytest.approx(0.0, abs=1e-6)  # a shift of the logits is the same policy


def test_heads_of_a_multidiscrete_action_add_up():
    a, b = torch.tensor([0.5, -0.5]), torch.tensor([1.0, 0.0, 2.0])
    ra, rb = torch.tensor([0.0, 1.0]), torch.tensor([0.0, 0.0, 0.0])
    joint = magnet_kl(torch.cat([a, b]), torch.cat([ra, rb]), None, (2, 3))
    assert float(joint) == pytest.approx(float(magnet_kl(a, ra, None, (2,)) + magnet_kl(b, rb, None, (3,))))


def test_the_schedule_decays_alpha_and_the_step_size_as_one_over_the_square_root():
    config = MmdConfig(alpha=0.8, decay_updates=100.0)
    assert config.factor(0) == 1.0
    assert config.factor(100) == pytest.approx(1 / math.sqrt(2))
    assert config.factor(300) == pytest.approx(0.5)
    assert config.alpha_at(300) == pytest.approx(0.4)
    constant = MmdConfig(alpha=0.8, schedule="constant")
    assert constant.alpha_at(10_000) == 0.8 and constant.factor(10_000) == 1.0


def test_alpha_min_floors_alpha_but_not_the_step_size():
    config = MmdConfig(alpha=0.8, decay_updates=100.0, alpha_min=0.3)
    assert config.alpha_at(0) == 0.8
    assert config.alpha_at(100) == pytest.approx(0.8 / math.sqrt(2))  # above the floor: the schedule's value
    assert config.alpha_at(300) == 0.4 and config.alpha_at(900) == 0.3 and config.alpha_at(10**6) == 0.3
    assert config.factor(900) == pytest.approx(0.8 / math.sqrt(10) / 0.8)  # η_t keeps falling
    assert MmdConfig(alpha=0.8).alpha_at(10**6) == pytest.approx(0.8 / math.sqrt(1 + 10**4))  # 0: no floor


def _mock_trainer(mmd=None, **changes):
    env = PettingZooJointEnv(mock_v0.parallel_env, num_envs=2, seed=0)
    config = JointTrainerConfig(num_envs=2, rollout_steps=8, minibatch_size=8, n_epochs=1, hidden_sizes=(8,), **changes)
    return JointMultiAgentTrainer.from_env(env, config, regularizer=None if mmd is None else mmd_regularizer(mmd))


def _weights(policy):
    return [t.detach().clone() for network in policy.networks for t in network.parameters()]


def test_the_moving_magnet_is_refreshed_every_k_updates_and_the_learning_rate_follows_the_schedule():
    trainer = _mock_trainer(MmdConfig(alpha=1.0, magnet="moving", magnet_every=2, decay_updates=1.0))
    regularizer = trainer.regularizer
    start = _weights(trainer.joint_policy)
    trainer.iterate()
    trainer.iterate()
    assert all(torch.equal(a, b) for a, b in zip(_weights(regularizer.magnet), start))  # kept for updates 0 and 1
    before_third = _weights(trainer.joint_policy)
    trainer.iterate()  # update 2 begins with a refresh
    assert all(torch.equal(a, b) for a, b in zip(_weights(regularizer.magnet), before_third))
    assert not all(torch.equal(a, b) for a, b in zip(before_third, start))
    assert regularizer.updates == 3 and regularizer.alpha == pytest.approx(1 / math.sqrt(3))
    assert trainer.learner.lr_scale == pytest.approx(1 / math.sqrt(3))
    metrics = regularizer.metrics()
    assert metrics["mmd/alpha"] == regularizer.alpha and metrics["mmd/kl"] >= 0.0


def test_the_run_holds_alpha_at_its_floor_while_the_learning_rate_keeps_falling():
    trainer = _mock_trainer(MmdConfig(alpha=1.0, decay_updates=1.0, alpha_min=0.6))
    regularizer = trainer.regularizer
    for _ in range(4):
        trainer.iterate()
    assert regularizer.alpha == 0.6  # 1 / sqrt(4) = 0.5 is below the floor
    assert trainer.learner.lr_scale == pytest.approx(0.5)
    assert regularizer.metrics()["mmd/alpha"] == 0.6


def test_the_advantage_scale_is_each_seats_standard_deviation_over_its_valid_rows():
    advantages = torch.tensor([[1.0, 5.0], [3.0, -1.0], [100.0, 2.0]])
    valid = torch.tensor([[True, True], [True, True], [False, True]])
    scale = advantage_scale(advantages, valid)
    assert scale[0] == pytest.approx(float(np.std([1.0, 3.0], ddof=1)))
    assert scale[1] == pytest.approx(float(np.std([5.0, -1.0, 2.0], ddof=1)))
    lone = advantage_scale(torch.tensor([[4.0], [9.0]]), torch.tensor([[True], [False]]))
    assert float(lone[0]) == torch.finfo(torch.float32).tiny  # one row: no spread to measure


class _Recording:
    """A regulariser that records the batches and terms of the one it wraps."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, batch):
        term = self.inner(batch)
        self.calls.append((batch, term.detach()))
        return term


def test_alpha_in_advantage_standard_deviations_weighs_each_seats_kl_by_its_scale():
    # The same update once in payoff units and once in advantage_std units: the term is α · Σ_i s_i KL_i.
    terms = {}
    for units in ("payoff", "advantage_std"):
        trainer = _mock_trainer(MmdConfig(alpha=0.7, alpha_units=units))
        regularizer = trainer.regularizer
        recording = trainer.learner.regularizer = _Recording(regularizer)
        trainer.iterate()
        batch, term = recording.calls[0]
        terms[units] = (batch, float(term), regularizer.metrics())
    batch, term, metrics = terms["advantage_std"]
    policy = batch.policy
    columns = [
        magnet_kl(out.head, None, policy.network_masks(k, batch.masks), network.action.nvec)
        for k, (network, out) in enumerate(zip(policy.networks, batch.outputs))
    ]
    kl = masked_mean(policy.agent_columns(columns), batch.valid).detach()
    scale = advantage_scale(batch.advantages, batch.valid)
    assert term == pytest.approx(float(0.7 * (scale * kl).sum()), rel=1e-5)
    assert metrics["mmd/scale"] > 0 and terms["payoff"][2]["mmd/scale"] == 1.0
    assert terms["payoff"][1] == pytest.approx(float(0.7 * kl.sum()), rel=1e-5)


def test_the_magnet_and_the_update_count_survive_a_checkpoint():
    trainer = _mock_trainer(MmdConfig(magnet="moving", magnet_every=1))
    trainer.iterate()
    trainer.iterate()
    state = trainer.state_dict()
    other = _mock_trainer(MmdConfig(magnet="moving", magnet_every=1))
    restored = other.regularizer
    other.load_state_dict(state)
    assert restored.updates == 2
    for a, b in zip(_weights(restored.magnet), _weights(trainer.regularizer.magnet)):
        assert torch.equal(a, b)


def test_without_mmd_the_checkpoint_has_no_regularizer_entry():
    assert "regularizer" not in _mock_trainer().state_dict()


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"alpha": 0.0}, "alpha must be a finite number > 0, got 0.0"),
        ({"alpha": float("nan")}, "alpha must be a finite number > 0"),
        ({"decay_updates": -1}, "decay_updates must be a finite number > 0, got -1"),
        ({"magnet": "previous"}, r"magnet must be one of \('moving', 'uniform', 'ema'\), got 'previous'"),
        ({"schedule": "linear"}, r"schedule must be one of \('inverse_sqrt', 'constant'\), got 'linear'"),
        ({"magnet_every": 0}, "magnet_every must be a positive integer"),
        ({"anneal_step_size": "yes"}, "anneal_step_size must be true or false"),
        ({"alpha_units": "chips"}, r"alpha_units must be one of \('payoff', 'advantage_std'\), got 'chips'"),
        ({"alpha_min": -0.1}, r"alpha_min must be a number from 0 to alpha \(0.5\), got -0.1"),
        ({"alpha_min": 0.6}, r"alpha_min must be a number from 0 to alpha \(0.5\), got 0.6"),
        ({"alpha_min": float("nan")}, "alpha_min must be a number from 0 to alpha"),
        ({"alpha_min": True}, "alpha_min must be a number from 0 to alpha"),
        ({"opponent_reach": 1}, "opponent_reach must be true or false, got 1"),
        ({"max_weight": 0.5}, "max_weight must be a finite number ≥ 1, got 0.5"),
        ({"max_weight": float("inf")}, "max_weight must be a finite number ≥ 1, got inf"),
    ],
)
def test_bad_settings_name_the_field_and_the_value(changes, match):
    with pytest.raises(ValueError, match=match):
        MmdConfig(**changes)


def test_unknown_settings_list_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown mmd setting\(s\) \['alpah'\]; valid settings: \['alpha'"):
        MmdConfig.from_dict({"alpah": 0.1})


def test_mmd_refuses_envs_that_are_not_two_player_and_a_second_learning_rate_schedule():
    from marljoint_envs import bucket_brigade_v0

    env = PettingZooJointEnv(lambda: bucket_brigade_v0.parallel_env(num_agents=3), num_envs=1, seed=0)
    config = JointTrainerConfig(num_envs=1, rollout_steps=8, minibatch_size=8)
    with pytest.raises(ValueError, match=r"two-player zero-sum games; this env has 3 agents"):
        JointMultiAgentTrainer.from_env(env, config, regularizer=mmd_regularizer(MmdConfig()))
    with pytest.raises(ValueError, match="anneal_lr=True and mmd anneal_step_size=True"):
        _mock_trainer(MmdConfig(), anneal_lr=True)
    _mock_trainer(MmdConfig(anneal_step_size=False), anneal_lr=True)
    with pytest.raises(ValueError, match=r"opponent_reach = true computes each seat's own reach .* uniform_mix = 0.1"):
        _mock_trainer(MmdConfig(opponent_reach=True), uniform_mix=0.1)
    _mock_trainer(MmdConfig(), uniform_mix=0.1)


def test_run_settings_round_trip_through_config_toml(tmp_path):
    settings = {"alpha": 0.5, "magnet": "ema", "magnet_rate": 0.2}
    spec = RunSpec.from_dict({"env": "kuhn_poker_v0", "env_kwargs": {}, "self_play": "mmd", "mmd": settings})
    assert spec.mmd_config() == MmdConfig(**settings)
    write_config(spec, tmp_path / "config.toml")
    values = read_config_file(tmp_path / "config.toml")
    assert values["self_play"] == "mmd" and values["mmd"] == MmdConfig(**settings).to_dict()
    again = RunSpec.from_dict(values)
    assert again.mmd_config() == spec.mmd_config() and again.trainer == spec.trainer
    assert RunSpec().mmd_config() is None and "mmd" not in read_config_file(_written(RunSpec(), tmp_path))


def _written(spec, directory):
    write_config(spec, directory / "plain.toml")
    return directory / "plain.toml"


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"self_play": "cfr"}, r"self_play must be one of \('ppo', 'mmd'\) \(or unset\), got 'cfr'"),
        ({"mmd": {"alpha": 0.1}}, r"mmd settings \{'alpha': 0.1\} need self_play = \"mmd\""),
        ({"self_play": "mmd", "mmd": {"alpha": -1}}, "mmd.alpha must be a finite number > 0, got -1"),
        ({"self_play": "mmd", "mmd": 3}, "mmd must be a table of MmdConfig settings, got 3"),
    ],
)
def test_bad_run_settings_raise_run_errors(values, match):
    with pytest.raises(RunError, match=match):
        RunSpec.from_dict(values)


def test_marljoint_train_self_play_mmd_trains_on_kuhn_poker(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--env", "kuhn_poker_v0", "--self-play", "mmd", "--num-envs", "64", "--total-steps", "1024"]
    assert run_cli([*args, "--set", "mmd={alpha = 0.5}", "--out", str(out), "--quiet"]) == 0
    config = read_config_file(out / "config.toml")
    assert config["self_play"] == "mmd" and config["mmd"]["alpha"] == 0.5
    assert config["hidden_sizes"] == [128] and config["gamma"] == 1.0  # the self-play settings of the game
    # 64 copies x 8 steps over Kuhn's 12 information states: 43 decisions each per update, so an ema magnet
    assert config["normalize_advantages"] is False and config["mmd"]["magnet"] == "ema"
    assert config["clip_range"] == 0.1 and config["uniform_mix"] == 0.0  # the ema regime mixes no uniform play
    with (out / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and float(rows[-1]["mmd/alpha"]) == pytest.approx(0.5 / math.sqrt(1.01))
    assert float(rows[-1]["mmd/scale"]) == 1.0  # alpha_units = "payoff"
    documented = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    assert all(f"| `mmd/{name}` |" in documented for name in ("alpha", "kl", "scale"))


def test_marljoint_train_refuses_mmd_on_three_agents_in_one_line(tmp_path, capsys):
    kwargs = json.dumps({"num_agents": 3, "num_houses": 5, "max_nights": 20})
    args = ["train", "--env", "bucket_brigade_v0", "--env-kwargs", kwargs, "--self-play", "mmd", "--num-envs", "2"]
    assert run_cli([*args, "--total-steps", "64", "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "two-player zero-sum games; this env has 3 agents" in err[0]
    assert not (tmp_path / "run" / "config.toml").exists()


@pytest.mark.slow
def test_mmd_self_play_approaches_the_equilibrium_of_kuhn_poker():
    from marljoint.run.recipes import SELF_PLAY_TRAINER

    env = PettingZooJointEnv(kuhn_poker_v0.raw_env, num_envs=SELF_PLAY_TRAINER["num_envs"], seed=0)
    spec = RunSpec.from_dict({"env": "kuhn_poker_v0", "env_kwargs": {}, "self_play": "mmd"})
    config = spec.trainer.replace(**SELF_PLAY_TRAINER)
    trainer = JointMultiAgentTrainer.from_env(env, config, regularizer=mmd_regularizer(MmdConfig()))
    game = KuhnGame()
    for _ in range(60):
        trainer.iterate()
    tables = [game.table(trainer.agent_policy(seat), seat) for seat in range(2)]
    # Uniform play: 11/24 ≈ 0.458; this seed ends at 0.11 after its 246k env steps (the benchmark goes further).
    assert game.nash_conv(tables) / 2 < 0.2
