"""Small envs and configs shared by the off-policy tests."""

from __future__ import annotations

from marljoint import PettingZooJointEnv
from marljoint.offpolicy import OffPolicyConfig, OffPolicyTrainer
from marljoint_envs import mock_v0

TINY = {
    "num_envs": 2,
    "rollout_steps": 4,
    "batch_size": 16,
    "learning_starts": 16,
    "hidden_sizes": (16,),
    "updates_per_iteration": 4,
}


def mock_env(num_envs: int = 2, seed: int = 0) -> PettingZooJointEnv:
    """Two agents, 3 actions, reward = sum of actions / 10, episodes of 5 steps."""
    return PettingZooJointEnv(lambda: mock_v0.parallel_env(num_agents=2, max_cycles=5), num_envs=num_envs, seed=seed)


def tiny_trainer(env=None, **changes) -> OffPolicyTrainer:
    env = env if env is not None else mock_env(changes.get("num_envs", 2))
    return OffPolicyTrainer(env, OffPolicyConfig(**{**TINY, **changes}))
