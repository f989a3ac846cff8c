"""MASAC and MADDPG honour action masks: they act among the legal actions, their actor losses and MASAC's entropy
read the legal actions an agent chose from, their targets sample among the next decision's legal actions, and a
mask row that allows nothing counts every action legal (finite values and gradients)."""

import numpy as np
import pytest
import torch

from marljoint import PettingZooJointEnv
from marljoint.env.base import JointObs
from marljoint.offpolicy import OffPolicyConfig, OffPolicyTrainer
from marljoint.offpolicy.sac import discrete_soft_value
from marljoint.policies.distributions import masked_log_softmax

from ._masked_moves import AGENTS, MaskedMoves, MoveLog, legal_actions, observation
from ._sac_helpers import BOX, DISCRETE, OBS, N, make_algorithm, make_batch

SETTINGS = {"num_envs": 4, "rollout_steps": 8, "batch_size": 64, "learning_starts": 64, "hidden_sizes": (32,)}


def masked_trainer(algorithm, log, **changes):
    env = PettingZooJointEnv(lambda: MaskedMoves(log), num_envs=4, seed=0)
    return OffPolicyTrainer(env, OffPolicyConfig(algorithm=algorithm, **{**SETTINGS, **changes}))


def greedy(trainer, turn, first=None):
    """The greedy action of the player to move (``turn``), player_0 having played ``first``, under its mask."""
    obs = np.tile(observation(turn, first), (1, 2, 1))
    mask = np.ones((1, 2, 3), bool)
    mask[0, turn] = legal_actions(AGENTS[turn], first).astype(bool)
    acting = np.array([[turn == 0, turn == 1]])
    return int(trainer.act(JointObs((obs,), np.ones((1, 2), bool), acting, (mask,)))[0][0, turn])


@pytest.mark.parametrize("algorithm", ["masac", "maddpg"])
def test_the_stored_moves_carry_the_legal_actions_they_were_chosen_from(algorithm):
    log = MoveLog()
    trainer = masked_trainer(algorithm, log, learning_starts=10_000)
    trainer.train(64)
    batch = trainer.algorithm.batch(trainer.buffer.gather(torch.arange(len(trainer.buffer))))
    first, second = batch["alive"][:, 0], batch["alive"][:, 1]
    assert first.any() and second.any()
    assert (batch["masks"][first, 0] == torch.tensor([True, True, False])).all()
    # player_1 may not repeat player_0's move.
    obs = batch["obs"].unflatten(1, (2, -1))  # both players' observations, concatenated: one width
    played_one = obs[second, 1, 3] == 1.0
    expected = torch.where(played_one[:, None], torch.tensor([True, False, True]), torch.tensor([False, True, True]))
    assert torch.equal(batch["masks"][second, 1], expected)


@pytest.mark.parametrize("algorithm", ["masac", "maddpg"])
def test_the_best_legal_moves_are_learned_and_the_tempting_forbidden_ones_never_played(algorithm):
    log = MoveLog()
    trainer = masked_trainer(algorithm, log)
    history = trainer.train(400)
    assert len(log.moves) >= 400 and log.illegal == []  # every move checked against the env's mask
    losses = [row[key] for row in history for key in row if key.startswith("offpolicy/") and "loss" in key]
    assert losses and np.isfinite(losses).all()
    assert greedy(trainer, 0) == 1
    assert greedy(trainer, 1, first=1) == 0
    assert greedy(trainer, 1, first=0) == 1


@pytest.mark.parametrize("variant", ["masac", "maddpg"])
def test_all_masked_rows_give_finite_losses_and_gradients(variant):
    algo = make_algorithm(DISCRETE, variant=variant)
    batch = make_batch(DISCRETE)
    batch["masks"][:4] = False
    batch["next_masks"][4:8] = False
    loss, stats = algo.loss(batch)
    loss.backward()
    assert torch.isfinite(loss) and all(np.isfinite(value) for value in stats.values())
    for net in (algo.actor, algo.critic):
        assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)
    if variant == "masac":
        assert torch.isfinite(algo.temperature.log_alpha.grad).all()


@pytest.mark.parametrize("variant", ["masac", "maddpg"])
def test_the_actor_loss_gives_an_action_illegal_in_every_row_no_gradient(variant):
    algo = make_algorithm(DISCRETE, variant=variant)
    batch = make_batch(DISCRETE)
    batch["masks"][..., 2] = False
    loss, _ = algo.loss(batch)
    loss.backward()
    weight, bias = algo.actor.head.weight.grad, algo.actor.head.bias.grad  # x @ weight[m] + bias[m]
    assert bias[:, 2].abs().max() == 0 and weight[..., 2].abs().max() == 0
    assert bias[:, [0, 1, 3, 4]].abs().max() > 0


def test_an_all_masked_soft_value_is_the_unmasked_one():
    q, logits = torch.tensor([[[1.0, 2.0, 4.0]]]), torch.tensor([[[0.5, -1.0, 2.0]]])
    none = torch.zeros(1, 1, 3, dtype=torch.bool)
    masked = discrete_soft_value(q, masked_log_softmax(logits, none), torch.tensor([0.3]), none)
    unmasked = discrete_soft_value(q, masked_log_softmax(logits, None), torch.tensor([0.3]), None)
    assert torch.isfinite(masked).all() and torch.allclose(masked, unmasked)


def test_act_refuses_masks_it_cannot_apply():
    obs = torch.zeros(2, N, OBS)
    with pytest.raises(ValueError, match="a Box action space takes no action mask; pass masks=None"):
        make_algorithm(BOX).act(obs, torch.ones(2, N, 2, dtype=torch.bool), explore=False)
    algo = make_algorithm(DISCRETE)
    with pytest.raises(TypeError, match=r"masks must be a bool tensor \(True = legal\), got torch.int64"):
        algo.act(obs, torch.ones(2, N, DISCRETE.n, dtype=torch.long), explore=False)
    with pytest.raises(
        ValueError, match=r"masks of shape \[2, 3, 4\] do not match the observations: expected \[2, 3, 5\]"
    ):
        algo.act(obs, torch.ones(2, N, 4, dtype=torch.bool), explore=False)
