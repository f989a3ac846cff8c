"""The networks of MASAC and MADDPG: actors, centralised critics, the temperature.

Their action maths (masked log-softmax, Gumbel-softmax straight-through, the squashed Gaussian's density) is the
action distributions' module's, :mod:`marljoint.policies.distributions`; the names are importable from here too.

All networks hold their agents as stacked members (:mod:`marljoint.policies.layers`): one member per agent, or
one member for all agents with parameter sharing (the agent's one-hot index appended to its input). Every
parameter's first axis is the member axis, so per-agent gradient clipping
(:func:`~marljoint.policies.clip_member_grads_`) and per-agent optimiser steps apply to them as they are. Agents
whose observation widths differ have one stacked actor per width (:class:`GroupedActor`): its parameters are one
set per width (:func:`member_parameter_sets`), each with its own member axis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from marljoint.policies.distributions import (
    gumbel_softmax_straight_through,
    masked_log_softmax,
    squashed_gaussian_log_prob,
)
from marljoint.policies.layers import StackedLinear, StackedMLP

__all__ = [
    "ACTOR_KINDS",
    "LOG_STD_MAX",
    "LOG_STD_MIN",
    "CentralCritic",
    "GroupedActor",
    "OffPolicyActor",
    "Temperature",
    "build_actor",
    "gumbel_softmax_straight_through",
    "masked_log_softmax",
    "member_parameter_sets",
    "squashed_gaussian_log_prob",
]

LOG_STD_MIN = -5.0
"""Smallest log standard deviation of a squashed Gaussian actor (the usual SAC range)."""

LOG_STD_MAX = 2.0
"""Largest log standard deviation of a squashed Gaussian actor."""

ACTOR_KINDS = ("gaussian", "categorical", "deterministic")


def _agent_one_hot(batch: int, num_agents: int, like: torch.Tensor) -> torch.Tensor:
    """``[batch, N, N]``: each agent's one-hot index, the input that tells shared networks the agents apart."""
    eye = torch.eye(num_agents, dtype=like.dtype, device=like.device)
    return eye.expand(batch, num_agents, num_agents)


