"""MASAC and MADDPG on envs whose agents share one observation width train exactly as they did when every agent's
observation was zero-padded to the largest: the values below were recorded with that code (one group, or several
groups of one width, stacked and shared), and its checkpoints' layout is the one written now."""

import pytest
import torch

from marljoint import PettingZooJointEnv
from marljoint.offpolicy import OffPolicyConfig, OffPolicyTrainer
from marljoint_envs import mock_v0

from ._widths import WidthsEnv

TINY = {
    "num_envs": 2,
    "rollout_steps": 4,
    "batch_size": 16,
    "learning_starts": 16,
    "hidden_sizes": (16,),
    "updates_per_iteration": 4,
}


def _spread(**kwargs):
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(max_cycles=10, **kwargs)


ENVS = {
    "mock": lambda: mock_v0.parallel_env(num_agents=2, max_cycles=5),
    "spread": _spread,
    "spread_box": lambda: _spread(continuous_actions=True),
    "equal_widths": lambda: WidthsEnv((4, 4, 4), (False, True, False)),  # groups (0, 2) and (1,), one width
}

# (algorithm, env, share_parameters): (Σ|θ|, Σ θ_k sin k, the last critic loss, the last actor loss) after 48 env
# steps (20 gradient steps), θ every float tensor of the algorithm's state in order.
RECORDED = {
    ("masac", "mock", False): (5845.854247584781, -6.486631028298767, 0.053991012275218964, -0.8169401288032532),
    ("maddpg", "mock", True): (1512.7309204863159, -1.4810908979014825, 0.1105584055185318, -2.135639190673828),
    ("masac", "spread", True): (5002.236752867774, -21.479648543937405, 4.196375370025635, 0.46064338088035583),
    ("maddpg", "spread_box", False): (7585.19090302867, -36.17860770522323, 1.0359190702438354, 1.4315382242202759),
    ("masac", "spread_box", True): (4906.147450642791, -73.312151547098, 13.665510177612305, 4.2250518798828125),
    ("masac", "equal_widths", True): (3294.826896971295, 3.388073768784931, 2.16310977935791, -0.5385435819625854),
    ("maddpg", "equal_widths", False): (4776.211572538543, -10.930642875274692, 1.0663106441497803, -1.683300256729126),
}

CRITIC = ("critic.body.layers.0", "critic.body.layers.1", "critic.head")
LAYERS = [f"{layer}.{part}" for layer in CRITIC for part in ("weight", "bias")]
ACTOR = ["actor.encoder.layers.0.weight", "actor.encoder.layers.0.bias", "actor.head.weight", "actor.head.bias"]
SAVED_KEYS = {
    "masac": ACTOR + LAYERS + ["target_" + key for key in LAYERS] + ["temperature.log_alpha"],
    "maddpg": ACTOR + LAYERS + ["target_" + key for key in LAYERS] + ["target_" + key for key in ACTOR],
}
"""The keys of the algorithm's state on one observation width, as checkpoints written before held them."""


def _trainer(algorithm, env_name, share):
    if env_name.startswith("spread"):
        pytest.importorskip("mpe2")
    env = PettingZooJointEnv(ENVS[env_name], num_envs=2, seed=3)
    return OffPolicyTrainer(env, OffPolicyConfig(algorithm=algorithm, share_parameters=share, seed=5, **TINY))


@pytest.mark.parametrize(("algorithm", "env_name", "share"), list(RECORDED))
def test_one_observation_width_trains_as_before(algorithm, env_name, share):
    trainer = _trainer(algorithm, env_name, share)
    last = trainer.train(48)[-1]
    state = trainer.algorithm.state_dict()["sac"]
    tensors = [t for t in state.values() if isinstance(t, torch.Tensor) and t.is_floating_point()]
    flat = torch.cat([t.detach().double().flatten() for t in tensors])
    weighted = float((flat * torch.sin(torch.arange(len(flat), dtype=torch.float64))).sum())
    measured = (float(flat.abs().sum()), weighted, last["offpolicy/critic_loss"], last["offpolicy/actor_loss"])
    # Bit for bit on the machine that recorded them; to float rounding on other CPUs and torch builds.
    assert trainer.gradient_steps == 20
    assert measured == pytest.approx(RECORDED[algorithm, env_name, share], rel=1e-4, abs=1e-4)


@pytest.mark.parametrize(("algorithm", "share"), [("masac", False), ("maddpg", True)])
def test_one_observation_width_keeps_the_checkpoint_layout(algorithm, share):
    trainer = _trainer(algorithm, "mock", share)
    state = trainer.algorithm.state_dict()["sac"]
    assert [key for key, value in state.items() if isinstance(value, torch.Tensor)] == SAVED_KEYS[algorithm]
    members = 1 if share else 2
    assert tuple(state["actor.encoder.layers.0.weight"].shape) == (members, 4 + (2 if share else 0), 16)
