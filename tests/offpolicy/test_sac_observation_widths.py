"""MASAC and MADDPG on agents whose observation widths differ: one stacked actor per width reading each agent's own
observation, critics on the unpadded concatenation, replay storage at the real widths, per-agent clipping,
save/load."""

import functools
import math

import gymnasium
import pytest
import torch

from marljoint import PettingZooJointEnv
from marljoint.env import SubprocessJointEnv
from marljoint.offpolicy import CentralisedActorCritic, OffPolicyConfig, OffPolicyTrainer, SacAlgorithm, SacConfig
from marljoint.offpolicy.sac_networks import GroupedActor
from marljoint.run import memory

from ._backends import assert_gives_the_in_process_run
from ._helpers import TINY
from ._widths import ACTIONS, WidthsEnv

WIDTHS = (3, 7, 3)  # agents 0 and 2 form one group (width 3), agent 1 another (width 7)
STATE = sum(WIDTHS)
DISCRETE = gymnasium.spaces.Discrete(ACTIONS)


def weights(trainer):
    """A copy of the algorithm's tensors (``state_dict`` gives the live ones)."""
    state = trainer.algorithm.state_dict()["sac"]
    return {key: value.clone() for key, value in state.items() if isinstance(value, torch.Tensor)}


def widths_trainer(algorithm, share=False, env_kwargs=None, **changes):
    env = PettingZooJointEnv(lambda: WidthsEnv(WIDTHS, **(env_kwargs or {})), num_envs=2, seed=0)
    return OffPolicyTrainer(
        env, OffPolicyConfig(algorithm=algorithm, share_parameters=share, seed=1, **{**TINY, **changes})
    )


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("algorithm", ["masac", "maddpg"])
def test_each_width_has_its_own_actor_and_the_critics_read_the_unpadded_state(algorithm, share):
    trainer = widths_trainer(algorithm, share)
    sac = trainer.algorithm.sac
    assert isinstance(sac.actor, GroupedActor) and sac.actor.agent_indices == ((0, 2), (1,))
    members = [1, 1] if share else [2, 1]
    ids = [2, 1] if share else [0, 0]  # a shared network's input ends with its agent's one-hot id
    first = [group.encoder.layers[0] for group in sac.actor.groups]
    assert [layer.in_features for layer in first] == [3 + ids[0], 7 + ids[1]]
    assert [layer.members for layer in first] == members
    assert trainer.algorithm.state_dim == STATE == 13
    critic_first = sac.critic.body.layers[0]
    assert critic_first.in_features == STATE + len(WIDTHS) * ACTIONS + (len(WIDTHS) if share else 0)
    if algorithm == "maddpg":
        assert isinstance(sac.target_actor, GroupedActor)


@pytest.mark.parametrize("algorithm", ["masac", "maddpg"])
def test_agents_of_different_widths_act_update_save_and_load(algorithm, tmp_path):
    trainer = widths_trainer(algorithm)
    rows = trainer.train(48)
    assert trainer.gradient_steps > 0 and math.isfinite(rows[-1]["offpolicy/total_loss"])
    storage = trainer.buffer.storage
    assert [tuple(obs.shape[1:]) for obs in storage.obs] == [(2, 3), (1, 7)]
    assert [tuple(obs.shape[1:]) for obs in storage.next_obs] == [(2, 3), (1, 7)]
    obs = PettingZooJointEnv(lambda: WidthsEnv(WIDTHS), num_envs=2, seed=5).reset()
    actions = trainer.act(obs, deterministic=False)
    assert [a.shape for a in actions] == [(2, 2), (2, 1)]
    trainer.save(tmp_path / "widths.pt")
    restored = widths_trainer(algorithm)
    restored.load(tmp_path / "widths.pt")
    saved, loaded = weights(trainer), weights(restored)
    assert saved.keys() == loaded.keys() and any(key.startswith("actor.groups.1.") for key in saved)
    assert all(torch.equal(saved[k], loaded[k]) for k in saved)
    trainer.train(64), restored.train(64)  # the resumed run continues as the uninterrupted one
    after, resumed = weights(trainer), weights(restored)
    assert all(torch.equal(after[k], resumed[k]) for k in after)
    assert not torch.equal(after["actor.groups.1.head.weight"], saved["actor.groups.1.head.weight"])


