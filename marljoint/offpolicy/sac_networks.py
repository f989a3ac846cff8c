"""The networks and action maths of MASAC and MADDPG: actors, centralised critics, the temperature.

All networks hold their agents as stacked members (:mod:`marljoint.policies.layers`): one member per agent, or
one member for all agents with parameter sharing (the agent's one-hot index appended to its input). Every
parameter's first axis is the member axis, so per-agent gradient clipping
(:func:`~marljoint.policies.clip_member_grads_`) and per-agent optimiser steps apply to them as they are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from marljoint.policies.layers import StackedLinear, StackedMLP

__all__ = [
    "ACTOR_KINDS",
    "LOG_STD_MAX",
    "LOG_STD_MIN",
    "CentralCritic",
    "OffPolicyActor",
    "Temperature",
    "gumbel_softmax_straight_through",
    "masked_log_softmax",
    "squashed_gaussian_log_prob",
]

LOG_STD_MIN = -5.0
"""Smallest log standard deviation of a squashed Gaussian actor (the usual SAC range)."""

LOG_STD_MAX = 2.0
"""Largest log standard deviation of a squashed Gaussian actor."""

ACTOR_KINDS = ("gaussian", "categorical", "deterministic")

_LOG_2PI = math.log(2.0 * math.pi)


def masked_log_softmax(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Log-probabilities of a categorical over the legal actions; illegal ones get the dtype's most negative value.

    Args:
        logits: ``[..., A]``.
        mask: ``[..., A]`` bool, True where the action is legal; ``None``: all legal.

    Returns:
        ``[..., A]`` log-probabilities; their exponential is exactly 0 on illegal actions.

    Example:
        >>> import torch
        >>> logp = masked_log_softmax(torch.zeros(1, 3), torch.tensor([[True, False, True]]))
        >>> [round(p, 3) for p in logp.exp()[0].tolist()]
        [0.5, 0.0, 0.5]
    """
    if mask is None:
        return logits.log_softmax(-1)
    most_negative = torch.finfo(logits.dtype).min
    return logits.masked_fill(~mask, most_negative).log_softmax(-1).masked_fill(~mask, most_negative)


def squashed_gaussian_log_prob(
    pre_tanh: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor, half_range: torch.Tensor
) -> torch.Tensor:
    """Log-density of ``a = center + half_range · tanh(u)`` with ``u ~ N(mean, exp(log_std)²)``, per action.

    The change of variables: ``log π(a) = Σ_k [log N(u_k) − log half_range_k − log(1 − tanh(u_k)²)]``, with
    ``log(1 − tanh(u)²) = 2 (log 2 − u − softplus(−2u))`` (stable for large ``|u|``).

    Args:
        pre_tanh: ``[..., D]`` the Gaussian sample ``u``.
        mean: ``[..., D]``.
        log_std: ``[..., D]``.
        half_range: ``[D]`` ``(high − low) / 2`` of the action space.

    Returns:
        ``[...]`` the log-density of the squashed action (summed over the D dimensions).

    Example:
        >>> import torch
        >>> u = torch.zeros(1, 1)
        >>> round(squashed_gaussian_log_prob(u, u, u, torch.ones(1)).item(), 4)  # log N(0; 0, 1)
        -0.9189
    """
    gaussian = -0.5 * ((pre_tanh - mean) * torch.exp(-log_std)).square() - log_std - 0.5 * _LOG_2PI
    log_jacobian = 2.0 * (math.log(2.0) - pre_tanh - F.softplus(-2.0 * pre_tanh)) + half_range.log()
    return (gaussian - log_jacobian).sum(-1)


def gumbel_softmax_straight_through(
    logits: torch.Tensor,
    mask: torch.Tensor | None,
    generator: torch.Generator,
    temperature: float = 1.0,
) -> torch.Tensor:
    """A one-hot sample of a masked categorical whose gradient is that of the Gumbel-softmax relaxation.

    Forward: ``one_hot(argmax(log π + g))`` with Gumbel noise ``g`` (an exact sample of π). Backward: the gradient
    of ``softmax((log π + g) / temperature)`` (the straight-through estimator of MADDPG's discrete actions).

    Args:
        logits: ``[..., A]``.
        mask: ``[..., A]`` bool legal actions, or ``None``.
        generator: the source of the Gumbel noise.
        temperature: the relaxation temperature, > 0.

    Returns:
        ``[..., A]`` one-hot rows (exactly 0 or 1 in the forward pass).
    """
    uniform = torch.rand(logits.shape, generator=generator, dtype=logits.dtype, device=generator.device)
    uniform = uniform.to(logits.device)  # a CPU generator can drive networks on another device
    gumbel = -torch.log(-torch.log(uniform.clamp(min=torch.finfo(logits.dtype).tiny)))
    perturbed = masked_log_softmax(logits, mask) + gumbel
    soft = masked_log_softmax(perturbed / temperature, mask).exp()
    hard = F.one_hot(perturbed.argmax(-1), logits.shape[-1]).to(logits.dtype)
    return hard - soft.detach() + soft


def _agent_one_hot(batch: int, num_agents: int, like: torch.Tensor) -> torch.Tensor:
    """``[batch, N, N]``: each agent's one-hot index, the input that tells shared networks the agents apart."""
    eye = torch.eye(num_agents, dtype=like.dtype, device=like.device)
    return eye.expand(batch, num_agents, num_agents)


