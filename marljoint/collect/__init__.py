"""Collection: how rollouts are gathered from env copies: the in-process collector, the rollout storage
``[T, E, N, ...]``, the moves a turn-based rollout carries into the next, and the per-copy noise generators."""

from marljoint.collect.local import LocalCollector
from marljoint.collect.noise import CopyNoise, copy_generators, generators_from_states
from marljoint.collect.rollout import PER_AGENT_FIELDS, JointRollout, carry_pending_moves

__all__ = [
    "PER_AGENT_FIELDS",
    "CopyNoise",
    "JointRollout",
    "LocalCollector",
    "carry_pending_moves",
    "copy_generators",
    "generators_from_states",
]
