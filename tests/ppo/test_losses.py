"""PPO loss terms against values computed by hand."""

import math

import numpy as np
import pytest
import torch

from marljoint.ppo import (
    JointTrainerConfig,
    RunningNormalizer,
    explained_variance,
    masked_mean,
    normalize_advantages,
    policy_loss,
    value_loss,
)


def test_masked_mean_ignores_dead_rows_and_empty_columns():
    x = torch.tensor([[1.0, 5.0], [3.0, 7.0]])
    mask = torch.tensor([[True, False], [True, False]])
    assert masked_mean(x, mask).tolist() == [2.0, 0.0]


def test_advantage_normalisation_over_alive_rows_only():
    adv = torch.tensor([[1.0], [3.0], [100.0]])
    mask = torch.tensor([[True], [True], [False]])
    out = normalize_advantages(adv, mask)
    np.testing.assert_allclose(out.numpy().ravel(), [-1.0, 1.0, 0.0], atol=1e-6)


def test_policy_loss_hand_computed():
    # ratios e^{0.5}=1.6487 (clipped to 1.2 for A>0) and e^{-0.5}=0.6065 (clipped to 0.8, min picks 0.8*-1)
    log_prob = torch.tensor([[0.5], [-0.5]])
    old = torch.zeros(2, 1)
    adv = torch.tensor([[1.0], [-1.0]])
    terms = policy_loss(log_prob, old, adv, 0.2, torch.ones(2, 1, dtype=torch.bool))
    expected = -(1.2 * 1.0 + -0.8) / 2
    assert terms.loss.item() == pytest.approx(expected, abs=1e-6)
    assert terms.clip_fraction.item() == 1.0
    kl = ((math.exp(0.5) - 1 - 0.5) + (math.exp(-0.5) - 1 + 0.5)) / 2
    assert terms.approx_kl.item() == pytest.approx(kl, abs=1e-6)


def test_decoupled_policy_loss_weights_each_rows_clipped_surrogate():
    # The same rows as above, centred on a proximal policy and weighted by pi_prox / pi_behaviour = 2 and 0.5.
    log_prob = torch.tensor([[0.5], [-0.5]])
    adv = torch.tensor([[1.0], [-1.0]])
    weights = torch.tensor([[2.0], [0.5]])
    terms = policy_loss(log_prob, torch.zeros(2, 1), adv, 0.2, torch.ones(2, 1, dtype=torch.bool), weights)
    assert terms.loss.item() == pytest.approx(-(2.0 * 1.2 + 0.5 * -0.8) / 2, abs=1e-6)
    assert terms.clip_fraction.item() == 1.0  # the diagnostics are about the ratio to the proximal policy


def test_value_loss_plain_and_clipped():
    v = torch.tensor([[2.0]])
    old = torch.tensor([[0.0]])
    ret = torch.tensor([[1.0]])
    mask = torch.ones(1, 1, dtype=torch.bool)
    assert value_loss(v, old, ret, math.inf, mask).item() == pytest.approx(0.5)
    # clipped prediction 0.5: max((2-1)^2, (0.5-1)^2) = 1
    assert value_loss(v, old, ret, 0.5, mask).item() == pytest.approx(0.5)
    v2 = torch.tensor([[1.2]])
    # unclipped error 0.04, clipped 0.5 -> error 0.25: the pessimistic max wins
    assert value_loss(v2, old, ret, 0.5, mask).item() == pytest.approx(0.125)


def test_explained_variance_perfect_and_constant():
    t = torch.tensor([[1.0, 2.0], [3.0, 2.0]])
    ev = explained_variance(t, t, torch.ones(2, 2, dtype=torch.bool))
    assert ev[0].item() == 1.0
    assert math.isnan(ev[1].item())


def test_running_normalizer_matches_numpy_over_batches():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 5.0, size=(100, 2))
    mask = rng.random((100, 2)) < 0.7
    norm = RunningNormalizer(2)
    for chunk in range(4):
        sl = slice(25 * chunk, 25 * (chunk + 1))
        norm.update(torch.tensor(data[sl]), torch.tensor(mask[sl]))
    for i in range(2):
        kept = data[mask[:, i], i]
        assert norm.mean[i].item() == pytest.approx(kept.mean())
        assert norm.var[i].item() == pytest.approx(kept.var())
    frozen = norm.state_dict()
    norm.update(torch.tensor(data), torch.ones(100, 2, dtype=torch.bool), active=torch.tensor([False, True]))
    assert norm.mean[0].item() == frozen["mean"][0].item()
    x = torch.tensor([[1.0, -2.0]], dtype=torch.float64)
    torch.testing.assert_close(norm.denormalize(norm.normalize(x)), x)


def test_config_derived_sizes_and_minibatch_cap():
    cfg = JointTrainerConfig(num_envs=1, rollout_steps=64, minibatch_size=16)
    assert cfg.minibatches_per_epoch == 4
    assert cfg.replace(max_minibatches_per_epoch=2).minibatches_per_epoch == 2
    assert cfg.replace(max_minibatches_per_epoch=0).minibatches_per_epoch == 1
    assert cfg.replace(max_minibatches_per_epoch=99).minibatches_per_epoch == 4
    assert cfg.replace(iterate_all_minibatches=False).minibatches_per_epoch == 1


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("clip_range", 0.0, "clip_range must be > 0"),
        ("clip_range", -1.0, "clip_range must be > 0"),
        ("gamma", 1.5, r"gamma must be in \[0, 1\]"),
        ("gae_lambda", -0.1, r"gae_lambda must be in \[0, 1\]"),
        ("rollout_steps", 0, "rollout_steps must be a positive integer"),
        ("num_envs", 2.5, "num_envs must be a positive integer"),
        ("minibatch_size", -4, "minibatch_size must be a positive integer"),
        ("n_epochs", 0, "n_epochs must be a positive integer"),
        ("learning_rate", 0.0, "learning_rate must be > 0"),
        ("critic_lr", -1e-3, "critic_lr must be > 0"),
        ("target_kl", 0.0, "target_kl must be > 0"),
        ("vf_coef", -0.5, "vf_coef must be a finite number >= 0"),
        ("ent_coef", math.inf, "ent_coef must be a finite number >= 0"),
        ("max_grad_norm", 0.0, "max_grad_norm must be > 0"),
        ("clip_range_vf", 0.0, "clip_range_vf must be > 0"),
        ("max_minibatches_per_epoch", 1.5, "max_minibatches_per_epoch must be an integer"),
        ("hidden_sizes", (), "hidden_sizes must be a non-empty"),
        ("num_agents", 0, "num_agents must be a positive integer"),
        ("seed", "x", "seed must be an integer"),
    ],
)
def test_config_rejects_bad_values(field, value, match):
    with pytest.raises(ValueError, match=match):
        JointTrainerConfig(**{field: value})


def test_config_round_trip_and_unknown_keys():
    cfg = JointTrainerConfig(num_envs=3, clip_range_vf=0.3)
    assert JointTrainerConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match=r"unknown JointTrainerConfig field\(s\) \['lr'\]"):
        JointTrainerConfig.from_dict({"lr": 1e-3})
