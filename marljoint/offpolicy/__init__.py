"""The off-policy path: a replay buffer of joint transitions, exploration schedules, target networks, value
decomposition (VDN, QMIX), the reward scale of its TD targets, the centralised-critic actor-critics (MASAC, MADDPG)
and the off-policy trainer."""

from marljoint.offpolicy.acting import ExplorationActing
from marljoint.offpolicy.base import OffPolicyAlgorithm
from marljoint.offpolicy.centralised import CentralisedActorCritic
from marljoint.offpolicy.config import ALGORITHMS, OffPolicyConfig
from marljoint.offpolicy.exploration import explore, linear_schedule
from marljoint.offpolicy.functional import double_q_values, masked_max, td_targets, team_rewards
from marljoint.offpolicy.mixers import QmixMixer, VdnMixer
from marljoint.offpolicy.replay import JointTransitions, ReplayBuffer
from marljoint.offpolicy.reward_scale import RewardScale
from marljoint.offpolicy.sac import SacAlgorithm, SacConfig
from marljoint.offpolicy.targets import TargetNetworks, polyak_update
from marljoint.offpolicy.trainer import OffPolicyTrainer, Played
from marljoint.offpolicy.transitions import rollout_moves, rollout_transitions
from marljoint.offpolicy.value import GroupQNetwork, ValueDecomposition

__all__ = [
    "ALGORITHMS",
    "CentralisedActorCritic",
    "ExplorationActing",
    "GroupQNetwork",
    "JointTransitions",
    "OffPolicyAlgorithm",
    "OffPolicyConfig",
    "OffPolicyTrainer",
    "Played",
    "QmixMixer",
    "ReplayBuffer",
    "RewardScale",
    "SacAlgorithm",
    "SacConfig",
    "TargetNetworks",
    "ValueDecomposition",
    "VdnMixer",
    "double_q_values",
    "explore",
    "linear_schedule",
    "masked_max",
    "polyak_update",
    "rollout_moves",
    "rollout_transitions",
    "td_targets",
    "team_rewards",
]
