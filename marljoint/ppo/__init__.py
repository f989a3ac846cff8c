"""Joint multi-agent PPO: config, rollout storage, GAE, losses, the learner (the one-backward update) and the trainer
(the loop)."""

from marljoint.auxiliary import AuxFn, AuxOutput, features_only
from marljoint.collect.rollout import JointRollout
from marljoint.policies.normalizer import RunningNormalizer
from marljoint.ppo.config import JointTrainerConfig, NetworkConfig, OptimConfig, PpoConfig, RuntimeConfig
from marljoint.ppo.derived import (
    anneal_for_agents,
    derive_replay,
    derive_settings,
    derive_threads,
    gamma_for_episodes,
)
from marljoint.ppo.divergence import DivergenceError
from marljoint.ppo.gae import compute_gae
from marljoint.ppo.learner import Learner, NetworkUnit
from marljoint.ppo.losses import (
    PolicyLossTerms,
    explained_variance,
    masked_mean,
    masked_moments,
    normalize_advantages,
    policy_loss,
    value_loss,
)
from marljoint.ppo.trainer import Iteration, JointMultiAgentTrainer, JointStats

__all__ = [
    "AuxFn",
    "AuxOutput",
    "DivergenceError",
    "Iteration",
    "JointMultiAgentTrainer",
    "JointRollout",
    "JointStats",
    "JointTrainerConfig",
    "Learner",
    "NetworkConfig",
    "NetworkUnit",
    "OptimConfig",
    "PolicyLossTerms",
    "PpoConfig",
    "RunningNormalizer",
    "RuntimeConfig",
    "anneal_for_agents",
    "compute_gae",
    "derive_replay",
    "derive_settings",
    "derive_threads",
    "gamma_for_episodes",
    "explained_variance",
    "features_only",
    "masked_mean",
    "masked_moments",
    "normalize_advantages",
    "policy_loss",
    "value_loss",
]
