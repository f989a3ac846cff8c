"""MMD's ``opponent_reach`` row weights: the seat's own reach of the row's information state over the number of
its rows observing that state, carried across rollouts and deferred moves, applied to the surrogate and the KL,
and part of the checkpoint."""

from __future__ import annotations

import copy
import csv
import math
import sys
from pathlib import Path

import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.best_response import MmdConfig, magnet_kl, mmd_regularizer
from marljoint.best_response.mmd import OpponentReach
from marljoint.ppo.losses import masked_mean
from marljoint.run.train import read_config_file
from marljoint_envs import kuhn_poker_v0

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "product"))
from _product_helpers import run_cli  # noqa: E402

CAP = 1.5


def _leduc():
    from marljoint.run.recipes import env_factory

    return env_factory("openspiel:leduc_poker", {})()


def _trainer(seed=0, game=kuhn_poker_v0.raw_env, mmd=None, **changes):
    env = PettingZooJointEnv(game, num_envs=3, seed=seed)
    settings = dict(num_envs=3, rollout_steps=3, num_minibatches=2, n_epochs=2, hidden_sizes=(8,), gamma=1.0)
    config = JointTrainerConfig(**{**settings, **changes})
    return JointMultiAgentTrainer.from_env(env, config, regularizer=None if mmd is None else mmd_regularizer(mmd))


def _by_episode(rollouts):
    """The expected weights, computed episode by episode from the rows in the order they were played.

    Each rollout's own rows (after its carried ones) continue the stream of the one before; a carried row is the
    move deferred at the end of the previous rollout, and keeps the own reach that move had when it was made. A
    row weighs (the seat's own probability of its earlier moves in the episode) / (how many of the seat's trained
    rows of the update observe the same), divided by the seat's mean and capped.
    """
    expected = []
    envs, seats = rollouts[0].log_probs.shape[1:]
    histories = [[] for _ in range(envs)]  # per env copy: the (seat, log-prob) moves of the running episode
    deferred_reach = {}
    for rollout in rollouts:
        carried = 0 if rollout.carried is None else rollout.carried.steps
        full = rollout.extended()
        reach = torch.ones(full.steps, envs, seats, dtype=torch.float64)
        for (e, j), value in deferred_reach.items():
            reach[j, e, j] = value
        for t in range(carried, full.steps):
            for e in range(envs):
                for i in range(seats):
                    reach[t, e, i] = math.exp(sum(lp for seat, lp in histories[e] if seat == i))
                for i in range(seats):
                    if full.valid[t, e, i]:
                        histories[e].append((i, float(full.log_probs[t, e, i])))
                if bool((full.terminated[t, e] | full.truncated[t, e]).any()):
                    histories[e] = []
        deferred_reach = {}
        if full.deferred is not None:
            for t, e, j in full.deferred.nonzero().tolist():
                deferred_reach[(e, j)] = float(reach[t, e, j])
        trained = full.trainable
        weights = torch.ones(full.steps, envs, seats, dtype=torch.float64)
        for i in range(seats):
            rows = [(t, e) for t in range(full.steps) for e in range(envs) if trained[t, e, i]]
            observed = [tuple(full.obs[0][t, e, i].flatten().tolist()) for t, e in rows]
            raw = [float(reach[t, e, i]) / observed.count(obs) for (t, e), obs in zip(rows, observed)]
            mean = sum(raw) / len(raw)
            for (t, e), value in zip(rows, raw):
                weights[t, e, i] = min(CAP, value / mean)
        expected.append((weights, trained))
    return expected


@pytest.mark.parametrize("game", [kuhn_poker_v0.raw_env, _leduc], ids=["kuhn", "leduc"])
def test_a_row_weighs_its_own_reach_over_the_visits_of_its_information_state(game):
    # Leduc poker: a seat moves several times per episode, so moves deferred across rollouts carry an own reach < 1.
    trainer = _trainer(game=game)
    reach = OpponentReach(CAP)
    rollouts, got = [], []
    for _ in range(6):
        rollout = trainer.collect_rollout()
        rollouts.append(_copy(rollout))
        carried = 0 if rollout.carried is None else rollout.carried.steps
        got.append(reach(rollout.extended(), carried))
    assert any(r.carried is not None for r in rollouts)  # moves were carried across rollouts
    capped = varied = False
    for weights, (expected, trained) in zip(got, _by_episode(rollouts)):
        assert torch.allclose(weights[trained].double(), expected[trained], rtol=1e-6)
        assert torch.equal(weights[~trained], torch.ones_like(weights[~trained]))
        capped |= bool((expected[trained] == CAP).any())
        varied |= bool((expected[trained] < expected[trained].max()).any())
    assert varied and capped  # the weights differ between rows, and the cap binds on some


