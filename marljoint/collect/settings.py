"""The defaults of the settings every algorithm family reads, declared once.

The env copies, the seed, the learner's device, the encoders' widths, parameter sharing and Adam's ε mean the same
in every family: :class:`~marljoint.JointTrainerConfig` (PPO), :class:`~marljoint.offpolicy.OffPolicyConfig` (VDN,
QMIX, MASAC, MADDPG), :class:`~marljoint.offpolicy.sac.SacConfig`, :class:`~marljoint.best_response.PsroConfig` and
:class:`~marljoint.best_response.NfspConfig` take their field defaults from :data:`SHARED_DEFAULTS`. A family that
wants another default for a setting of its own declares it once, in its own table (the off-policy family's is
:data:`marljoint.offpolicy.defaults.OFFPOLICY_DEFAULTS`). The table lives in the collection layer because it is the
lowest layer every family's config imports.

Example:
    >>> SHARED_DEFAULTS["num_envs"], SHARED_DEFAULTS["hidden_sizes"]
    (8, (64, 64))
"""

from __future__ import annotations

from typing import Any

__all__ = ["SHARED_DEFAULTS"]

SHARED_DEFAULTS: dict[str, Any] = {
    "num_envs": 8,
    "seed": 0,
    "device": "cpu",
    "hidden_sizes": (64, 64),
    "share_parameters": True,
    "adam_eps": 1e-5,
}
"""``{setting: default}`` of the settings shared by every family (each family's config documents its field)."""
