"""Environments as JointEnvs: the protocol, the PettingZoo adapter, space layouts and the conformance check."""

from marljoint.env.base import EnvCopyError, JointEnv, JointObs, JointStep, NonFiniteEnvError, split_copies
from marljoint.env.check import (
    BlankImageWarning,
    JointEnvCheckError,
    blank_image_agents,
    blank_image_message,
    check_joint_env,
    random_actions,
)
from marljoint.env.openspiel import OPENSPIEL_PREFIX, openspiel_env
from marljoint.env.pettingzoo import PettingZooJointEnv, episode_limit
from marljoint.env.spaces import ActionLayout, GroupSpec, JointSpec, ObservationLayout
from marljoint.env.subprocess import EnvWorker, EnvWorkerDied, SubprocessJointEnv, make_joint_env

__all__ = [
    "OPENSPIEL_PREFIX",
    "openspiel_env",
    "ActionLayout",
    "BlankImageWarning",
    "EnvCopyError",
    "EnvWorker",
    "EnvWorkerDied",
    "GroupSpec",
    "JointEnv",
    "JointEnvCheckError",
    "JointObs",
    "JointSpec",
    "JointStep",
    "NonFiniteEnvError",
    "ObservationLayout",
    "PettingZooJointEnv",
    "SubprocessJointEnv",
    "blank_image_agents",
    "blank_image_message",
    "check_joint_env",
    "episode_limit",
    "make_joint_env",
    "random_actions",
    "split_copies",
]