def test_weights_of_one_leave_the_update_as_it_is_without_them(monkeypatch):
    plain, ones = _trainer(mmd=MmdConfig()), _trainer(mmd=MmdConfig(opponent_reach=True))
    regularizer = ones.regularizer
    monkeypatch.setattr(OpponentReach, "__call__", lambda self, rollout, carried: torch.ones(rollout.log_probs.shape))
    for _ in range(3):
        plain.iterate()
        ones.iterate()
    for a, b in zip(plain.joint_policy.networks, ones.joint_policy.networks):
        for x, y in zip(a.parameters(), b.parameters()):
            assert torch.equal(x, y)
    assert regularizer.metrics()["mmd/weight_max"] == 1.0


def test_larger_weights_change_the_update():
    plain, weighted = _trainer(mmd=MmdConfig()), _trainer(mmd=MmdConfig(opponent_reach=True))
    regularizer = weighted.regularizer
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
    first = _trainer(mmd=MmdConfig(opponent_reach=True))
    for _ in range(2):
        first.iterate()
    state = first.state_dict()
    assert state["regularizer"]["reach"]["own_log_prob"].shape == (3, 2)
    second = _trainer(mmd=MmdConfig(opponent_reach=True))
    second.load_state_dict(state)
    reach_a, reach_b = first.regularizer.reach, second.regularizer.reach
    assert torch.equal(reach_a.own_log_prob, reach_b.own_log_prob) and torch.equal(reach_a.pending, reach_b.pending)
    rollout = first.collect_rollout()
    carried = 0 if rollout.carried is None else rollout.carried.steps
    assert torch.equal(reach_a(rollout.extended(), carried), reach_b(rollout.extended(), carried))


def test_a_rollout_of_other_env_copies_is_refused():
    trainer = _trainer()
    reach = OpponentReach(CAP)
    reach(trainer.collect_rollout().extended(), 0)
    reach.own_log_prob = torch.zeros(5, 2, dtype=torch.float64)
    rollout = trainer.collect_rollout()
    with pytest.raises(ValueError, match=r"a rollout of 3 env copies and 2 seats after rollouts of \(5, 2\)"):
        reach(rollout.extended(), rollout.carried.steps if rollout.carried is not None else 0)


def _copy(rollout):
    """A rollout whose tensors no later collection overwrites (the collector reuses its storage)."""
    return copy.deepcopy(rollout)


def test_each_rows_kl_carries_its_weight_in_the_term():
    trainer = _trainer(mmd=MmdConfig(alpha=0.7, opponent_reach=True))
    regularizer = trainer.regularizer
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


def test_marljoint_train_logs_the_largest_weight_and_keeps_the_settings(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--env", "kuhn_poker_v0", "--self-play", "mmd", "--num-envs", "64", "--total-steps", "1024"]
    settings = "mmd={opponent_reach = true, max_weight = 4.0}"
    assert run_cli([*args, "--set", settings, "--out", str(out), "--quiet"]) == 0
    config = read_config_file(out / "config.toml")
    assert config["mmd"]["opponent_reach"] is True and config["mmd"]["max_weight"] == 4.0
    with (out / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert all(1.0 <= float(row["mmd/weight_max"]) <= 4.0 for row in rows)
    documented = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    assert "| `mmd/weight_max` |" in documented


def _turns_with_truncation():
    """A turn-based counter whose episodes are truncated while one seat waits for the other's move."""
    from pettingzoo.utils.conversions import parallel_to_aec

    from marljoint_envs import counter_v0

    return parallel_to_aec(counter_v0.parallel_env(num_agents=2, truncate_at=2))


def test_a_seat_with_an_orphaned_and_a_pending_move_carries_the_pending_moves_own_reach():
    # An episode truncated while a seat waits orphans its last move; when the seat's next episode then leaves a move
    # pending at the rollout's end, both are deferred in one rollout, and only the pending one is carried.
    trainer = _trainer(game=_turns_with_truncation, rollout_steps=5)
    trainer.update(trainer.collect_rollout())  # the policy moves away from uniform: reaches differ from move to move
    reach = OpponentReach(CAP)
    rollouts, got, both = [], [], 0
    for _ in range(6):
        rollout = trainer.collect_rollout()
        rollouts.append(_copy(rollout))
        carried = 0 if rollout.carried is None else rollout.carried.steps
        got.append(reach(rollout.extended(), carried))
        deferred = rollout.extended().deferred
        if deferred is not None:
            both += int((deferred.sum(0) > 1).sum())
    assert both > 0  # some seat had an orphaned and a pending move in one rollout
    for weights, (expected, trained) in zip(got, _by_episode(rollouts)):
        assert torch.allclose(weights[trained].double(), expected[trained], rtol=1e-6)
