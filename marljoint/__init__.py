"""marljoint: multi-agent reinforcement learning on PettingZoo.

Any PettingZoo env (parallel or turn-based) becomes a :class:`JointEnv` through :class:`PettingZooJointEnv`.
Every training family makes one joint update: each agent's loss and optional cross-agent auxiliary losses form one
scalar, one backward pass runs, and each agent's optimiser steps on its own parameters. The families are PPO
(MAPPO, IPPO, and MMD self-play), value decomposition (VDN, QMIX) and off-policy actor-critics (MASAC, MADDPG); the
game solvers PSRO and NFSP train best responses with them. Every one implements
:class:`~marljoint.run.algorithms.Algorithm` and is a row of :data:`~marljoint.run.algorithms.ALGORITHMS`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from marljoint.collect import CollectionConfig, Collector, LocalCollector
from marljoint.distributed.ranks import RankGroup, RanksDiverged
from marljoint.env import (
    ActionLayout,
    BlankImageWarning,
    EnvCopyError,
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
    episode_limit,
    make_joint_env,
)
from marljoint.offpolicy import OffPolicyConfig, OffPolicyTrainer, SacAlgorithm, SacConfig
from marljoint.policies import JointPolicy
from marljoint.ppo import (
    AuxOutput,
    DivergenceError,
    Iteration,
    JointMultiAgentTrainer,
    JointRollout,
    JointStats,
    JointTrainerConfig,
    anneal_for_agents,
    compute_gae,
    derive_settings,
    features_only,
    gamma_for_episodes,
)
from marljoint.run.algorithms import ALGORITHMS, Algorithm, AlgorithmEntry
from marljoint.run.lock import RunLock, RunLocked
from marljoint.threads import auto_workers, learner_threads, limit_threads, usable_cores
from marljoint.trust import SnapshotTrustError

if TYPE_CHECKING:  # pragma: no cover
    from marljoint.run.evaluate import TrainedRun
    from marljoint.run.export import ExportResult

__version__ = "0.1.0"


def load_run(
    run_dir: str | os.PathLike[str],
    checkpoint: str | os.PathLike[str] | None = None,
    num_envs: int = 1,
    seed: int | None = None,
    *,
    trust_run: bool = False,
    **env_kwargs: Any,
) -> TrainedRun:
    """A trained ``marljoint train`` run, ready to act (:func:`marljoint.run.evaluate.load_run`: the networks of its
    newest checkpoint over ``num_envs`` in-process copies of its env, on the CPU).

    A run whose ``config.toml`` is not signed with your key (received from someone else, or written before runs were
    signed) and names a function as its env (``package.module:function``) is refused before anything is imported,
    unless ``trust_run=True``: only for runs you trust.

    Returns:
        A :class:`~marljoint.run.evaluate.TrainedRun` with ``act(obs)``, ``agent_policy(agent)``, ``env`` and
        ``close()``.
    """
    from marljoint.run.evaluate import load_run as _load_run

    return _load_run(run_dir, checkpoint, num_envs=num_envs, seed=seed, trust_run=trust_run, **env_kwargs)


def export_run(
    run_dir: str | os.PathLike[str],
    format: str = "torchscript",
    out: str | os.PathLike[str] | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    trust_run: bool = False,
) -> ExportResult:
    """Writes a trained run's greedy acting policies as standalone files (:func:`marljoint.run.export.export_run`):
    TorchScript ``.pt`` (torch alone) or ONNX ``.onnx`` (onnxruntime), one per agent group, with a JSON manifest
    (``docs/export.md`` gives the inputs and outputs).

    Returns:
        A :class:`~marljoint.run.export.ExportResult` with ``directory``, ``files`` and ``manifest``.
    """
    from marljoint.run.export import export_run as _export_run

    return _export_run(run_dir, format, out=out, checkpoint=checkpoint, trust_run=trust_run)


__all__ = [
    "ALGORITHMS",
    "ActionLayout",
    "Algorithm",
    "AlgorithmEntry",
    "AuxOutput",
    "BlankImageWarning",
    "CollectionConfig",
    "Collector",
    "DivergenceError",
    "EnvCopyError",
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
    "OffPolicyConfig",
    "OffPolicyTrainer",
    "PettingZooJointEnv",
    "RankGroup",
    "RanksDiverged",
    "RunLock",
    "RunLocked",
    "SacAlgorithm",
    "SacConfig",
    "SnapshotTrustError",
    "SubprocessJointEnv",
    "__version__",
    "anneal_for_agents",
    "auto_workers",
    "check_joint_env",
    "compute_gae",
    "derive_settings",
    "episode_limit",
    "export_run",
    "features_only",
    "gamma_for_episodes",
    "learner_threads",
    "limit_threads",
    "load_run",
    "make_joint_env",
    "usable_cores",
]
