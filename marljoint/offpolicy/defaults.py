"""The off-policy family's own defaults: the settings it shares with the other families but defaults differently.

Every other shared setting takes its default from :data:`marljoint.collect.settings.SHARED_DEFAULTS`;
:class:`~marljoint.offpolicy.OffPolicyConfig` and :class:`~marljoint.offpolicy.sac.SacConfig` take these from here,
and a run (``marljoint train --algorithm vdn``) where the run's own setting is left to the env.

Example:
    >>> OFFPOLICY_DEFAULTS["rollout_steps"], OFFPOLICY_DEFAULTS["gamma"]
    (16, 0.99)
"""

from __future__ import annotations

from typing import Any

__all__ = ["OFFPOLICY_DEFAULTS", "SAC_DEFAULTS"]

OFFPOLICY_DEFAULTS: dict[str, Any] = {
    "algorithm": "vdn",
    "rollout_steps": 16,
    "gamma": 0.99,
    "learning_rate": 5e-4,
    "max_grad_norm": 10.0,
    "tau": 0.01,
}
"""The value methods' and the off-policy trainer's defaults where PPO's differ. ``algorithm``: an
:class:`~marljoint.offpolicy.OffPolicyConfig` built directly trains VDN, the simplest of the family (a run without
``algorithm`` trains PPO). ``rollout_steps``: an iteration
only stores transitions (the gradient steps follow the transitions stored, not the rollout), so a short one acts
on fresh weights sooner. ``gamma``: one discount, the value methods' usual 0.99, where a PPO run derives it from
the episode length. ``learning_rate``, ``max_grad_norm``, ``tau``: the value-decomposition recipe (PyMARL's QMIX:
Adam at 5e-4, the gradient clipped at norm 10, Polyak targets)."""

SAC_DEFAULTS: dict[str, Any] = {
    "tau": 0.005,
    "share_parameters": False,
}
""":class:`~marljoint.offpolicy.sac.SacConfig`'s defaults where the value methods' differ. ``tau``: the soft
actor-critic recipe's Polyak coefficient. ``share_parameters``: a :class:`~marljoint.offpolicy.sac.SacConfig`
built directly gives each agent its own actor and critics (the papers' setting); a run takes the run's
``share_parameters`` instead."""
