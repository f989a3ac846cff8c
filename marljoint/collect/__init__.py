"""Collection: how rollouts are gathered from env copies.

A :class:`Collector` plays rollouts with a :class:`~marljoint.policies.JointPolicy` (or a :class:`StepActing`, the
off-policy learners' exploring behaviour, asked for every step's actions): in this process
(:class:`LocalCollector`), in a :class:`~marljoint.env.SubprocessJointEnv`'s workers (:class:`SubprocessCollector`)
or in Ray actors (:class:`RayCollector`), optionally one rollout ahead of the update (:class:`OverlappedCollector`,
``policy_lag=1``), chosen by a :class:`CollectionConfig` (:func:`make_collector`); on data-parallel ranks each rank
plays its slice of the copies and every rank gets the whole rollout (:class:`RankCollector`). All give the same
rollout bit for bit: the subprocess and Ray collectors are one orchestration (:class:`SlicedCollector`) over two
transports (pipes, Ray actors). Also here: the rollout storage ``[T, E, N, ...]``, the moves a turn-based rollout
carries into the next, the per-copy noise generators, the padded batches of a slice of the copies
(:class:`PaddedPolicy`) and the one rule that splits env copies into slices.
"""

from marljoint.collect.backends import make_collector
from marljoint.collect.balance import WorkBalancer, proportional_slices
from marljoint.collect.base import ActingPolicy, Collector, StepActing, WorkerCollector, rollout_storage
from marljoint.collect.config import BACKENDS, CollectionConfig
from marljoint.collect.local import LocalCollector
from marljoint.collect.noise import CopyNoise, copy_generators, generators_from_states
from marljoint.collect.orchestration import SlicedCollector, SliceTransport
from marljoint.collect.overlap import OverlappedCollector
from marljoint.collect.padded import PaddedPolicy, RowPadding
from marljoint.collect.ranks import RankCollector
from marljoint.collect.ray import RayCollector, WorkerLostError
from marljoint.collect.rollout import PER_AGENT_FIELDS, JointRollout, carry_pending_moves
from marljoint.collect.slices import SliceWorker, assemble, blueprint, rollout_piece
from marljoint.collect.subprocess import SubprocessCollector
from marljoint.env.base import split_copies

__all__ = [
    "BACKENDS",
    "PER_AGENT_FIELDS",
    "ActingPolicy",
    "CollectionConfig",
    "Collector",
    "CopyNoise",
    "JointRollout",
    "LocalCollector",
    "OverlappedCollector",
    "PaddedPolicy",
    "RankCollector",
    "RayCollector",
    "RowPadding",
    "SliceTransport",
    "SliceWorker",
    "StepActing",
    "SlicedCollector",
    "SubprocessCollector",
    "WorkBalancer",
    "WorkerCollector",
    "WorkerLostError",
    "assemble",
    "blueprint",
    "carry_pending_moves",
    "copy_generators",
    "generators_from_states",
    "make_collector",
    "proportional_slices",
    "rollout_piece",
    "rollout_storage",
    "split_copies",
]
