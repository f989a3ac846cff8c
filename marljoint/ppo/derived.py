"""Settings derived from the env: what a setting left at ``None`` becomes for a given env, and why.

A default that should follow the env (rather than be one number for every env) is ``None`` in
:class:`~marljoint.JointTrainerConfig`. The trainer resolves it here when it is built, from what the env's spaces
tell; :attr:`~marljoint.JointMultiAgentTrainer.config` then holds the value used and
:attr:`~marljoint.JointMultiAgentTrainer.derived` the rule's reason, which ``marljoint train`` writes beside the
value in the run's ``config.toml``. Any value given explicitly is kept as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from marljoint.env.spaces import JointSpec
from marljoint.ppo.config import JointTrainerConfig

__all__ = ["derive_settings", "settings_of_policies"]


def derive_settings(spec: JointSpec, config: JointTrainerConfig) -> tuple[JointTrainerConfig, dict[str, str]]:
    """Resolves the env-derived settings of ``config`` that are ``None``.

    Rules:
        ``normalize_observations``: on when some agent's flat observation space holds a ``Box`` with an infinite
        bound or one of magnitude >= 1e6 (:attr:`~marljoint.env.spaces.ObservationLayout.unbounded`): nothing
        tells the scale of such features before training, and features of very different scales (positions in
        metres beside velocities, lidar distances beside joint angles) slow an MLP's learning. Off when every
        observation is bounded (one-hot codes, ``[0, 1]`` features, images).

    Args:
        spec: the env's agents and layouts.
        config: the configuration, possibly with ``None`` settings.

    Returns:
        ``(resolved config, {setting: the reason of its value})``; a setting given explicitly has no reason.
    """
    changes: dict[str, Any] = {}
    derived: dict[str, str] = {}
    if config.normalize_observations is None:
        unbounded = [a for a, o in zip(spec.agents, spec.observations) if o.kind == "flat" and o.unbounded]
        changes["normalize_observations"] = bool(unbounded)
        if unbounded:
            derived["normalize_observations"] = (
                f"on: {_names(unbounded)} observe a Box with unbounded bounds, whose scale nothing tells in advance"
            )
        else:
            derived["normalize_observations"] = "off: every agent's observation space is bounded"
    return (config.replace(**changes) if changes else config), derived


def settings_of_policies(
    config: JointTrainerConfig, policies: Sequence[Any]
) -> tuple[JointTrainerConfig, dict[str, str]]:
    """Resolves the env-derived settings from networks the caller built (they decide; the config must agree).

    Raises:
        ValueError: if ``normalize_observations`` is set and some given network disagrees.
    """
    has = [getattr(p, "obs_normalizer", None) is not None for p in policies]
    if config.normalize_observations is None:
        value = any(has)
        reason = "the given policies " + ("normalise observations" if value else "do not normalise observations")
        return config.replace(normalize_observations=value), {"normalize_observations": reason}
    wrong = [i for i, h in enumerate(has) if h != config.normalize_observations]
    if wrong:
        raise ValueError(
            f"normalize_observations={config.normalize_observations}, but the policies of agents {wrong} were built "
            f"with normalize_observations={not config.normalize_observations}; build them with "
            f"ActorCritic(..., normalize_observations={config.normalize_observations}) or leave the setting None"
        )
    return config, {}


def _names(agents: Sequence[str]) -> str:
    shown = ", ".join(repr(a) for a in agents[:3])
    if len(agents) == 1:
        return f"agent {shown}"
    return f"agents {shown}" + (f" and {len(agents) - 3} more" if len(agents) > 3 else "")
