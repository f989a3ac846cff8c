"""Bad settings, spaces and batches are refused with errors that name the field, the value and the fix."""

import gymnasium
import pytest
import torch

from marljoint.offpolicy.sac import SacAlgorithm, SacConfig

from ._sac_helpers import BOX, DISCRETE, OBS, STATE, N, make_algorithm, make_batch


@pytest.mark.parametrize(
    ("settings", "error", "match"),
    [
        ({"variant": "td3"}, ValueError, r"variant='td3' is not supported; use one of \('masac', 'maddpg'\)"),
        ({"gamma": 1.5}, ValueError, r"gamma=1.5 must lie in \[0.0, 1.0\]; a discount factor"),
        ({"gamma": "0.9"}, TypeError, "gamma must be a float, got str"),
        ({"tau": 0.0}, ValueError, r"tau=0.0 must lie in \(0.0, 1.0\]; a Polyak coefficient"),
        ({"actor_lr": -1e-3}, ValueError, r"actor_lr=-0.001 must lie in \(0.0, inf\]; a learning rate"),
        ({"critic_lr": float("nan")}, ValueError, "critic_lr=nan must lie in"),
        ({"alpha_lr": True}, TypeError, "alpha_lr must be a float, got bool"),
        ({"init_alpha": 0}, ValueError, r"init_alpha=0 must lie in \(0.0, inf\]; a temperature such as 0.2"),
        ({"target_entropy": float("inf")}, ValueError, "target_entropy=inf must lie in"),
        ({"target_entropy_fraction": 1.2}, ValueError, r"target_entropy_fraction=1.2 must lie in \[0.0, 1.0\]"),
        ({"exploration_noise": -0.1}, ValueError, "exploration_noise=-0.1 must lie in"),
        ({"gumbel_temperature": 0.0}, ValueError, "gumbel_temperature=0.0 must lie in"),
        ({"hidden_sizes": (64, 0)}, ValueError, r"hidden_sizes=\(64, 0\) must be a non-empty tuple of positive"),
        ({"critic_hidden_sizes": []}, ValueError, r"critic_hidden_sizes=\[\] must be a non-empty tuple"),
        ({"actor_update_interval": 0}, ValueError, "actor_update_interval=0 must be a positive int"),
        ({"autotune_alpha": 1}, TypeError, "autotune_alpha must be a bool, got int"),
        ({"share_parameters": "yes"}, TypeError, "share_parameters must be a bool, got str"),
    ],
)
def test_bad_settings_are_refused(settings, error, match):
    with pytest.raises(error, match=match):
        SacConfig(**settings)


def _build(space=BOX, config=None, **sizes):
    shape = {"num_agents": N, "obs_dim": OBS, "state_dim": STATE, **sizes}
    return SacAlgorithm(SacConfig() if config is None else config, action_space=space, **shape)


def test_bad_algorithm_arguments_are_refused():
    with pytest.raises(TypeError, match="config must be a SacConfig, got dict"):
        _build(config={})
    with pytest.raises(ValueError, match="num_agents=0 must be a positive int"):
        _build(num_agents=0)
    with pytest.raises(ValueError, match="state_dim=2.0 must be a positive int"):
        _build(state_dim=2.0)
    with pytest.raises(TypeError, match="must be a gymnasium Discrete or Box space, got MultiDiscrete"):
        _build(gymnasium.spaces.MultiDiscrete([2, 3]))
    with pytest.raises(ValueError, match="must be a one-dimensional Box with finite bounds"):
        _build(gymnasium.spaces.Box(-float("inf"), 1.0, (2,)))
    with pytest.raises(ValueError, match="must be a one-dimensional Box with finite bounds"):
        _build(gymnasium.spaces.Box(-1.0, 1.0, (2, 2)))


def test_bad_batches_are_refused():
    algo = make_algorithm(DISCRETE)
    batch = make_batch(DISCRETE)
    with pytest.raises(ValueError, match=r"the batch lacks \['next_alive'\]"):
        algo.loss({k: v for k, v in batch.items() if k != "next_alive"})
    with pytest.raises(ValueError, match=r"batch\['rewards'\] has shape \[16\]; expected \[16, 3\]"):
        algo.loss({**batch, "rewards": torch.zeros(16)})
    with pytest.raises(ValueError, match=r"batch\['terminated'\] has shape \[16, 2\]; expected \[16\] or \[16, 3\]"):
        algo.loss({**batch, "terminated": torch.zeros(16, 2, dtype=torch.bool)})
    with pytest.raises(ValueError, match=r"batch\['next_masks'\] has shape \[16, 3, 4\]; expected \[16, 3, 5\]"):
        algo.loss({**batch, "next_masks": torch.ones(16, 3, 4, dtype=torch.bool)})
    with pytest.raises(TypeError, match=r"batch\['state'\] must be a torch.Tensor, got ndarray"):
        algo.loss({**batch, "state": batch["state"].numpy()})
    box = make_algorithm(BOX)
    with pytest.raises(ValueError, match=r"batch\['actions'\] has shape \[16, 3\]; expected \[16, 3, 2\]"):
        box.loss({**make_batch(BOX), "actions": torch.zeros(16, 3)})
