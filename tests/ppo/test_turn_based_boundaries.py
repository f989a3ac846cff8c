"""Turn-based games across rollout boundaries: a move whose outcome lies in the next rollout is carried there, so
its target equals that of an unbounded rollout and no reward is lost."""

import numpy as np
import pytest
import torch
from rollout_checks import assert_same_parameters

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.collect.rollout import carry_pending_moves
from marljoint_envs import counter_v0, kuhn_poker_v0, mock_v0

NUM_ENVS = 16


def _kuhn(rollout_steps, **cfg):
    config = JointTrainerConfig(
        **{
            "num_envs": NUM_ENVS,
            "rollout_steps": rollout_steps,
            "minibatch_size": 64,
            "n_epochs": 1,
            "gamma": 1.0,
            "gae_lambda": 1.0,
            "share_parameters": False,
            **cfg,
        }
    )
    env = PettingZooJointEnv(kuhn_poker_v0.env, num_envs=NUM_ENVS, seed=config.seed)
    return JointMultiAgentTrainer.from_env(env, config)


def _complete_targets(trainer, rollouts):
    """``{(global step, copy, agent): target}`` of every move trained in ``rollouts`` whose episode ended within
    the rollout it was trained with, and the keys of those that were carried there across a boundary.

    Carried rows are mapped back to the step they were taken at; λ = γ = 1 makes each complete move's target the
    sum of the rewards its agent received until the end of its episode, whatever the critic says.
    """
    targets, carried_moves, origin = {}, set(), {}
    steps = trainer.config.rollout_steps
    for k in range(rollouts):
        rollout = trainer.collect_rollout()
        x = rollout.extended()
        _, returns = trainer.compute_advantages(rollout)
        offset = x.steps - rollout.steps  # carried rows come first
        step_of = {}
        for r in range(x.steps):
            for e in range(NUM_ENVS):
                for i in range(2):
                    # carried row r holds agent r's move
                    step_of[r, e, i] = origin.get((e, r)) if r < offset else k * steps + r - offset
        ended_later = (x.terminated | x.truncated).flip(0).cumsum(0).flip(0) > 0  # an end at this row or later
        for r, e, i in x.trainable.nonzero().tolist():
            if ended_later[r, e, i]:
                targets[step_of[r, e, i], e, i] = float(returns[r, e, i])
                if r < offset:
                    carried_moves.add((step_of[r, e, i], e, i))
        if x.deferred is not None:
            for r, e, i in x.deferred.nonzero().tolist():
                origin[e, i] = step_of[r, e, i]
    return targets, carried_moves


def test_moves_straddling_a_boundary_get_the_targets_of_an_unbounded_rollout():
    short, long_ = _kuhn(rollout_steps=3), _kuhn(rollout_steps=3 * 8)
    bounded, carried_moves = _complete_targets(short, 8)
    unbounded, none_carried = _complete_targets(long_, 1)
    assert not none_carried
    assert len(carried_moves) > 20  # most Kuhn episodes cross a 3-step boundary in one of the 16 copies
    # Moves that end their rollout on their own agent's turn are bootstrapped from that (trained) state's value:
    # complete in the unbounded rollout only. Every move complete in the short rollouts is complete there too.
    assert set(bounded) <= set(unbounded)
    for key, target in bounded.items():
        assert target == unbounded[key], key


def test_every_reward_is_credited_to_exactly_one_move():
    # γ = 1, λ = 0 and a critic that outputs 0: each move's return is exactly the reward credited to it.
    trainer = _kuhn(rollout_steps=5, gae_lambda=0.0, value_normalization=False)
    for policy in trainer.policies:
        with torch.no_grad():
            policy.value_head.weight.zero_()
            policy.value_head.bias.zero_()
    received = torch.zeros(2)
    credited = torch.zeros(2)
    for _ in range(20):
        rollout = trainer.collect_rollout()
        received += rollout.rewards.sum((0, 1))
        _, returns = trainer.compute_advantages(rollout)
        credited += (returns * rollout.extended().trainable).sum((0, 1))
    assert (received != 0).all()  # per agent: the game is zero-sum
    pending = trainer.pending_moves
    still_pending = torch.zeros(2) if pending is None else pending.rewards.sum((0, 1))
    assert torch.equal(credited + still_pending, received)


def test_a_resumed_turn_based_run_carries_its_pending_moves_bit_identically():
    whole = _kuhn(rollout_steps=3)
    first = _kuhn(rollout_steps=3)
    for _ in range(4):
        whole.update(whole.collect_rollout())
    for _ in range(2):
        first.update(first.collect_rollout())
    assert first.pending_moves is not None  # the checkpoint holds moves carried into the next rollout
    resumed = _kuhn(rollout_steps=3)
    resumed.load_state_dict(first.state_dict())
    resumed.load_env_state(first.env_state())
    for _ in range(2):
        resumed.update(resumed.collect_rollout())
    assert_same_parameters(whole, resumed)


