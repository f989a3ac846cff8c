"""The rollout storage, re-exported from :mod:`marljoint.collect.rollout` where it lives."""

from marljoint.collect.rollout import PER_AGENT_FIELDS, JointRollout, carry_pending_moves

__all__ = ["PER_AGENT_FIELDS", "JointRollout", "carry_pending_moves"]
