"""Settings derived from the env: what a setting left at ``None`` becomes for a given env, and why.

A default that should follow the env (rather than be one number for every env) is ``None`` in
:class:`~marljoint.JointTrainerConfig`. The trainer resolves it here when it is built, from what the env's spaces
and its stated episode length tell; :attr:`~marljoint.JointMultiAgentTrainer.config` then holds the value used and
:attr:`~marljoint.JointMultiAgentTrainer.derived` the rule's reason, which ``marljoint train`` writes beside the
value in the run's ``config.toml``. Any value given explicitly is kept as it is.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch

from marljoint.env.spaces import JointSpec
from marljoint.policies.recurrent import resolve_replay
from marljoint.ppo.config import JointTrainerConfig
from marljoint.threads import AUTO, learner_threads, usable_cores

__all__ = [
    "ACTING_WORK_THRESHOLD",
    "BOX_ACTION_SETTINGS",
    "DISCRETE_ACTION_SETTINGS",
    "GAMMA_RANGE",
    "MANY_AGENTS",
    "anneal_for_agents",
    "derive_acting_device",
    "derive_replay",
    "derive_settings",
    "derive_threads",
    "gamma_for_episodes",
    "settings_of_policies",
]

GAMMA_RANGE = (0.9, 0.99)
"""The discounts the episode-length rule chooses from (:func:`gamma_for_episodes`); 0.99 when no limit is known."""


MANY_AGENTS = 5
"""The agent count from which ``anneal_lr=None`` anneals the learning rate (:func:`derive_settings`)."""


DISCRETE_ACTION_SETTINGS = {"ent_coef": 0.01, "learning_rate": 1e-3}
"""The action-space rule's values when every agent's actions are discrete (Discrete, MultiDiscrete)."""

BOX_ACTION_SETTINGS = {
    "ent_coef": 0.0,
    "learning_rate": JointTrainerConfig.__dataclass_fields__["learning_rate"].default,
}
"""The action-space rule's values when some agent acts in a ``Box`` (continuous control); its learning rate is
:class:`~marljoint.JointTrainerConfig`'s default (3e-4, the continuous-control recipe's)."""


def derive_settings(spec: JointSpec, config: JointTrainerConfig) -> tuple[JointTrainerConfig, dict[str, str]]:
    """Resolves the env-derived settings of ``config`` that are ``None``.

    Rules:
        ``normalize_observations``: on when some agent's flat observation space holds a ``Box`` with an infinite
        bound or one of magnitude >= 1e6 (:attr:`~marljoint.env.spaces.ObservationLayout.unbounded`): nothing
        tells the scale of such features before training, and features of very different scales (positions in
        metres beside velocities, lidar distances beside joint angles) slow an MLP's learning. Off when every
        observation is bounded (one-hot codes, ``[0, 1]`` features, images).

        ``gamma``: :func:`gamma_for_episodes` of the env's stated episode length H
        (:attr:`~marljoint.env.JointSpec.episode_limit`): ``1 - 1/H`` within :data:`GAMMA_RANGE`. A rollout cut
        by the time limit is bootstrapped from the critic's value there, as if the episode went on; with an
        effective horizon ``1/(1 - gamma)`` longer than the episode, most of every value target is that guess of
        what follows the limit, and the critic learns slowly (on 25-step MPE episodes γ = 0.99 reaches about
        100 steps). 0.99 when the env states no limit (a game that ends by itself, an open-ended task). In a
        turn-based game the discount applies to each player's own moves, which an AEC env's ``max_cycles`` counts.

        ``ent_coef`` and ``learning_rate``: :data:`BOX_ACTION_SETTINGS` (no entropy bonus, 3e-4) when some agent
        acts in a ``Box``, :data:`DISCRETE_ACTION_SETTINGS` (0.01, 1e-3) otherwise. A categorical's entropy is
        bounded, and its bonus only keeps the choice from collapsing early; a Gaussian's entropy grows without
        bound with its log standard deviation, so the bonus keeps pushing the noise up once the policy gradient's
        pull on it fades, and a policy trained with it acts far worse sampled than greedy. The Gaussian's mean
        and log standard deviation also move straight in action units, and 3e-4 (the continuous-control
        recipe's rate) keeps ten epochs per rollout from overshooting. The rule is one setting for all agents,
        so in an env that mixes both kinds the discrete agents get the Box values too.

        ``anneal_lr``: :func:`anneal_for_agents` of the number of agents (on from :data:`MANY_AGENTS`).

    Args:
        spec: the env's agents and layouts.
        config: the configuration, possibly with ``None`` settings.

    Returns:
        ``(resolved config, {setting: the reason of its value})``; a setting given explicitly has no reason.
    """
    changes: dict[str, Any] = {}
    derived: dict[str, str] = {}
    if config.network.normalize_observations is None:
        changes["normalize_observations"], derived["normalize_observations"] = _normalization_rule(spec)
    if config.ppo.gamma is None:
        changes["gamma"], derived["gamma"] = _gamma_rule(spec.episode_limit)
    box = [a for a, layout in zip(spec.agents, spec.actions) if layout.kind == "box"]
    values = BOX_ACTION_SETTINGS if box else DISCRETE_ACTION_SETTINGS
    for name, value in values.items():
        if getattr(config, name) is None:
            changes[name] = value
            derived[name] = (
                f"{value}: {_names(box)} act in a Box (continuous actions)"
                if box
                else f"{value}: every agent's actions are discrete"
            )
    if config.optim.anneal_lr is None:
        changes["anneal_lr"], derived["anneal_lr"] = anneal_for_agents(spec.num_agents)
    return (config.replace(**changes) if changes else config), derived


def anneal_for_agents(num_agents: int) -> tuple[bool, str]:
    """Whether a run of ``num_agents`` agents anneals its learning rate to 0 (``anneal_lr``), and why.

    On from :data:`MANY_AGENTS` agents. An agent's advantage carries the noise of every other agent's exploration
    in a shared return, so with many agents a constant step keeps moving a policy that has sharpened: on
    ``simple_spread`` with six agents the clip fraction climbs from 0.06 to 0.12 over 1M env steps and the greedy
    return stays where it was at 250k (-30.2, -30.5 at 1M); annealed to 0, it rises on every seed (-29.5 to -28.8,
    three seeds). Below five agents the constant rate is the one the generalization suite chose.

    Example:
        >>> anneal_for_agents(6)[0], anneal_for_agents(3)
        (True, (False, 'off: 3 agents (< 5), the constant rate'))
    """
    if num_agents >= MANY_AGENTS:
        return True, (
            f"on: {num_agents} agents (>= {MANY_AGENTS}), whose shared return a constant step keeps chasing; "
            "annealed to 0, the policy settles and keeps improving"
        )
    return False, f"off: {num_agents} agents (< {MANY_AGENTS}), the constant rate"


def derive_threads(config: JointTrainerConfig) -> tuple[JointTrainerConfig, dict[str, str]]:
    """Resolves ``torch_threads="auto"`` from this machine, the learner's device and the collection backend
    (:func:`marljoint.threads.learner_threads`: one thread when the learner collects in-process or updates on a
    GPU, the cores the workers leave free otherwise).

    An explicit number is kept; one above the cores this process may use is kept with a warning, since threads
    beyond the cores slow every process on them.

    Returns:
        ``(resolved config, {"torch_threads": reason})``; no reason for a number given explicitly or ``None``.
    """
    runtime, collection = config.runtime, config.collection
    requested = runtime.torch_threads
    if requested == AUTO:
        workers = collection.workers if collection.multiprocess else 0
        accelerator = None if torch.device(runtime.device).type == "cpu" else runtime.device
        threads, reason = learner_threads(workers, collects=not collection.multiprocess, accelerator=accelerator)
        return config.replace(torch_threads=threads), {"torch_threads": reason}
    cores = usable_cores()
    if requested is not None and requested > cores:
        warnings.warn(
            f"torch_threads={requested} is more than the {cores} cores this process may use: threads beyond the "
            "cores slow this run and every other process on them; set torch_threads='auto' (the cores the env "
            "workers leave free) or at most the cores",
            stacklevel=3,
        )
    return config, {}


ACTING_WORK_THRESHOLD = 10_000_000
"""Multiply-adds per env step (over all copies and agents) from which ``acting_device="auto"`` acts on the
learner's device: about a millisecond of one CPU core's arithmetic, what one step's kernel launches and
host<->device copies cost on a GPU."""


def derive_acting_device(
    config: JointTrainerConfig, networks: Sequence[torch.nn.Module]
) -> tuple[JointTrainerConfig, dict[str, str]]:
    """Resolves ``acting_device="auto"``: where the policy acts while this process collects a rollout.

    Rule, in order:
        1. the learner's device is the CPU: ``"cpu"`` (one device, nothing to copy);
        2. env worker processes collect (``"subprocess"`` or ``"ray"``): ``"cpu"``, since the workers act on CPU
           copies of the networks anyway; the rollout is assembled on the CPU and moved to the device once;
        3. some network is convolutional (image observations): the learner's device, where a convolution costs a
           fraction of its CPU time;
        4. the work per env step, ``num_envs ×`` the multiply-adds one row of each agent costs (about the
           parameters of that agent's networks), reaches :data:`ACTING_WORK_THRESHOLD`: the learner's device;
        5. otherwise ``"cpu"``: a small network acting on a GPU one step at a time waits on kernel launches and
           host<->device copies, and a CPU copy acts faster (its weights are refreshed once per rollout).

    An explicit device is kept.

    Args:
        config: the configuration (its ``device``, ``num_envs`` and ``collection`` are read).
        networks: the learner's networks (an :class:`~marljoint.policies.ActorCritic` serves ``num_agents``
            agents, each with its own weights unless ``share_parameters``).

    Returns:
        ``(resolved config, {"acting_device": reason})``; no reason for a device given explicitly.

    Example:
        >>> small = torch.nn.Linear(16, 16)
        >>> derive_acting_device(JointTrainerConfig(device="meta"), [small])[0].acting_device
        'cpu'
    """
    runtime, num_envs = config.runtime, config.ppo.num_envs
    if runtime.acting_device != "auto":
        return config, {}
    learner = torch.device(runtime.device)
    if learner.type == "cpu":
        return config.replace(acting_device="cpu"), {"acting_device": "cpu: the learner's device is the CPU"}
    if config.collection.multiprocess:
        return config.replace(acting_device="cpu"), {
            "acting_device": "cpu: the env workers act on CPU copies of the networks; the rollout is assembled on "
            f"the CPU and moved to {runtime.device} once per iteration"
        }
    if any(isinstance(m, torch.nn.modules.conv._ConvNd) for network in networks for m in network.modules()):
        return config.replace(acting_device=runtime.device), {
            "acting_device": f"{runtime.device}: the networks are convolutional, whose forward costs far less there "
            "than on the CPU"
        }
    work = num_envs * sum(_work_per_copy(network) for network in networks)
    if work >= ACTING_WORK_THRESHOLD:
        return config.replace(acting_device=runtime.device), {
            "acting_device": f"{runtime.device}: about {work:,} multiply-adds per env step ({num_envs} copies), "
            f"at least {ACTING_WORK_THRESHOLD:,}: the device computes them faster than a CPU core, launches and "
            "copies included"
        }
    return config.replace(acting_device="cpu"), {
        "acting_device": f"cpu: about {work:,} multiply-adds per env step ({num_envs} copies), below "
        f"{ACTING_WORK_THRESHOLD:,}: on {runtime.device} each step would wait on kernel launches and host-device "
        "copies, so a CPU copy of the networks acts (its weights refreshed before every rollout)"
    }


def _work_per_copy(network: torch.nn.Module) -> int:
    """Multiply-adds of one env copy through ``network``: about its parameters per agent times its agents."""
    parameters = sum(p.numel() for p in network.parameters())
    agents = int(getattr(network, "num_agents", 1))
    shared = bool(getattr(network, "share_parameters", True))
    return parameters * agents if shared else parameters


def derive_replay(config: JointTrainerConfig) -> tuple[JointTrainerConfig, dict[str, str]]:
    """Resolves ``recurrent_replay="auto"`` of a recurrent config from its device
    (:func:`marljoint.policies.recurrent.resolve_replay`): the fused GRU/LSTM kernel on CUDA, where stepping the
    cells is bound by kernel launches, the cells elsewhere (the bits the rollout acted with).

    Returns:
        ``(resolved config, {"recurrent_replay": reason})``; no reason for a value given explicitly or a
        feed-forward config (whose setting stays as given, unused).
    """
    network = config.network
    if network.recurrent is None or network.recurrent_replay != "auto":
        return config, {}
    replay, reason = resolve_replay(network.recurrent_replay, config.runtime.device)
    return config.replace(recurrent_replay=replay), {"recurrent_replay": reason}


def gamma_for_episodes(episode_limit: int | None) -> float:
    """The discount whose effective horizon ``1/(1 - gamma)`` is an episode of ``episode_limit`` steps.

    Example:
        >>> gamma_for_episodes(25), gamma_for_episodes(5), gamma_for_episodes(500), gamma_for_episodes(None)
        (0.96, 0.9, 0.99, 0.99)

    Args:
        episode_limit: the most steps an episode lasts, or ``None`` when unknown.

    Returns:
        ``1 - 1/episode_limit`` kept within :data:`GAMMA_RANGE` (rounded to 4 decimals), or its upper end for
        ``None``.

    Raises:
        ValueError: for an ``episode_limit`` that is not a positive integer.
    """
    low, high = GAMMA_RANGE
    if episode_limit is None:
        return high
    if isinstance(episode_limit, bool) or not isinstance(episode_limit, int) or episode_limit < 1:
        raise ValueError(f"episode_limit must be a positive integer or None, got {episode_limit!r}")
    return round(min(high, max(low, 1.0 - 1.0 / episode_limit)), 4)


def _normalization_rule(spec: JointSpec) -> tuple[bool, str]:
    unbounded = [a for a, o in zip(spec.agents, spec.observations) if o.kind == "flat" and o.unbounded]
    if unbounded:
        reason = f"on: {_names(unbounded)} observe a Box with unbounded bounds, whose scale nothing tells in advance"
        return True, reason
    return False, "off: every agent's observation space is bounded"


def _gamma_rule(episode_limit: int | None) -> tuple[float, str]:
    gamma = gamma_for_episodes(episode_limit)
    if episode_limit is None:
        return gamma, f"{gamma}: the env states no episode length (max_cycles)"
    return gamma, (
        f"{gamma}: 1 - 1/{episode_limit} for {episode_limit}-step episodes (the env's max_cycles), within "
        f"[{GAMMA_RANGE[0]}, {GAMMA_RANGE[1]}], so the effective horizon 1/(1 - gamma) is no longer than an episode"
    )


def settings_of_policies(
    config: JointTrainerConfig, policies: Sequence[Any]
) -> tuple[JointTrainerConfig, dict[str, str]]:
    """Resolves the env-derived settings from networks the caller built (they decide; the config must agree).

    Raises:
        ValueError: if ``normalize_observations`` is set and some given network disagrees.
    """
    has = [getattr(p, "obs_normalizer", None) is not None for p in policies]
    normalize = config.network.normalize_observations
    if normalize is None:
        value = any(has)
        reason = "the given policies " + ("normalise observations" if value else "do not normalise observations")
        return config.replace(normalize_observations=value), {"normalize_observations": reason}
    wrong = [i for i, h in enumerate(has) if h != normalize]
    if wrong:
        raise ValueError(
            f"normalize_observations={normalize}, but the policies of agents {wrong} were built "
            f"with normalize_observations={not normalize}; build them with "
            f"ActorCritic(..., normalize_observations={normalize}) or leave the setting None"
        )
    return config, {}


def _names(agents: Sequence[str]) -> str:
    shown = ", ".join(repr(a) for a in agents[:3])
    if len(agents) == 1:
        return f"agent {shown}"
    return f"agents {shown}" + (f" and {len(agents) - 3} more" if len(agents) > 3 else "")