class OffPolicyActor(nn.Module):
    """The actors of N agents: an MLP encoder per agent (or one shared) and a linear head.

    ``kind="gaussian"``: the head gives a mean and a log standard deviation per action dimension (the squashed
    Gaussian of SAC for Box actions). ``"categorical"``: logits over the A actions. ``"deterministic"``: one
    pre-tanh value per action dimension (MADDPG's deterministic Box actor).

    Args:
        kind: one of :data:`ACTOR_KINDS`.
        num_agents: N.
        obs_dim: the flat observation size.
        action_size: D for Box actions, A for Discrete ones.
        hidden_sizes: the encoder's layer sizes; the features have ``hidden_sizes[-1]`` entries.
        share_parameters: one network for all agents (the agent's one-hot index appended to the observation).
        generator: source of the initial weights.
    """

    def __init__(
        self,
        kind: str,
        num_agents: int,
        obs_dim: int,
        action_size: int,
        hidden_sizes: Sequence[int],
        share_parameters: bool,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if kind not in ACTOR_KINDS:
            raise ValueError(f"kind={kind!r} is not an actor kind; use one of {ACTOR_KINDS}")
        self.kind = kind
        self.num_agents = num_agents
        self.share_parameters = share_parameters
        members = 1 if share_parameters else num_agents
        in_features = obs_dim + (num_agents if share_parameters else 0)
        self.encoder = StackedMLP(members, in_features, hidden_sizes, generator=generator)
        out = 2 * action_size if kind == "gaussian" else action_size
        self.head = StackedLinear(members, self.encoder.out_features, out, gain=0.01, generator=generator)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """The encoder's output.

        Args:
            obs: ``[B, N, obs_dim]``.

        Returns:
            ``[B, N, d]``.
        """
        if not self.share_parameters:
            return self.encoder(obs)
        batch = obs.shape[0]
        x = torch.cat([obs, _agent_one_hot(batch, self.num_agents, obs)], dim=-1)
        return self.encoder(x.reshape(batch * self.num_agents, 1, -1)).reshape(batch, self.num_agents, -1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The head's output and the features it read.

        Args:
            obs: ``[B, N, obs_dim]``.

        Returns:
            ``(head, features)``: ``head`` ``[B, N, L]`` (``L = 2D`` for a Gaussian: means then log standard
            deviations, the latter already bounded to ``[LOG_STD_MIN, LOG_STD_MAX]``), ``features`` ``[B, N, d]``.
        """
        features = self.features(obs)
        batch = features.shape[0]
        if self.share_parameters:
            head = self.head(features.reshape(batch * self.num_agents, 1, -1)).reshape(batch, self.num_agents, -1)
        else:
            head = self.head(features)
        if self.kind == "gaussian":
            mean, raw_log_std = head.chunk(2, dim=-1)
            # A tanh rescaling rather than a clamp keeps a gradient at the bounds.
            log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(raw_log_std) + 1.0)
            head = torch.cat([mean, log_std], dim=-1)
        return head, features


class CentralCritic(nn.Module):
    """Centralised Q critics: per agent, ``twins`` MLPs of the global state and all agents' (encoded) actions.

    Args:
        num_agents: N.
        input_size: the size of one agent's critic input (state size + N × encoded action size).
        output_size: 1 (a Q-value), or A (one Q-value per own action: the discrete SAC form).
        hidden_sizes: the MLP's layer sizes.
        twins: the number of independent critics per agent (2 for the clipped double-Q of SAC, 1 for MADDPG).
        share_parameters: one set of ``twins`` critics for all agents (the agent's one-hot index appended).
        generator: source of the initial weights.
    """

    def __init__(
        self,
        num_agents: int,
        input_size: int,
        output_size: int,
        hidden_sizes: Sequence[int],
        twins: int,
        share_parameters: bool,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.num_agents = num_agents
        self.twins = twins
        self.share_parameters = share_parameters
        members = twins * (1 if share_parameters else num_agents)
        in_features = input_size + (num_agents if share_parameters else 0)
        self.body = StackedMLP(members, in_features, hidden_sizes, generator=generator)
        self.head = StackedLinear(members, self.body.out_features, output_size, gain=1.0, generator=generator)

    def forward(self, critic_input: torch.Tensor) -> torch.Tensor:
        """Every critic on its agent's input.

        Args:
            critic_input: ``[B, N, input_size]``, agent i's row read by agent i's critics.

        Returns:
            ``[B, twins, N, output_size]``.
        """
        batch, n = critic_input.shape[:2]
        if self.share_parameters:
            x = torch.cat([critic_input, _agent_one_hot(batch, n, critic_input)], dim=-1)
            x = x.reshape(batch * n, 1, -1).expand(-1, self.twins, -1)
            q = self.head(self.body(x))  # [B * N, twins, out]
            return q.reshape(batch, n, self.twins, -1).transpose(1, 2)
        x = critic_input.unsqueeze(1).expand(-1, self.twins, -1, -1).reshape(batch, self.twins * n, -1)
        return self.head(self.body(x)).reshape(batch, self.twins, n, -1)


class Temperature(nn.Module):
    """The entropy temperatures ``α_i = exp(log_alpha[i])`` of the N agents.

    Args:
        num_agents: N.
        init_alpha: every agent's initial α, > 0.
    """

    def __init__(self, num_agents: int, init_alpha: float) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.full((num_agents,), math.log(init_alpha)))

    def forward(self) -> torch.Tensor:
        """``[N]`` the current temperatures."""
        return self.log_alpha.exp()