def test_no_padded_entry_reaches_the_batch():
    masked = {"masked": (False, True, False)}  # one width, two groups (the masked agent's and the others')
    trainer = widths_trainer("masac", env_kwargs=masked)
    trainer.collect(), trainer.collect()
    stored = trainer.buffer.gather(torch.arange(len(trainer.buffer)))
    batch = trainer.algorithm.batch(stored)
    for key, per_group in (("obs", stored.obs), ("next_obs", stored.next_obs)):
        state = batch[key.replace("obs", "state")]
        assert batch[key].shape == state.shape == (len(trainer.buffer), STATE)
        # Every entry is one of an agent's own observation entries (the env never observes 0), in agent order.
        assert (batch[key] != 0).all()
        assert torch.equal(batch[key][:, 0:3], per_group[0][:, 0])
        assert torch.equal(batch[key][:, 3:10], per_group[1][:, 0])
        assert torch.equal(batch[key][:, 10:13], per_group[0][:, 1])
    sac = trainer.algorithm.sac
    padded = torch.zeros(4, len(WIDTHS), 7)
    with pytest.raises(
        ValueError, match=r"obs of shape \[4, 3, 7\] do not fit agents of observation widths \[3, 7, 3\]"
    ):
        sac.act(padded, explore=False)
    with pytest.raises(TypeError, match="obs must be a torch.Tensor, got ndarray"):
        sac.act(padded.numpy(), explore=False)
    with pytest.raises(ValueError, match=r"obs of shape \[4, 1, 13\] do not fit .*: expected \['E', 13\]"):
        sac.features(torch.zeros(4, 13)[:, None])
    with pytest.raises(ValueError, match=r"batch\['obs'\] has shape \[\d+, 3, 7\]; expected \[\d+, 13\]"):
        sac.loss({**batch, "obs": torch.zeros(len(trainer.buffer), 3, 7)})


def agent_norms(stacked):
    """``[members]`` each member's gradient norm over the parameters of a stacked network."""
    return torch.stack([p.grad.flatten(1).pow(2).sum(1) for p in stacked.parameters()]).sum(0).sqrt()


def test_each_agents_actor_gradient_is_clipped_on_its_own_across_widths():
    trainer = widths_trainer("masac", max_grad_norm=1e-3)
    trainer.collect(), trainer.collect()
    loss, _ = trainer.algorithm.loss(trainer.buffer.sample(16, torch.Generator().manual_seed(0)))
    loss.backward()
    actor = trainer.algorithm.sac.actor
    before = torch.cat([agent_norms(group) for group in actor.groups])
    norm = trainer.algorithm.clip_grads(actor, 1e-3)
    assert norm == pytest.approx(float(before.max()), rel=1e-5) and norm > 1e-3
    assert all(torch.all(agent_norms(group) <= 1e-3 * 1.001) for group in actor.groups)


def test_the_memory_estimate_counts_the_real_widths():
    env = PettingZooJointEnv(lambda: WidthsEnv(WIDTHS), num_envs=1)
    config = OffPolicyConfig(algorithm="masac", num_envs=1, hidden_sizes=(16,))
    estimate = memory.estimate_offpolicy_memory(env.spec, config)
    # obs and next obs [2, 3] + [1, 7] float32 each; masks and next masks [2, 3] + [1, 3] bool each; actions [3]
    # int64, rewards [3] float32, six [3] bool flags
    assert estimate.transition == 2 * (6 + 7) * 4 + 2 * 9 + 3 * 8 + 3 * 4 + 6 * 3
    built = CentralisedActorCritic(env.spec, config, seed=0)
    parameters = sum(p.numel() for network in built.networks for p in network.parameters())
    assert estimate.networks == parameters * 4 * memory._PARAMETER_COPIES
    padded_actor = 3 * (7 * 16 + 16 + 16 * 6 + 6)  # what one actor of 3 members at width 7 would hold
    assert sum(p.numel() for p in built.sac.actor.parameters()) < padded_actor


def test_the_actor_follows_the_agents_through_the_grouped_layout():
    """Each agent's action is its own width's actor applied to its own observation, wherever its columns lie."""
    algo = SacAlgorithm(
        SacConfig(variant="maddpg"), num_agents=3, obs_dim=WIDTHS, state_dim=STATE, action_space=DISCRETE, seed=0
    )
    obs = torch.randn(5, STATE, generator=torch.Generator().manual_seed(0))
    head, features = algo.actor(obs)
    narrow, wide = algo.actor.groups
    own_narrow, _ = narrow(torch.stack([obs[:, 0:3], obs[:, 10:13]], dim=1))
    own_wide, _ = wide(obs[:, 3:10].unsqueeze(1))
    assert torch.equal(head[:, [0, 2]], own_narrow) and torch.equal(head[:, [1]], own_wide)
    assert features.shape == (5, 3, 64)


def test_actions_spaces_that_differ_across_groups_are_still_refused():
    env = PettingZooJointEnv(lambda: WidthsEnv(WIDTHS, num_actions=(3, 4, 3)), num_envs=1)
    with pytest.raises(ValueError, match="masac trains agents of one action space, but agent 'agent_1'"):
        CentralisedActorCritic(env.spec, OffPolicyConfig(algorithm="masac", num_envs=1), seed=0)


@pytest.mark.parametrize("obs_dim", [(3, 7), (3, 0, 7), 0, (3, 7.5, 3)])
def test_observation_widths_must_be_positive_and_one_per_agent(obs_dim):
    with pytest.raises(ValueError, match=r"obs_dim=.* must be a positive int \(every agent's width\) or 3"):
        SacAlgorithm(SacConfig(), num_agents=3, obs_dim=obs_dim, state_dim=STATE, action_space=DISCRETE)


def test_subprocess_workers_act_on_the_unpadded_observations_as_this_process_does():
    assert_gives_the_in_process_run(
        "masac",
        lambda env_fn, num_envs, seed: SubprocessJointEnv(env_fn, num_envs, num_workers=2, seed=seed),
        env_fn=functools.partial(WidthsEnv, WIDTHS),
    )
