"""GAE against hand-computed values and a naive per-trajectory reference."""

import numpy as np
import pytest
import torch

from marljoint.ppo import compute_gae

GAMMA, LAM = 0.9, 0.8
REWARDS = torch.tensor([1.0, 2.0, 3.0, 4.0])
VALUES = torch.tensor([0.5, 1.0, 1.5, 2.0])
DONES = torch.tensor([False, True, False, False])
NONE = torch.zeros(4, dtype=torch.bool)


def test_hand_computed_with_zero_bootstrap():
    adv, ret = compute_gae(REWARDS, VALUES, DONES, NONE, torch.tensor(0.0), GAMMA, LAM)
    np.testing.assert_allclose(adv.numpy(), [2.12, 1.00, 4.74, 2.00], atol=1e-6)
    np.testing.assert_allclose(ret.numpy(), [2.62, 2.00, 6.24, 4.00], atol=1e-6)


def test_nonzero_bootstrap_flows_into_the_open_episode_only():
    adv, _ = compute_gae(REWARDS, VALUES, DONES, NONE, torch.tensor(10.0), GAMMA, LAM)
    # t=3: 4 + 0.9*10 - 2 = 11; t=2: 3 + 0.9*2 - 1.5 + 0.72*11 = 11.22; episode 1 unchanged.
    np.testing.assert_allclose(adv.numpy(), [2.12, 1.00, 11.22, 11.0], atol=1e-5)


def test_truncation_bootstraps_from_the_final_state():
    truncated = torch.tensor([False, True, False, False])
    final = torch.tensor([0.0, 5.0, 0.0, 0.0])
    adv, _ = compute_gae(REWARDS, VALUES, NONE, truncated, torch.tensor(0.0), GAMMA, LAM, final_values=final)
    # t=1: 2 + 0.9*5 - 1 = 5.5 (no λ-recursion across the cut); t=0: 1 + 0.9*1 - 0.5 + 0.72*5.5 = 5.36
    np.testing.assert_allclose(adv.numpy(), [5.36, 5.5, 4.74, 2.0], atol=1e-5)


def test_terminated_wins_over_truncated():
    both = torch.tensor([False, True, False, False])
    final = torch.tensor([0.0, 5.0, 0.0, 0.0])
    adv, _ = compute_gae(REWARDS, VALUES, both, both, torch.tensor(0.0), GAMMA, LAM, final_values=final)
    np.testing.assert_allclose(adv.numpy()[:2], [2.12, 1.00], atol=1e-6)


def test_all_terminal_rows_are_one_step_advantages():
    term = torch.ones(4, dtype=torch.bool)
    adv, ret = compute_gae(REWARDS, VALUES, term, NONE, torch.tensor(7.0), GAMMA, LAM)
    np.testing.assert_allclose(adv.numpy(), (REWARDS - VALUES).numpy(), atol=1e-6)
    np.testing.assert_allclose(ret.numpy(), REWARDS.numpy(), atol=1e-6)


def _naive_gae(rewards, values, term, trunc, valid, final, bootstrap, gamma, lam):
    """Per-agent reference: walk each agent's own valid rows forward, folding skipped rewards back."""
    T = len(rewards)
    adv = np.zeros(T)
    rows = [t for t in range(T) if valid[t]]
    for k, t in enumerate(rows):
        total, weight = 0.0, 1.0
        for m, s in enumerate(rows[k:]):
            # reward of the decision at s plus every reward up to (not including) the next decision or the end
            nxt = rows[k + m + 1] if k + m + 1 < len(rows) else T
            r = rewards[s]
            end = None
            for u in range(s, nxt):
                if u > s:
                    r += rewards[u]
                if term[u] or trunc[u]:
                    end = u
                    break
            if end is not None:
                next_v = 0.0 if term[end] else final[end]
            else:
                next_v = values[nxt] if nxt < T else bootstrap
            delta = r + gamma * next_v - values[s]
            total += weight * delta
            weight *= gamma * lam
            if end is not None or nxt == T:
                break
        adv[t] = total
    return adv


@pytest.mark.parametrize("seed", range(5))
def test_matches_naive_reference_with_invalid_rows(seed):
    rng = np.random.default_rng(seed)
    T = 30
    rewards = rng.normal(size=T)
    values = rng.normal(size=T)
    term = rng.random(T) < 0.1
    trunc = (rng.random(T) < 0.1) & ~term
    valid = rng.random(T) < 0.6
    final = rng.normal(size=T)
    adv, ret = compute_gae(
        torch.tensor(rewards),
        torch.tensor(values),
        torch.tensor(term),
        torch.tensor(trunc),
        torch.tensor(0.3, dtype=torch.float64),
        0.95,
        0.9,
        valid=torch.tensor(valid),
        final_values=torch.tensor(final),
    )
    expected = _naive_gae(rewards, values, term, trunc, valid, final, 0.3, 0.95, 0.9)
    np.testing.assert_allclose(adv.numpy(), expected, atol=1e-10)
    np.testing.assert_allclose(ret.numpy(), np.where(valid, expected + values, 0.0), atol=1e-10)


def test_turn_based_reward_on_the_other_agents_turn_reaches_the_last_move():
    # Agent moves at t=0 and t=2; the game ends at t=3 (its opponent's move) paying it +1.
    rewards = torch.tensor([0.0, 0.0, 0.0, 1.0])
    values = torch.zeros(4)
    term = torch.tensor([False, False, False, True])
    valid = torch.tensor([True, False, True, False])
    adv, _ = compute_gae(rewards, values, term, NONE, torch.tensor(0.0), 1.0, 1.0, valid=valid)
    np.testing.assert_allclose(adv.numpy(), [1.0, 0.0, 1.0, 0.0])


def test_batched_shapes_match_per_column_runs():
    rng = np.random.default_rng(0)
    r = torch.tensor(rng.normal(size=(6, 3, 2)))
    v = torch.tensor(rng.normal(size=(6, 3, 2)))
    term = torch.tensor(rng.random((6, 3, 2)) < 0.2)
    boot = torch.tensor(rng.normal(size=(3, 2)))
    adv, _ = compute_gae(r, v, term, torch.zeros_like(term), boot, 0.9, 0.8)
    for e in range(3):
        for i in range(2):
            col, _ = compute_gae(
                r[:, e, i], v[:, e, i], term[:, e, i], torch.zeros(6, dtype=torch.bool), boot[e, i], 0.9, 0.8
            )
            torch.testing.assert_close(adv[:, e, i], col)


def test_length_mismatch_raises():
    with pytest.raises(ValueError, match="values has shape"):
        compute_gae(REWARDS, VALUES[:3], DONES, NONE, torch.tensor(0.0), GAMMA, LAM)
    with pytest.raises(ValueError, match="bootstrap_values has shape"):
        compute_gae(REWARDS, VALUES, DONES, NONE, torch.zeros(2), GAMMA, LAM)
    with pytest.raises(ValueError, match="valid has shape"):
        compute_gae(REWARDS, VALUES, DONES, NONE, torch.tensor(0.0), GAMMA, LAM, valid=torch.ones(3, dtype=torch.bool))