class OffPolicyActor(nn.Module):
    """The actors of N agents of one observation width: an MLP encoder per agent (or one shared) and a linear head.

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


class GroupedActor(nn.Module):
    """The actors of N agents whose observation widths differ: one :class:`OffPolicyActor` per width (the agents of
    that width, in agent order, its stacked members), each reading exactly its agents' observations.

    The input is every agent's flat observation concatenated in agent order (``[B, F_0 + … + F_{N-1}]``, no
    padding); the outputs are in agent order, as :class:`OffPolicyActor`'s. With ``share_parameters`` the agents
    of one width share one network (their one-hot index among that width's agents appended).

    Args:
        kind: one of :data:`ACTOR_KINDS`.
        obs_dims: each agent's flat observation width, in agent order.
        action_size: D for Box actions, A for Discrete ones (every agent's).
        hidden_sizes: the encoders' layer sizes; the features have ``hidden_sizes[-1]`` entries.
        share_parameters: one network per width instead of one per agent.
        generator: source of the initial weights (drawn width after width, in the order of their first agents).

    Example:
        >>> import torch
        >>> actor = GroupedActor("categorical", (3, 7, 3), 4, (8,), False, generator=torch.Generator())
        >>> [group.encoder.in_features for group in actor.groups], actor.agent_indices
        ([3, 7], ((0, 2), (1,)))
        >>> [x.shape for x in actor(torch.zeros(5, 13))]
        [torch.Size([5, 3, 4]), torch.Size([5, 3, 8])]
    """

    def __init__(
        self,
        kind: str,
        obs_dims: Sequence[int],
        action_size: int,
        hidden_sizes: Sequence[int],
        share_parameters: bool,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        widths = list(dict.fromkeys(obs_dims))
        self.agent_indices = tuple(tuple(i for i, d in enumerate(obs_dims) if d == w) for w in widths)
        self.groups = nn.ModuleList(
            OffPolicyActor(kind, len(agents), w, action_size, hidden_sizes, share_parameters, generator=generator)
            for w, agents in zip(widths, self.agent_indices)
        )
        starts = [sum(obs_dims[:i]) for i in range(len(obs_dims))]
        columns = [[starts[i] + k for i in agents for k in range(obs_dims[i])] for agents in self.agent_indices]
        order = torch.tensor([i for agents in self.agent_indices for i in agents])
        # Buffers, so that .to(device) moves the indices with the weights; not saved (the spaces define them).
        for g, cols in enumerate(columns):
            self.register_buffer(f"columns_{g}", torch.tensor(cols), persistent=False)
        self.register_buffer("agent_order", torch.argsort(order), persistent=False)

    def _in_agent_order(self, parts: list[torch.Tensor]) -> torch.Tensor:
        """Per group ``[B, n_g, k]`` → ``[B, N, k]``."""
        return torch.cat(parts, dim=1).index_select(1, self.agent_order)

    def _group_obs(self, obs: torch.Tensor) -> list[torch.Tensor]:
        """``[B, ΣF]`` → per group ``[B, n_g, F_g]``."""
        batch = obs.shape[0]
        return [
            obs.index_select(1, getattr(self, f"columns_{g}")).view(batch, len(agents), -1)
            for g, agents in enumerate(self.agent_indices)
        ]

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """The encoders' outputs.

        Args:
            obs: ``[B, ΣF]``, every agent's flat observation concatenated in agent order.

        Returns:
            ``[B, N, d]``.
        """
        return self._in_agent_order([g.features(x) for g, x in zip(self.groups, self._group_obs(obs))])

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The heads' outputs and the features they read, in agent order (:meth:`OffPolicyActor.forward`).

        Args:
            obs: ``[B, ΣF]``.

        Returns:
            ``(head, features)``: ``[B, N, L]`` and ``[B, N, d]``.
        """
        outputs = [g(x) for g, x in zip(self.groups, self._group_obs(obs))]
        return self._in_agent_order([h for h, _ in outputs]), self._in_agent_order([f for _, f in outputs])

    def member_parameter_sets(self) -> list[list[nn.Parameter]]:
        """Each width's parameters (each set's members are that width's agents, or one shared member)."""
        return [list(group.parameters()) for group in self.groups]


def build_actor(
    kind: str,
    obs_dims: Sequence[int],
    action_size: int,
    hidden_sizes: Sequence[int],
    share_parameters: bool,
    *,
    generator: torch.Generator | None = None,
) -> OffPolicyActor | GroupedActor:
    """The actors of agents of the given flat observation widths: one :class:`OffPolicyActor` (input
    ``[B, N, F]``) where every width is the same F, else a :class:`GroupedActor` (input ``[B, ΣF]``)."""
    if len(set(obs_dims)) == 1:
        n = len(obs_dims)
        return OffPolicyActor(kind, n, obs_dims[0], action_size, hidden_sizes, share_parameters, generator=generator)
    return GroupedActor(kind, obs_dims, action_size, hidden_sizes, share_parameters, generator=generator)


def member_parameter_sets(network: nn.Module) -> list[list[nn.Parameter]]:
    """The parameter sets of ``network`` that each share one member axis (each set is clipped per agent on its own,
    :func:`~marljoint.policies.clip_member_grads_`): a :class:`GroupedActor`'s one per width, any other network's
    parameters as one set."""
    if isinstance(network, GroupedActor):
        return network.member_parameter_sets()
    return [list(network.parameters())]


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

    Example:
        >>> [round(alpha, 6) for alpha in Temperature(2, init_alpha=0.2)().tolist()]
        [0.2, 0.2]
    """

    def __init__(self, num_agents: int, init_alpha: float) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.full((num_agents,), math.log(init_alpha)))

    def forward(self) -> torch.Tensor:
        """``[N]`` the current temperatures."""
        return self.log_alpha.exp()