def test_simultaneous_move_envs_never_defer_a_move():
    config = JointTrainerConfig(num_envs=2, rollout_steps=8, minibatch_size=16, n_epochs=1)
    trainer = JointMultiAgentTrainer.from_env(PettingZooJointEnv(mock_v0.parallel_env, num_envs=2), config)
    for _ in range(3):
        rollout = trainer.collect_rollout()
        assert rollout.carried is None and rollout.deferred is None
        assert rollout.extended() is rollout


def test_carry_pending_moves_needs_the_next_state_flags():
    trainer = _kuhn(rollout_steps=3)
    rollout = trainer.collect_rollout()
    rollout.next_alive = None
    assert carry_pending_moves(rollout) == (None, None)


@pytest.mark.parametrize("cfg", [{}, {"centralized_critic": True}], ids=["local", "centralised"])
def test_carried_moves_are_trained_with_the_next_update(cfg):
    trainer = _kuhn(rollout_steps=3, **cfg)
    trainer.update(trainer.collect_rollout())
    rollout = trainer.collect_rollout()
    assert rollout.carried is not None
    x = rollout.extended()
    assert x.steps == rollout.steps + 2
    # Each carried row holds one agent's move, and only that agent acts on it.
    assert (x.acting[:2].sum(-1) <= 1).all()
    assert x.trainable[:2].any()
    stats = trainer.update(rollout)
    assert all(torch.isfinite(torch.tensor(stats.value_loss)))


def test_aux_losses_see_every_present_agent_in_turn_based_games():
    from marljoint.redundancy import RedundancyPenalty

    seen = []
    penalty = RedundancyPenalty(kind="xcorr", coef=1.0)

    def recording(features, alive):
        seen.append(alive.clone())
        return penalty(features, alive)

    for active in (None, [True, False]):  # all agents trained, and a frozen seat as in PSRO / NFSP
        trainer = _kuhn(rollout_steps=16)
        # One stacked network per seat: member 0 of every parameter is player 0's.
        before = [p.detach().clone() for p in trainer.policies[0].parameters()]
        rollout = trainer.collect_rollout()
        seen.clear()
        stats = trainer.update(rollout, aux_fn=recording, active=active)
        # One mover per row, yet both players are present on most rows: the pairwise term is not empty.
        assert any(bool((mask.sum(-1) == 2).any()) for mask in seen)
        assert stats.aux_loss > 0
        after = list(trainer.policies[0].parameters())
        if active:
            assert all(torch.equal(a[1], b[1]) for a, b in zip(before, after))  # the frozen seat
            assert not all(torch.equal(a[0], b[0]) for a, b in zip(before, after))  # the other seat trained


def _turns_of_counter(truncate_at=3):
    """counter_v0 played in turns (PettingZoo's parallel_to_aec): each round both agents move, then the env
    steps; the round that hits the time limit truncates both, with agent_0 to move next and agent_1 waiting."""
    from pettingzoo.utils.conversions import parallel_to_aec

    return parallel_to_aec(counter_v0.parallel_env(num_agents=2, truncate_at=truncate_at))


def test_the_adapter_reports_who_ends_waiting_for_another_agents_move():
    env = PettingZooJointEnv(_turns_of_counter, num_envs=1, seed=0)
    env.reset(seed=0)
    cut = None
    for _ in range(6):
        step = env.step([np.zeros((1, 2), np.int64)])
        if step.truncated.any():
            cut = (step.truncated.copy(), step.final_waiting.copy())
            break
    assert cut is not None
    truncated, waiting = cut
    assert truncated.tolist() == [[True, True]]
    assert waiting.tolist() == [[False, True]]  # agent_0 would move next
    parallel = PettingZooJointEnv(mock_v0.parallel_env, num_envs=1, seed=0)
    parallel.reset(seed=0)
    assert parallel.step([np.zeros((1, 2), np.int64)]).final_waiting is None


@pytest.mark.parametrize("bootstrap_truncation", [True, False])
def test_a_move_cut_off_while_its_agent_waits_is_not_bootstrapped_from_an_untrained_value(bootstrap_truncation):
    config = JointTrainerConfig(
        num_envs=2, rollout_steps=24, minibatch_size=16, n_epochs=1, bootstrap_truncation=bootstrap_truncation
    )
    trainer = JointMultiAgentTrainer.from_env(PettingZooJointEnv(_turns_of_counter, num_envs=2, seed=0), config)
    rollout = trainer.collect_rollout()
    x = rollout.extended()
    cut_rows = x.truncated_waiting.nonzero().tolist()
    assert cut_rows and all(i == 1 for _, _, i in cut_rows)  # agent_1 is cut off waiting, agent_0 is not
    deferred = x.deferred if x.deferred is not None else torch.zeros_like(x.valid)
    for t, e, _ in cut_rows:
        # agent_1's last move of that episode: the row before the cut (it moved, then agent_0 ended the round).
        last = max(r for r in range(t + 1) if x.valid[r, e, 1])
        assert bool(deferred[last, e, 1]) == bootstrap_truncation
        assert bool(x.trainable[last, e, 1]) != bootstrap_truncation
    # agent_0 moves in its final state: its last moves are bootstrapped from V(final obs) and trained.
    assert not deferred[..., 0].any()
    trainer.update(rollout)

