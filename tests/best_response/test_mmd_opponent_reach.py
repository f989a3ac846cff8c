"""MMD's ``opponent_reach`` row weights: one over the opponent's probability of its moves so far in the episode,
carried across rollouts and deferred moves, neutral when capped at 1, and part of the checkpoint."""

from __future__ import annotations

import math

import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.best_response import MmdConfig, attach_mmd
from marljoint.best_response.mmd import OpponentReach
from marljoint_envs import kuhn_poker_v0

CAP = 3.0


def _kuhn_trainer(seed=0, **changes):
    env = PettingZooJointEnv(kuhn_poker_v0.raw_env, num_envs=3, seed=seed)
    settings = dict(num_envs=3, rollout_steps=3, num_minibatches=2, n_epochs=2, hidden_sizes=(8,), gamma=1.0)
    config = JointTrainerConfig(**{**settings, **changes})
    return JointMultiAgentTrainer.from_env(env, config)


def _by_episode(rollouts):
    """The expected unscaled weights, computed episode by episode from the rows in the order they were played.

    Each rollout's own rows (after its carried ones) continue the stream of the one before; a carried row is the
    move deferred at the end of the previous rollout, and keeps the weight that move had when it was made.
    """
    expected = []
    envs, seats = rollouts[0].log_probs.shape[1:]
    histories = [[] for _ in range(envs)]  # per env copy: the (seat, log-prob) moves of the running episode
    deferred_weight = {}
    for rollout in rollouts:
        carried = 0 if rollout.carried is None else rollout.carried.steps
        full = rollout.extended()
        raw = torch.ones(full.steps, envs, seats, dtype=torch.float64)
        for (e, j), weight in deferred_weight.items():
            raw[j, e, j] = weight
        for t in range(carried, full.steps):
            for e in range(envs):
                for i in range(seats):
                    opponents = sum(lp for seat, lp in histories[e] if seat != i)
                    raw[t, e, i] = min(CAP, math.exp(-opponents))
                for i in range(seats):
                    if full.valid[t, e, i]:
                        histories[e].append((i, float(full.log_probs[t, e, i])))
                if bool((full.terminated[t, e] | full.truncated[t, e]).any()):
                    histories[e] = []
        deferred_weight = {}
        if full.deferred is not None:
            for t, e, j in full.deferred.nonzero().tolist():
                deferred_weight[(e, j)] = float(raw[t, e, j])
        trained = full.trainable.to(torch.float64)
        mean = (raw * trained).sum((0, 1)) / trained.sum((0, 1))
        expected.append((raw / mean, full.trainable))
    return expected


def test_the_weights_are_one_over_the_opponents_probability_of_the_episodes_moves_so_far():
    trainer = _kuhn_trainer()
    reach = OpponentReach(CAP)
    rollouts, got = [], []
    for _ in range(6):
        rollout = trainer.collect_rollout()
        rollouts.append(_copy(rollout))
        carried = 0 if rollout.carried is None else rollout.carried.steps
        got.append(reach(rollout.extended(), carried))
    assert any(r.carried is not None for r in rollouts)  # moves were carried across rollouts
    saw_cap = False
    for weights, (expected, trained) in zip(got, _by_episode(rollouts)):
        assert torch.allclose(weights[trained].double(), expected[trained], rtol=1e-6)
        saw_cap |= bool((expected[trained] < expected[trained].max()).any())
    assert saw_cap  # the weights differ between rows: not all one


def test_a_cap_of_one_leaves_the_update_as_it_is_without_the_weights():
    plain, capped = _kuhn_trainer(), _kuhn_trainer()
    attach_mmd(plain, MmdConfig())
    regularizer = attach_mmd(capped, MmdConfig(opponent_reach=True, max_weight=1.0))
    for _ in range(3):
        plain.iterate()
        capped.iterate()
    for a, b in zip(plain.joint_policy.networks, capped.joint_policy.networks):
        for x, y in zip(a.parameters(), b.parameters()):
            assert torch.equal(x, y)
    assert regularizer.metrics()["mmd/weight_max"] == 1.0


def test_larger_weights_change_the_update():
    plain, weighted = _kuhn_trainer(), _kuhn_trainer()
    attach_mmd(plain, MmdConfig())
    regularizer = attach_mmd(weighted, MmdConfig(opponent_reach=True, max_weight=50.0))
    for _ in range(3):
        plain.iterate()
        weighted.iterate()
    differ = [
        not torch.equal(x, y)
        for a, b in zip(plain.joint_policy.networks, weighted.joint_policy.networks)
        for x, y in zip(a.parameters(), b.parameters())
    ]
    assert any(differ)
    assert regularizer.metrics()["mmd/weight_max"] > 1.0


def test_the_carry_survives_a_checkpoint_and_resumes_bit_identically():
    first = _kuhn_trainer()
    attach_mmd(first, MmdConfig(opponent_reach=True))
    for _ in range(2):
        first.iterate()
    state = first.state_dict()
    assert state["regularizer"]["reach"]["own_log_prob"].shape == (3, 2)
    second = _kuhn_trainer()
    attach_mmd(second, MmdConfig(opponent_reach=True))
    second.load_state_dict(state)
    reach_a, reach_b = first.learner.regularizer.reach, second.learner.regularizer.reach
    assert torch.equal(reach_a.own_log_prob, reach_b.own_log_prob) and torch.equal(reach_a.pending, reach_b.pending)
    rollout = first.collect_rollout()
    carried = 0 if rollout.carried is None else rollout.carried.steps
    assert torch.equal(reach_a(rollout.extended(), carried), reach_b(rollout.extended(), carried))


def test_a_rollout_of_other_env_copies_is_refused():
    trainer = _kuhn_trainer()
    reach = OpponentReach(CAP)
    reach(trainer.collect_rollout().extended(), 0)
    reach.own_log_prob = torch.zeros(5, 2, dtype=torch.float64)
    rollout = trainer.collect_rollout()
    with pytest.raises(ValueError, match=r"a rollout of 3 env copies and 2 seats after rollouts of \(5, 2\)"):
        reach(rollout.extended(), rollout.carried.steps if rollout.carried is not None else 0)


def _copy(rollout):
    """A rollout whose tensors no later collection overwrites (the collector reuses its storage)."""
    import copy

    return copy.deepcopy(rollout)


def test_each_rows_kl_carries_its_weight_in_the_term():
    from marljoint.best_response import magnet_kl
    from marljoint.ppo.losses import masked_mean

    trainer = _kuhn_trainer()
    regularizer = attach_mmd(trainer, MmdConfig(alpha=0.7, opponent_reach=True, max_weight=50.0))
    calls = []

    class Recording:
        def __getattr__(self, name):
            return getattr(regularizer, name)

        def __call__(self, batch):
            term = regularizer(batch)
            calls.append((batch, float(term.detach())))
            return term

    trainer.learner.regularizer = Recording()
    trainer.iterate()
    trainer.iterate()  # the second update has moves carried in
    batch, term = calls[-1]
    assert batch.weights is not None and bool((batch.weights[batch.valid] != 1.0).any())
    policy = batch.policy
    columns = [
        magnet_kl(out.head, None, policy.network_masks(k, batch.masks), network.action.nvec)
        for k, (network, out) in enumerate(zip(policy.networks, batch.outputs))
    ]
    rows = policy.agent_columns(columns).detach()
    weighted = masked_mean(rows * batch.weights, batch.valid)
    assert term == pytest.approx(float(regularizer.alpha * weighted.sum()), rel=1e-5)
    assert term != pytest.approx(float(regularizer.alpha * masked_mean(rows, batch.valid).sum()), rel=1e-3)
