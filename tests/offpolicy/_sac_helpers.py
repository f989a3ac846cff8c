"""Random batches in the layout SacAlgorithm reads, and small algorithms to read them."""

import gymnasium
import torch

from marljoint.offpolicy.sac import SacAlgorithm, SacConfig

N, OBS, BATCH = 3, 4, 16
STATE = N * OBS
ACTIONS = 5
BOX = gymnasium.spaces.Box(-2.0, 3.0, (2,))
DISCRETE = gymnasium.spaces.Discrete(ACTIONS)


def make_algorithm(space, **settings):
    config = SacConfig(hidden_sizes=(16,), critic_hidden_sizes=(16,), **settings)
    return SacAlgorithm(config, num_agents=N, obs_dim=OBS, state_dim=STATE, action_space=space, seed=3)


def make_batch(space, seed=0, batch=BATCH):
    g = torch.Generator().manual_seed(seed)
    obs, next_obs = torch.randn(batch, N, OBS, generator=g), torch.randn(batch, N, OBS, generator=g)
    out = {
        "obs": obs,
        "state": obs.flatten(1),
        "rewards": torch.randn(batch, N, generator=g),
        "next_obs": next_obs,
        "next_state": next_obs.flatten(1),
        "terminated": torch.rand(batch, generator=g) < 0.3,
        "truncated": torch.zeros(batch, dtype=torch.bool),
        "alive": torch.ones(batch, N, dtype=torch.bool),
        "next_alive": torch.ones(batch, N, dtype=torch.bool),
    }
    if isinstance(space, gymnasium.spaces.Discrete):
        masks = torch.rand(batch, N, space.n, generator=g) < 0.7
        masks[..., 0] = True  # at least one legal action
        out["masks"], out["next_masks"] = masks, torch.roll(masks, 1, 0)
        out["actions"] = torch.zeros(batch, N, dtype=torch.long)
    else:
        low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
        out["actions"] = low + (high - low) * torch.rand(batch, N, space.shape[0], generator=g)
    return out
