"""marljoint: synchronized joint multi-agent PPO for PettingZoo.

Every agent's PPO loss and optional cross-agent auxiliary losses form one scalar; one backward pass runs; each
agent's optimizer steps on its own parameters. Any PettingZoo env (parallel or turn-based) becomes a
:class:`JointEnv` through :class:`PettingZooJointEnv`.
"""

from marljoint.collect import CollectionConfig, Collector, LocalCollector
from marljoint.env import (
    ActionLayout,
    GroupSpec,
    JointEnv,
    JointEnvCheckError,
    JointObs,
    JointSpec,
    JointStep,
    ObservationLayout,
    PettingZooJointEnv,
    SubprocessJointEnv,
    check_joint_env,
    make_joint_env,
)
from marljoint.policies import JointPolicy
from marljoint.ppo import (
    AuxOutput,
    Iteration,
    JointMultiAgentTrainer,
    JointRollout,
    JointStats,
    JointTrainerConfig,
    compute_gae,
)

__version__ = "0.1.0"

__all__ = [
    "ActionLayout",
    "AuxOutput",
    "CollectionConfig",
    "Collector",
    "GroupSpec",
    "Iteration",
    "JointEnv",
    "JointEnvCheckError",
    "JointMultiAgentTrainer",
    "JointObs",
    "JointPolicy",
    "JointRollout",
    "JointSpec",
    "JointStats",
    "JointStep",
    "JointTrainerConfig",
    "LocalCollector",
    "ObservationLayout",
    "PettingZooJointEnv",
    "SubprocessJointEnv",
    "__version__",
    "check_joint_env",
    "compute_gae",
    "make_joint_env",
]
