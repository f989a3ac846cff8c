"""MASAC and MADDPG: off-policy actor-critic for N agents with centralised critics.

:class:`SacAlgorithm` is a pluggable off-policy algorithm: a trainer acts with :meth:`SacAlgorithm.act`, stores
transitions in a replay buffer, and per update calls :meth:`SacAlgorithm.loss` on a sampled batch, makes ONE
backward of the joint loss, clips and steps each of :meth:`SacAlgorithm.networks` (every parameter's first axis is
the agent member axis, so clipping and optimiser steps are per agent), then calls
:meth:`SacAlgorithm.update_targets`.

The batch (a dict of tensors, B transitions of N agents in ``possible_agents`` order):

=================  ==============================  ==========================================================
key                shape                           meaning
=================  ==============================  ==========================================================
``obs``            ``[B, F_0 + … + F_{N-1}]``      every agent's own flat observation, concatenated in agent
                   float, or ``[B, N, F]``         order (no padding); where every agent's width is F, also
                                                   ``[B, N, F]``
``state``          ``[B, state_dim]`` float        the global state (the concatenated observations where the
                                                   env has none)
``actions``        ``[B, N]`` long (Discrete),     the actions taken (in the space's bounds for a Box)
                   ``[B, N, D]`` float (Box)
``rewards``        ``[B, N]`` float                each agent's reward
``next_obs``       as ``obs``                      the observations after the step (the final one before an
                                                   auto-reset)
``next_state``     ``[B, state_dim]``              the global state after the step
``terminated``     ``[B]`` or ``[B, N]`` bool      the episode (or the agent) ended: no bootstrap
``truncated``      ``[B]`` or ``[B, N]`` bool      optional: cut by a time limit; bootstraps like a normal step
``alive``          ``[B, N]`` bool                 the agent acted in this transition; other rows are masked
                                                   out of every loss and their actions are zeroed in the
                                                   critics' input
``next_alive``     ``[B, N]`` bool                 the agent is present after the step; an absent agent has
                                                   no next value to bootstrap from
``next_acting``    ``[B, N]`` bool                 optional: the agent decides after the step (in turn-based
                                                   games, on its turn); only those agents' next actions enter
                                                   the target critics' input (default: ``next_alive``)
``masks``          ``[B, N, A]`` bool              optional (Discrete): legal actions at ``obs``
``next_masks``     ``[B, N, A]`` bool              optional (Discrete): legal actions at ``next_obs``
=================  ==============================  ==========================================================
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from marljoint.auxiliary import AuxOutput
from marljoint.collect.settings import SHARED_DEFAULTS
from marljoint.offpolicy.defaults import OFFPOLICY_DEFAULTS, SAC_DEFAULTS
from marljoint.offpolicy.sac_networks import CentralCritic, Temperature, build_actor
from marljoint.offpolicy.sharded import BatchShare
from marljoint.policies.distributions import (
    gumbel_softmax_straight_through,
    legal_actions,
    masked_log_softmax,
    squashed_gaussian_log_prob,
)

__all__ = [
    "SAC_VARIANTS",
    "SacAlgorithm",
    "SacConfig",
    "discrete_soft_value",
    "masked_agent_mean",
    "soft_td_target",
    "temperature_loss",
]

SAC_VARIANTS = ("masac", "maddpg")


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_real(name: str, value: object, low: float, high: float, closed_low: bool, fix: str) -> None:
    if not _is_real(value):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}; {fix}")
    above = value >= low if closed_low else value > low
    if not (math.isfinite(value) and above and value <= high):
        bracket = "[" if closed_low else "("
        raise ValueError(f"{name}={value!r} must lie in {bracket}{low}, {high}]; {fix}")


def _check_sizes(name: str, sizes: object) -> None:
    ok = isinstance(sizes, tuple) and len(sizes) > 0
    if not ok or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
        raise ValueError(f"{name}={sizes!r} must be a non-empty tuple of positive ints, e.g. {name}=(64, 64)")


@dataclass(frozen=True)
class SacConfig:
    """The settings of MASAC / MADDPG (see ``docs/masac.md``).

    Example:
        >>> SacConfig(variant="maddpg", tau=0.01).gamma
        0.99
    """

    variant: str = "masac"
    """``"masac"``: stochastic actors with entropy regularisation and twin critics (squashed Gaussian for Box
    actions, the discrete SAC form with an exact expectation over the agent's own actions for Discrete ones).
    ``"maddpg"``: deterministic actors (Box) or Gumbel-softmax straight-through actors (Discrete), one critic and
    target actors."""

    gamma: float = OFFPOLICY_DEFAULTS["gamma"]
    """Discount factor, in ``[0, 1]``."""

    tau: float = SAC_DEFAULTS["tau"]
    """Polyak coefficient of the target networks: ``target ← (1 − τ) target + τ online``, in ``(0, 1]``."""

    actor_lr: float = 3e-4
    """Learning rate of the actors (> 0)."""

    critic_lr: float = 3e-4
    """Learning rate of the critics (> 0)."""

    alpha_lr: float = 3e-4
    """Learning rate of the log entropy temperatures (> 0; ``masac`` with ``autotune_alpha`` only)."""

    hidden_sizes: tuple[int, ...] = SHARED_DEFAULTS["hidden_sizes"]
    """Layer sizes of each actor's encoder; its features (for auxiliary losses) have ``hidden_sizes[-1]``
    entries."""

    critic_hidden_sizes: tuple[int, ...] = (64, 64)
    """Layer sizes of each critic MLP."""

    init_alpha: float = 0.2
    """Initial entropy temperature α of every agent (> 0; ``masac`` only)."""

    autotune_alpha: bool = True
    """Learn each agent's ``log α`` to keep its policy entropy at the target; False keeps ``init_alpha``."""

    target_entropy: float | None = None
    """The entropy target of every agent. None: ``−D`` for a D-dimensional Box,
    ``target_entropy_fraction · log(number of legal actions)`` for a Discrete space."""

    target_entropy_fraction: float = 0.5
    """Discrete spaces with ``target_entropy=None``: the fraction of the uniform policy's entropy aimed at, in
    ``[0, 1]``."""

    actor_update_interval: int = 1
    """The actors (and temperatures) are updated on every k-th call of ``loss`` (the critic on every call)."""

    share_parameters: bool = SAC_DEFAULTS["share_parameters"]
    """One actor and one set of critics for all agents (the agent's one-hot index appended to their inputs)
    instead of one per agent."""

    exploration_noise: float = 0.1
    """``maddpg`` with Box actions: the standard deviation of the Gaussian exploration noise, as a fraction of
    half the action range (>= 0)."""

    gumbel_temperature: float = 1.0
    """``maddpg`` with Discrete actions: the Gumbel-softmax relaxation temperature (> 0)."""

    def __post_init__(self) -> None:
        if self.variant not in SAC_VARIANTS:
            raise ValueError(f"variant={self.variant!r} is not supported; use one of {SAC_VARIANTS}")
        _check_real("gamma", self.gamma, 0.0, 1.0, True, "a discount factor such as 0.99")
        _check_real("tau", self.tau, 0.0, 1.0, False, "a Polyak coefficient such as 0.005 (1 copies the critic)")
        for name in ("actor_lr", "critic_lr", "alpha_lr"):
            _check_real(name, getattr(self, name), 0.0, math.inf, False, f"a learning rate such as {name}=3e-4")
        _check_real("init_alpha", self.init_alpha, 0.0, math.inf, False, "a temperature such as 0.2")
        _check_real("target_entropy_fraction", self.target_entropy_fraction, 0.0, 1.0, True, "e.g. 0.5")
        _check_real("exploration_noise", self.exploration_noise, 0.0, math.inf, True, "e.g. 0.1 (0: none)")
        _check_real("gumbel_temperature", self.gumbel_temperature, 0.0, math.inf, False, "e.g. 1.0")
        if self.target_entropy is not None:
            _check_real("target_entropy", self.target_entropy, -math.inf, math.inf, True, "or None for the default")
        _check_sizes("hidden_sizes", self.hidden_sizes)
        _check_sizes("critic_hidden_sizes", self.critic_hidden_sizes)
        interval = self.actor_update_interval
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ValueError(
                f"actor_update_interval={interval!r} must be a positive int (1: update the actors on every call)"
            )
        for name in ("autotune_alpha", "share_parameters"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {type(getattr(self, name)).__name__}")


def masked_agent_mean(values: torch.Tensor, alive: torch.Tensor, count: torch.Tensor | None = None) -> torch.Tensor:
    """Each agent's mean over its alive rows (0 for an agent with none).

    Args:
        values: ``[B, N]``.
        alive: ``[B, N]`` bool.
        count: ``[N]`` the denominators, or ``None``: the alive rows of ``values``. On data-parallel ranks, each
            agent's alive rows in the whole batch, of which ``values`` holds this rank's rows
            (:class:`~marljoint.offpolicy.sharded.BatchShare`): the ranks' results then sum to the whole batch's.

    Returns:
        ``[N]``.

    Example:
        >>> import torch
        >>> masked_agent_mean(torch.tensor([[1.0, 5.0], [3.0, 7.0]]), torch.tensor([[True, False], [True, False]]))
        tensor([2., 0.])
    """
    weights = alive.to(values.dtype)
    return (values * weights).sum(0) / (weights.sum(0) if count is None else count).clamp_min(1.0)


def soft_td_target(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    next_alive: torch.Tensor,
    next_value: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """The one-step target ``y = r + γ (1 − terminated) · next_alive · V(s')`` of each agent.

    Truncation is not an argument: a time limit bootstraps like any other step, from the value of the final
    observation. An agent absent after the step (``next_alive`` False) has no next value.

    Args:
        rewards: ``[B, N]``.
        terminated: ``[B]`` (the whole episode) or ``[B, N]`` (per agent) bool.
        next_alive: ``[B, N]`` bool.
        next_value: ``[B, N]`` the soft value of the next step (``min Q' − α log π'`` for SAC).
        gamma: the discount factor.

    Returns:
        ``[B, N]``.

    Example:
        >>> import torch
        >>> r, v = torch.tensor([[1.0, 1.0]]), torch.tensor([[10.0, 10.0]])
        >>> soft_td_target(r, torch.tensor([False]), torch.tensor([[True, False]]), v, 0.5)
        tensor([[6., 1.]])
    """
    if terminated.dim() == 1:
        terminated = terminated.unsqueeze(1)
    bootstrap = (~terminated.bool()) & next_alive.bool()
    return rewards + gamma * bootstrap.to(rewards.dtype) * next_value


def _legal_probs(log_probs: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(π, log π)`` ``[..., A]`` with both exactly 0 on the actions :func:`legal_actions` blocks, so that
    ``π · log π`` adds exactly 0 there (and no ``0 · (−huge)`` reaches a gradient)."""
    if mask is None:
        return log_probs.exp(), log_probs
    legal = legal_actions(mask)
    safe = log_probs.masked_fill(~legal, 0.0)
    return safe.exp() * legal, safe


def discrete_soft_value(
    q: torch.Tensor, log_probs: torch.Tensor, alpha: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """The soft value ``V = Σ_a π(a) (Q(a) − α log π(a))`` over the legal actions (the discrete SAC form).

    A row whose mask allows no action counts every action legal (the distributions' convention,
    :func:`~marljoint.policies.distributions.legal_actions`), so its value stays finite.

    Args:
        q: ``[B, N, A]`` per-action values (the minimum over the twin critics).
        log_probs: ``[B, N, A]`` the policy's log-probabilities
            (:func:`~marljoint.policies.distributions.masked_log_softmax` with the same mask; illegal entries may
            be any very negative value).
        alpha: ``[N]`` temperatures.
        mask: ``[B, N, A]`` bool legal actions, or ``None``.

    Returns:
        ``[B, N]``.

    Example:
        >>> import torch
        >>> logp = torch.tensor([[[0.5, 0.5]]]).log()
        >>> discrete_soft_value(torch.tensor([[[1.0, 3.0]]]), logp, torch.zeros(1), None)
        tensor([[2.]])
    """
    probs, log_probs = _legal_probs(log_probs, mask)
    return (probs * (q - alpha[:, None] * log_probs)).sum(-1)


def temperature_loss(
    log_alpha: torch.Tensor,
    log_prob: torch.Tensor,
    target_entropy: torch.Tensor | float,
    alive: torch.Tensor,
    count: torch.Tensor | None = None,
) -> torch.Tensor:
    """SAC's temperature loss ``Σ_i mean_rows[−log α_i · (log π_i + H̄)]``, with ``log π`` treated as a constant.

    Its gradient raises α when the policy's entropy ``−log π`` is below the target ``H̄`` and lowers it above.

    Args:
        log_alpha: ``[N]``.
        log_prob: ``[B, N]`` a sample's log-probability (Box), or ``Σ_a π log π`` (Discrete).
        target_entropy: a float, or ``[B, N]`` per row.
        alive: ``[B, N]`` bool: rows of absent agents do not count.
        count: ``[N]`` the denominators of the means (:func:`masked_agent_mean`), or ``None``.

    Returns:
        A scalar.

    Example:
        >>> import torch
        >>> log_alpha = torch.zeros(1, requires_grad=True)
        >>> temperature_loss(log_alpha, torch.tensor([[1.0]]), -2.0, torch.ones(1, 1, dtype=torch.bool)).backward()
        >>> log_alpha.grad  # the entropy -1 is above the target -2: a descent step lowers alpha
        tensor([1.])
    """
    gap = (log_prob + target_entropy).detach()
    return masked_agent_mean(-log_alpha * gap, alive, count).sum()


_REQUIRED_KEYS = ("obs", "state", "actions", "rewards", "next_obs", "next_state", "terminated", "alive", "next_alive")


@dataclass(frozen=True)
class _Spaces:
    """The sizes an algorithm was built for, and the action space's bounds."""

    num_agents: int
    obs_dims: tuple[int, ...]
    state_dim: int
    discrete: bool
    action_size: int
    center: torch.Tensor | None
    half_range: torch.Tensor | None

    @property
    def width(self) -> int | None:
        """Every agent's observation width where they share one, else None."""
        return self.obs_dims[0] if len(set(self.obs_dims)) == 1 else None


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _obs_dims(num_agents: int, obs_dim: Any) -> tuple[int, ...]:
    """Each agent's observation width, from one width for all (an int) or one per agent (a sequence)."""
    if _positive_int(obs_dim):
        return (obs_dim,) * num_agents
    if isinstance(obs_dim, Sequence) and len(obs_dim) == num_agents and all(_positive_int(d) for d in obs_dim):
        return tuple(obs_dim)
    raise ValueError(
        f"obs_dim={obs_dim!r} must be a positive int (every agent's width) or {num_agents} positive ints (each "
        "agent's own width, in agent order)"
    )


def _spaces(num_agents: Any, obs_dim: Any, state_dim: Any, action_space: Any) -> _Spaces:
    for name, value in (("num_agents", num_agents), ("state_dim", state_dim)):
        if not _positive_int(value):
            raise ValueError(f"{name}={value!r} must be a positive int")
    obs_dims = _obs_dims(num_agents, obs_dim)
    if isinstance(action_space, gymnasium.spaces.Discrete):
        return _Spaces(num_agents, obs_dims, state_dim, True, int(action_space.n), None, None)
    if not isinstance(action_space, gymnasium.spaces.Box):
        raise TypeError(
            f"action_space must be a gymnasium Discrete or Box space, got {type(action_space).__name__}; "
            "MultiDiscrete actions are not supported by SAC here (flatten them into one Discrete space)"
        )
    low, high = np.asarray(action_space.low, np.float64), np.asarray(action_space.high, np.float64)
    if low.ndim != 1 or not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ValueError(
            f"action_space {action_space} must be a one-dimensional Box with finite bounds: the squashed actions "
            "are rescaled to them (clip or rescale an unbounded space first)"
        )
    center = torch.as_tensor((high + low) / 2, dtype=torch.float32)
    half = torch.as_tensor((high - low) / 2, dtype=torch.float32)
    return _Spaces(num_agents, obs_dims, state_dim, False, low.shape[0], center, half)


def _expect_shape(batch: Mapping[str, torch.Tensor], key: str, shapes: Sequence[tuple[int, ...]]) -> torch.Tensor:
    value = batch[key]
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"batch[{key!r}] must be a torch.Tensor, got {type(value).__name__}")
    if tuple(value.shape) not in [tuple(s) for s in shapes]:
        expected = " or ".join(str(list(s)) for s in shapes)
        raise ValueError(f"batch[{key!r}] has shape {list(value.shape)}; expected {expected} (see the batch layout)")
    return value


def _read_batch(batch: Mapping[str, torch.Tensor], spaces: _Spaces) -> dict[str, torch.Tensor]:
    """The batch's tensors, shape-checked, with bool masks and the optional keys filled in."""
    missing = [key for key in _REQUIRED_KEYS if key not in batch]
    if missing:
        raise ValueError(f"the batch lacks {missing}; it needs {list(_REQUIRED_KEYS)} (see the batch layout)")
    b = batch["obs"].shape[0] if isinstance(batch["obs"], torch.Tensor) else 0
    n, a = spaces.num_agents, spaces.action_size
    action_shape = (b, n) if spaces.discrete else (b, n, a)
    obs_shapes = [(b, sum(spaces.obs_dims))]
    if spaces.width is not None:
        obs_shapes.insert(0, (b, n, spaces.width))
    shapes = {
        "obs": obs_shapes,
        "next_obs": obs_shapes,
        "state": [(b, spaces.state_dim)],
        "next_state": [(b, spaces.state_dim)],
        "actions": [action_shape],
        "rewards": [(b, n)],
        "terminated": [(b,), (b, n)],
        "truncated": [(b,), (b, n)],
        "alive": [(b, n)],
        "next_alive": [(b, n)],
        "next_acting": [(b, n)],
        "masks": [(b, n, a)],
        "next_masks": [(b, n, a)],
    }
    out = {key: _expect_shape(batch, key, shapes[key]) for key in shapes if key in batch}
    out["obs"], out["next_obs"] = _actor_input(out["obs"], spaces), _actor_input(out["next_obs"], spaces)
    for key in ("terminated", "alive", "next_alive", "next_acting", "masks", "next_masks"):
        if key in out:
            out[key] = out[key].bool()
    if spaces.discrete:
        out["actions"] = out["actions"].long()
    return out


def _actor_input(obs: torch.Tensor, spaces: _Spaces) -> torch.Tensor:
    """Shape-checked observations in the layout the actor reads: ``[B, N, F]`` where every agent's width is F
    (:class:`~marljoint.offpolicy.sac_networks.OffPolicyActor`), else ``[B, ΣF]``
    (:class:`~marljoint.offpolicy.sac_networks.GroupedActor`)."""
    if spaces.width is None:
        return obs
    return obs.reshape(obs.shape[0], spaces.num_agents, spaces.width)


def _check_act_obs(obs: Any, spaces: _Spaces) -> None:
    """Refuses observations :meth:`SacAlgorithm.act` and :meth:`SacAlgorithm.features` cannot read."""
    if not isinstance(obs, torch.Tensor):
        raise TypeError(f"obs must be a torch.Tensor, got {type(obs).__name__}")
    shapes = [(sum(spaces.obs_dims),)] + ([] if spaces.width is None else [(spaces.num_agents, spaces.width)])
    if obs.dim() < 2 or tuple(obs.shape[1:]) not in shapes:
        expected = " or ".join(str(["E", *s]) for s in shapes)
        raise ValueError(
            f"obs of shape {list(obs.shape)} do not fit agents of observation widths {list(spaces.obs_dims)}: "
            f"expected {expected} (each agent's own flat observation, concatenated in agent order, unpadded)"
        )


def _check_act_masks(masks: Any, obs: torch.Tensor, spaces: _Spaces) -> None:
    """Refuses action masks :meth:`SacAlgorithm.act` cannot apply."""
    if not spaces.discrete:
        raise ValueError("a Box action space takes no action mask; pass masks=None for continuous actions")
    if not isinstance(masks, torch.Tensor) or masks.dtype != torch.bool:
        what = masks.dtype if isinstance(masks, torch.Tensor) else type(masks).__name__
        raise TypeError(f"masks must be a bool tensor (True = legal), got {what}; pass masks.bool()")
    expected = (obs.shape[0], spaces.num_agents, spaces.action_size)
    if tuple(masks.shape) != expected:
        raise ValueError(
            f"masks of shape {list(masks.shape)} do not match the observations: expected {list(expected)} "
            "(one entry per action of each agent)"
        )


def _own_slot_eye(num_agents: int, like: torch.Tensor) -> torch.Tensor:
    """``[N, N, 1]``: 1 where the member (first axis) is the agent whose action slot it is (second axis)."""
    return torch.eye(num_agents, dtype=like.dtype, device=like.device).unsqueeze(-1)


def _critic_input(state: torch.Tensor, encoded: torch.Tensor) -> torch.Tensor:
    """``[B, N, S + N k]``: the global state and the N agents' encoded actions, per critic member.

    Args:
        state: ``[B, S]``.
        encoded: ``[B, N, k]`` (the same joint action for every member) or ``[B, N, N, k]`` (member, slot, k).
    """
    batch, n = encoded.shape[:2]
    if encoded.dim() == 3:
        encoded = encoded.unsqueeze(1).expand(batch, n, n, encoded.shape[-1])
    return torch.cat([state.unsqueeze(1).expand(batch, n, state.shape[-1]), encoded.flatten(2)], dim=-1)


def _with_own_actions(encoded: torch.Tensor, own: torch.Tensor | None) -> torch.Tensor:
    """``[B, N, N, k]``: member i sees the joint action ``encoded`` with its own slot replaced by ``own[:, i]``
    (its fresh action), or zeroed where ``own`` is None (the discrete SAC critic, which outputs every own action)."""
    eye = _own_slot_eye(encoded.shape[1], encoded)
    others = encoded.unsqueeze(1) * (1.0 - eye)
    return others if own is None else others + own.unsqueeze(1) * eye


def _actor_kind(variant: str, discrete: bool) -> str:
    if discrete:
        return "categorical"
    return "gaussian" if variant == "masac" else "deterministic"


def _frozen_copy(module: nn.Module) -> nn.Module:
    """A target network: a copy of ``module`` that no optimiser sees and no loss differentiates."""
    target = copy.deepcopy(module)
    target.requires_grad_(False)
    return target


class SacAlgorithm(nn.Module):
    """MASAC or MADDPG for the N agents of one action space, with a centralised critic per agent.

    Each agent (or, with ``share_parameters``, all agents together) has an actor on its own observation and
    critics on the global state and all agents' actions (one-hot for Discrete, rescaled to ``[-1, 1]`` for Box).
    ``masac`` keeps twin critics and their Polyak targets and a learned temperature per agent; ``maddpg`` keeps
    one critic, a target critic and target actors. The batch layout is in the module's docstring.

    Args:
        config: the settings.
        num_agents: N.
        obs_dim: the flat observation width: one int for all agents, or each agent's own (N ints, in agent
            order). Agents of one width share a stacked actor; agents whose widths differ get one stacked actor per
            width (:class:`~marljoint.offpolicy.sac_networks.GroupedActor`), reading their own unpadded
            observations.
        state_dim: the global state size.
        action_space: every agent's action space: ``gymnasium.spaces.Box`` (one-dimensional, finite bounds) or
            ``gymnasium.spaces.Discrete``.
        seed: seeds the initial weights and the sampling noise of :meth:`loss`.

    Raises:
        TypeError: for a config that is not a :class:`SacConfig`, or an unsupported action space.
        ValueError: for non-positive sizes, ``obs_dim`` of another length than ``num_agents``, or an unbounded
            Box.

    Example:
        >>> import gymnasium, torch
        >>> algo = SacAlgorithm(SacConfig(), num_agents=2, obs_dim=3, state_dim=6,
        ...                     action_space=gymnasium.spaces.Box(-2.0, 2.0, (1,)))
        >>> algo.act(torch.zeros(5, 2, 3), explore=True, generator=torch.Generator().manual_seed(0)).shape
        torch.Size([5, 2, 1])
        >>> mixed = SacAlgorithm(SacConfig(), num_agents=2, obs_dim=(3, 7), state_dim=10,
        ...                      action_space=gymnasium.spaces.Discrete(4))
        >>> mixed.act(torch.zeros(5, 10), explore=False).shape
        torch.Size([5, 2])
        >>> [name for name, _ in algo.networks()]
        ['actor', 'critic', 'temperature']
    """

    def __init__(
        self,
        config: SacConfig,
        *,
        num_agents: int,
        obs_dim: int | Sequence[int],
        state_dim: int,
        action_space: gymnasium.spaces.Space,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if not isinstance(config, SacConfig):
            raise TypeError(f"config must be a SacConfig, got {type(config).__name__}")
        self.config = config
        self.spaces = spaces = _spaces(num_agents, obs_dim, state_dim, action_space)
        init_seed, noise_seed = np.random.SeedSequence(seed).generate_state(2)
        init = torch.Generator().manual_seed(int(init_seed))
        self.generator = torch.Generator().manual_seed(int(noise_seed))
        self.masac = config.variant == "masac"
        self.discrete_sac = spaces.discrete and self.masac
        kind = _actor_kind(config.variant, spaces.discrete)
        share = config.share_parameters
        self.actor = build_actor(kind, spaces.obs_dims, spaces.action_size, config.hidden_sizes, share, generator=init)
        critic_in = state_dim + num_agents * spaces.action_size
        critic_out = spaces.action_size if self.discrete_sac else 1
        twins = 2 if self.masac else 1
        self.critic = CentralCritic(
            num_agents, critic_in, critic_out, config.critic_hidden_sizes, twins, share, generator=init
        )
        self.target_critic = _frozen_copy(self.critic)
        self.target_actor = None if self.masac else _frozen_copy(self.actor)
        self.temperature = Temperature(num_agents, config.init_alpha) if self.masac else None
        if self.temperature is not None and not config.autotune_alpha:
            self.temperature.requires_grad_(False)
        # Buffers, so that .to(device) moves the Box's bounds with the networks.
        self.register_buffer("action_center", spaces.center, persistent=False)
        self.register_buffer("action_half_range", spaces.half_range, persistent=False)
        self.loss_calls = 0

    def networks(self) -> list[tuple[str, nn.Module]]:
        """The trained networks, each to be clipped and stepped on its own: actor, critic and (with a learned
        temperature) temperature. Every parameter's first axis is the member (agent) axis."""
        nets: list[tuple[str, nn.Module]] = [("actor", self.actor), ("critic", self.critic)]
        if self.temperature is not None and self.config.autotune_alpha:
            nets.append(("temperature", self.temperature))
        return nets

    def learning_rates(self) -> dict[str, float]:
        """The learning rate of each of :meth:`networks`, by name."""
        rates = {"actor": self.config.actor_lr, "critic": self.config.critic_lr, "temperature": self.config.alpha_lr}
        return {name: rates[name] for name, _ in self.networks()}

    def alpha(self) -> torch.Tensor:
        """``[N]`` the current temperatures (zeros for ``maddpg``), without gradient."""
        if self.temperature is None:
            return torch.zeros(self.spaces.num_agents, device=self.critic.head.bias.device)
        return self.temperature().detach()

    def features(self, obs: torch.Tensor) -> list[torch.Tensor]:
        """The actors' encoder features, the input of cross-agent auxiliary losses (e.g. ``RedundancyPenalty``).

        Args:
            obs: ``[B, ΣF]`` (or ``[B, N, F]``), as the batch's ``obs``.

        Returns:
            per agent, ``[B, d]``.
        """
        _check_act_obs(obs, self.spaces)
        return list(self.actor.features(_actor_input(obs, self.spaces)).unbind(1))

    def get_extra_state(self) -> dict[str, Any]:
        return {"loss_calls": self.loss_calls, "generator": self.generator.get_state()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.loss_calls = int(state["loss_calls"])
        self.generator.set_state(state["generator"])

    @torch.no_grad()
    def act(
        self,
        obs: torch.Tensor,
        masks: torch.Tensor | None = None,
        *,
        explore: bool,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """The agents' actions.

        Args:
            obs: ``[E, ΣF]`` (or ``[E, N, F]``), as the batch's ``obs``.
            masks: ``[E, N, A]`` bool legal actions (Discrete), or ``None``: all legal. A row that allows nothing
                counts every action legal (:func:`~marljoint.policies.distributions.legal_actions`).
            explore: sample (True), or act greedily (False: the mean action, or the most likely legal one).
            generator: the source of the exploration noise; required when ``explore``.

        Returns:
            ``[E, N]`` long (Discrete) or ``[E, N, D]`` float within the Box's bounds.

        Raises:
            TypeError: ``explore=True`` without a ``torch.Generator``; obs or masks that are not (bool) tensors.
            ValueError: obs of another shape than the batch's ``obs`` (e.g. padded to the largest width), masks
                for Box actions, or masks of another shape than ``[E, N, A]``.
        """
        if explore and not isinstance(generator, torch.Generator):
            raise TypeError(
                f"act(explore=True) needs a torch.Generator, got {type(generator).__name__}; marljoint never draws "
                "from torch's global generator. Pass e.g. generator=torch.Generator().manual_seed(seed)."
            )
        _check_act_obs(obs, self.spaces)
        if masks is not None:
            _check_act_masks(masks, obs, self.spaces)
        head, _ = self.actor(_actor_input(obs, self.spaces))
        if self.spaces.discrete:
            if explore:
                return gumbel_softmax_straight_through(head, masks, generator).argmax(-1)
            return masked_log_softmax(head, masks).argmax(-1)
        return self._box_action(head, explore, generator)

    def _box_action(self, head: torch.Tensor, explore: bool, generator: torch.Generator | None) -> torch.Tensor:
        """``[E, N, D]`` actions in the Box's bounds from the actor's head."""
        d = self.spaces.action_size
        if self.masac:
            mean, log_std = head.split(d, dim=-1)
            pre_tanh = mean + log_std.exp() * self._normal(mean, generator) if explore else mean
            unit = torch.tanh(pre_tanh)
        else:
            unit = torch.tanh(head)
            if explore:
                unit = (unit + self.config.exploration_noise * self._normal(unit, generator)).clamp(-1.0, 1.0)
        return self.action_center + self.action_half_range * unit

    @staticmethod
    def _normal(like: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        # Drawn where the generator lives (a CPU generator can drive networks on another device).
        return torch.randn(like.shape, generator=generator, dtype=like.dtype, device=generator.device).to(like.device)

    def _encode(self, actions: torch.Tensor) -> torch.Tensor:
        """``[B, N, k]`` the critics' view of buffer actions: one-hot (Discrete) or rescaled to ``[-1, 1]`` (Box)."""
        if self.spaces.discrete:
            return F.one_hot(actions, self.spaces.action_size).float()
        return ((actions - self.action_center) / self.action_half_range).clamp(-1.0, 1.0)

    def _policy(
        self, head: torch.Tensor, masks: torch.Tensor | None, share: BatchShare | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A fresh encoded action ``[B, N, k]`` (differentiable) and its log-probability ``[B, N]`` (``masac``
        Box), or the log-probabilities ``[B, N, A]`` (``masac`` Discrete; the action is a sample's one-hot);
        ``maddpg`` gives no log-probability. With ``share`` (this rank's rows of a global batch), the noise is
        drawn for the whole batch and these rows take theirs, as in one process."""
        if share is not None:
            rows = head.shape[0]
            action, log_prob = self._policy(share.padded(head), share.padded(masks, True))
            return share.mine(action, rows), share.mine(log_prob, rows)
        if self.discrete_sac:
            log_probs = masked_log_softmax(head, masks)
            sample = gumbel_softmax_straight_through(head, masks, self.generator).detach()
            return sample, log_probs
        if self.spaces.discrete:
            return gumbel_softmax_straight_through(head, masks, self.generator, self.config.gumbel_temperature), None
        if not self.masac:
            return torch.tanh(head), None
        mean, log_std = head.split(self.spaces.action_size, dim=-1)
        pre_tanh = mean + log_std.exp() * self._normal(mean, self.generator)
        log_prob = squashed_gaussian_log_prob(pre_tanh, mean, log_std, self.action_half_range)
        return torch.tanh(pre_tanh), log_prob

    def _target_entropy(self, masks: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | float:
        """The entropy target: the configured value, ``−D`` (Box), or a fraction of ``log(legal actions)``."""
        if self.config.target_entropy is not None:
            return float(self.config.target_entropy)
        if not self.spaces.discrete:
            return -float(self.spaces.action_size)
        if masks is None:
            return self.config.target_entropy_fraction * math.log(self.spaces.action_size)
        legal = legal_actions(masks).sum(-1)
        return self.config.target_entropy_fraction * legal.to(like.dtype).log()

    @torch.no_grad()
    def _next_value(self, b: dict[str, torch.Tensor], share: BatchShare | None = None) -> torch.Tensor:
        """``[B, N]`` the soft (``masac``) or plain (``maddpg``) value of the next step, from the target critics."""
        actor = self.actor if self.target_actor is None else self.target_actor
        head, _ = actor(b["next_obs"])
        next_masks = b.get("next_masks")
        encoded, log_prob = self._policy(head, next_masks, share)
        # As in the critics' training input, only the agents deciding there have an action in the next state.
        encoded = encoded * b.get("next_acting", b["next_alive"]).unsqueeze(-1)
        if self.discrete_sac:
            q = self.target_critic(_critic_input(b["next_state"], _with_own_actions(encoded, None)))
            return discrete_soft_value(q.amin(1), log_prob, self.alpha(), next_masks)
        q = self.target_critic(_critic_input(b["next_state"], encoded))[..., 0].amin(1)
        return q if log_prob is None else q - self.alpha() * log_prob

    def _critic_loss(
        self, b: dict[str, torch.Tensor], target: torch.Tensor, count: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, dict[str, float]]:
        """The critics' squared TD error, summed over agents and twins (each a mean over the agent's alive rows),
        the encoded buffer actions ``[B, N, k]``, the discrete SAC form's per-action values ``[B, N, A]`` (minimum
        over twins, detached, for the actor loss; None otherwise) and statistics."""
        encoded = self._encode(b["actions"]) * b["alive"].unsqueeze(-1)
        if self.discrete_sac:
            q_all = self.critic(_critic_input(b["state"], _with_own_actions(encoded, None)))  # [B, twins, N, A]
            own_values = q_all.detach().amin(1)
            index = b["actions"].unsqueeze(1).unsqueeze(-1).expand(-1, q_all.shape[1], -1, 1)
            q = q_all.gather(-1, index)[..., 0]
        else:
            own_values = None
            q = self.critic(_critic_input(b["state"], encoded))[..., 0]  # [B, twins, N]
        squared = (q - target.unsqueeze(1)).square()
        per_agent = torch.stack([masked_agent_mean(twin, b["alive"], count) for twin in squared.unbind(1)]).sum(0)
        with torch.no_grad():
            q_mean = masked_agent_mean(q.amin(1), b["alive"], count).tolist()
        stats = {"critic_loss": per_agent.sum().item()}
        stats.update({f"q/{i}": value for i, value in enumerate(q_mean)})
        return per_agent.sum(), encoded, own_values, stats

    def _q_of_fresh_actions(self, b: dict[str, torch.Tensor], encoded: torch.Tensor, own: torch.Tensor):
        """``[B, N]``: agent i's critic (its minimum over twins) on the buffer's joint action with agent i's own
        action replaced by its fresh one. The critic's parameters are detached: the actor loss trains the actor."""
        params = {name: p.detach() for name, p in self.critic.named_parameters()}
        critic_input = _critic_input(b["state"], _with_own_actions(encoded, own * b["alive"].unsqueeze(-1)))
        return functional_call(self.critic, params, (critic_input,))[..., 0].amin(1)

    def _actor_loss(
        self,
        b: dict[str, torch.Tensor],
        encoded: torch.Tensor,
        own_values: torch.Tensor | None,
        share: BatchShare | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, float]]:
        """The actors' loss, the temperatures' loss, the encoder features ``[B, N, d]`` and statistics."""
        head, features = self.actor(b["obs"])
        masks, alive, alpha = b.get("masks"), b["alive"], self.alpha()
        count = None if share is None else share.counts
        fresh, log_prob = self._policy(head, masks, share)
        if self.discrete_sac:
            probs, safe = _legal_probs(log_prob, masks)
            per_row = (probs * (alpha[:, None] * safe - own_values)).sum(-1)
            log_prob = (probs * safe).sum(-1)  # −entropy: the temperature loss's exact expectation
        else:
            q = self._q_of_fresh_actions(b, encoded, fresh)
            per_row = -q if log_prob is None else alpha * log_prob - q
        actor_loss = masked_agent_mean(per_row, alive, count).sum()
        alpha_loss = actor_loss.new_zeros(())
        stats = {"actor_loss": actor_loss.item()}
        if self.masac:
            entropy = masked_agent_mean(-log_prob.detach(), alive, count).tolist()
            stats.update({f"entropy/{i}": value for i, value in enumerate(entropy)})
            stats.update({f"alpha/{i}": value for i, value in enumerate(alpha.tolist())})
            if self.config.autotune_alpha:
                target = self._target_entropy(masks, log_prob)
                alpha_loss = temperature_loss(self.temperature.log_alpha, log_prob, target, alive, count)
        stats["alpha_loss"] = alpha_loss.item()
        return actor_loss, alpha_loss, features, stats

    def loss(
        self,
        batch: Mapping[str, torch.Tensor],
        aux_fn: Callable[..., AuxOutput | torch.Tensor] | None = None,
        share: BatchShare | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The joint loss of one batch: critics + actors + temperatures (+ the auxiliary loss), for ONE backward.

        The actors and temperatures take part on every ``actor_update_interval``-th call; their networks then get
        no gradient (``grad`` stays ``None``), and an optimiser that skips parameters without gradient leaves them
        untouched.

        Args:
            batch: the tensors of the module docstring's layout.
            aux_fn: a cross-agent auxiliary loss (e.g. ``RedundancyPenalty``) called with the actors' features
                (per agent ``[B, d]``) and ``alive`` ``[B, N]``; its loss is added to the joint loss.
            share: on data-parallel ranks, how this batch sits in the global batch
                (:class:`~marljoint.offpolicy.sharded.BatchShare`): every mean is the global batch's, so the ranks'
                losses sum to the one-process loss, and ``aux_fn`` sees every rank's rows; ``None``: one process.

        Returns:
            ``(joint_loss, stats)``: a scalar tensor, and floats ``critic_loss``, ``actor_loss``, ``alpha_loss``,
            ``aux_loss``, ``total_loss``, ``actor_updated`` (1 or 0), ``q/<i>``, and for ``masac`` ``alpha/<i>``
            and ``entropy/<i>`` (on actor updates), plus the auxiliary loss's metrics.

        Raises:
            ValueError: a batch key is missing or has the wrong shape (the message names the key and both shapes).
            TypeError: a batch entry is not a tensor.
        """
        b = _read_batch(batch, self.spaces)
        update_actor = self.loss_calls % self.config.actor_update_interval == 0
        self.loss_calls += 1
        next_value = self._next_value(b, share)
        target = soft_td_target(b["rewards"], b["terminated"], b["next_alive"], next_value, self.config.gamma)
        total, encoded, own_values, stats = self._critic_loss(b, target, None if share is None else share.counts)
        features = None
        if update_actor:
            actor_loss, alpha_loss, features, actor_stats = self._actor_loss(b, encoded, own_values, share)
            total = total + actor_loss + alpha_loss
            stats.update(actor_stats)
        stats["actor_updated"] = float(update_actor)
        stats["aux_loss"] = 0.0
        if aux_fn is not None:
            features = self.actor.features(b["obs"]) if features is None else features
            alive = b["alive"]
            if share is not None:  # every row's features and presence, this rank's rows keeping their gradient
                both = share.gathered(torch.cat([features, alive.unsqueeze(-1).to(features.dtype)], -1))
                features, alive = both[..., :-1], both[..., -1] > 0.5
            aux = aux_fn(list(features.unbind(1)), alive)
            aux_loss, metrics = (aux.loss, aux.metrics) if isinstance(aux, AuxOutput) else (aux, {})
            total = total + aux_loss
            stats["aux_loss"] = float(aux_loss.detach())
            stats.update(metrics)
        stats["total_loss"] = float(total.detach())
        return total, stats

    @torch.no_grad()
    def update_targets(self) -> None:
        """Polyak update of the target networks: ``target ← (1 − τ) target + τ online``."""
        pairs = [(self.target_critic, self.critic)]
        if self.target_actor is not None:
            pairs.append((self.target_actor, self.actor))
        for target, online in pairs:
            for target_param, param in zip(target.parameters(), online.parameters()):
                target_param.lerp_(param, self.config.tau)
