"""MASAC and MADDPG through the off-policy trainer: Box actions stored as floats, the redundancy penalty reaching
every agent's actor encoder in one backward, per-agent clipping and refused spaces (workers giving the in-process
run bit for bit: test_offpolicy_collectors.py)."""

import functools

import pytest
import torch

from marljoint import PettingZooJointEnv
from marljoint.offpolicy import CentralisedActorCritic, OffPolicyConfig, OffPolicyTrainer
from marljoint.redundancy import RedundancyPenalty
from marljoint_envs import bucket_brigade_v0, identity_v0

from ._helpers import TINY, mock_env

BOX = functools.partial(identity_v0.parallel_env, action_type="box", box_dim=3)


def sac_trainer(env, algorithm="masac", **changes):
    config = OffPolicyConfig(algorithm=algorithm, **{**TINY, "share_parameters": False, **changes})
    return OffPolicyTrainer(env, config)


@pytest.mark.parametrize("algorithm", ["masac", "maddpg"])
def test_box_actions_are_stored_as_floats_within_the_bounds(algorithm):
    trainer = sac_trainer(PettingZooJointEnv(BOX, num_envs=2, seed=0), algorithm)
    trainer.train(48)
    actions = trainer.buffer.storage.actions[: len(trainer.buffer)]
    assert actions.dtype == torch.float32 and actions.shape[1:] == (2, 3)
    assert actions.abs().max() <= 1.0 and actions.std() > 0
    assert isinstance(trainer.algorithm, CentralisedActorCritic) and trainer.gradient_steps > 0


@pytest.mark.parametrize("env_name", ["box", "discrete"])
@pytest.mark.parametrize("kind", ["xcorr", "cka"])
def test_the_penalty_gradient_reaches_every_agents_encoder_through_the_trainer(env_name, kind):
    env = PettingZooJointEnv(BOX, num_envs=2, seed=0) if env_name == "box" else mock_env(2)
    trainer = sac_trainer(env)
    trainer.collect(), trainer.collect()
    penalty = RedundancyPenalty(kind=kind, coef=1.0)
    seen = []

    def aux_fn(features, alive):
        out = penalty(features, alive)
        seen.append(out.loss)
        return out

    batch = trainer.buffer.sample(16, torch.Generator().manual_seed(0))
    loss, stats = trainer.algorithm.loss(batch, aux_fn)
    encoder = next(trainer.algorithm.sac.actor.encoder.parameters())  # [members = one per agent, ...]
    (from_penalty,) = torch.autograd.grad(seen[0], encoder, retain_graph=True)
    assert all(from_penalty[agent].abs().sum() > 0 for agent in range(2))
    loss.backward()  # the one backward of the joint loss
    assert all(encoder.grad[agent].abs().sum() > 0 for agent in range(2))
    assert stats["aux_loss"] == pytest.approx(float(seen[0].detach()))
    assert f"redundancy/{kind}" in stats["aux_metrics"]


def test_training_with_the_penalty_logs_it():
    trainer = sac_trainer(PettingZooJointEnv(BOX, num_envs=2, seed=0))
    rows = trainer.train(48, aux_fn=RedundancyPenalty(kind="xcorr", coef=0.1))
    assert rows[-1]["offpolicy/aux_loss"] != 0.0 and "redundancy/xcorr" in rows[-1]


def test_each_agents_gradient_is_clipped_on_its_own():
    trainer = sac_trainer(PettingZooJointEnv(BOX, num_envs=2, seed=0), max_grad_norm=1e-3)
    trainer.collect(), trainer.collect()
    batch = trainer.buffer.sample(16, torch.Generator().manual_seed(0))
    loss, _ = trainer.algorithm.loss(batch)
    loss.backward()
    critic = trainer.algorithm.sac.critic
    norm = trainer.algorithm.clip_grads(critic, 1e-3)
    assert norm > 1e-3
    per_agent = torch.stack([p.grad.flatten(1).pow(2).sum(1) for p in critic.parameters()]).sum(0).sqrt()
    assert torch.all(per_agent <= 1e-3 * 1.001)


def test_a_multidiscrete_env_is_refused():
    env = PettingZooJointEnv(functools.partial(bucket_brigade_v0.parallel_env, scenario="easy"), num_envs=2)
    with pytest.raises(ValueError, match="masac"):
        sac_trainer(env)


def test_sac_settings_belong_to_masac_and_maddpg():
    with pytest.raises(ValueError, match="sac settings apply to masac and maddpg, not vdn"):
        OffPolicyConfig(algorithm="vdn", sac={"tau": 0.1})
    with pytest.raises(ValueError, match=r"^sac.taus=0.1 is not a MASAC or MADDPG setting; valid keys: tau, "):
        OffPolicyConfig(algorithm="masac", sac={"taus": 0.1})
    assert OffPolicyConfig(algorithm="maddpg", sac={"tau": 0.1}).to_dict()["sac"] == {"tau": 0.1}
