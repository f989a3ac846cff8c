"""One agent's policy, detached from its group network: the unit that populations, evaluation and exploitability use."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from marljoint.policies.actor_critic import ActorCritic
from marljoint.policies.distributions import ActionDistribution

__all__ = ["AgentPolicy"]


class AgentPolicy(nn.Module):
    """A frozen copy of the network that serves one agent, reading that agent's observations only.

    The group network may serve several agents (shared parameters with an agent one-hot, or stacked per-agent
    weights); this wrapper keeps a private copy of it and feeds the agent's observations into the agent's slot, so
    the copy behaves exactly like the agent did when it was taken.

    Args:
        network: the group network (it is deep-copied, so later training does not change this policy).
        slot: the agent's position among the network's agents.

    Raises:
        ValueError: if ``slot`` is out of range.
    """

    def __init__(self, network: ActorCritic, slot: int) -> None:
        super().__init__()
        if not 0 <= slot < network.num_agents:
            raise ValueError(f"slot {slot} is out of range for a network serving {network.num_agents} agents")
        self.network = copy.deepcopy(network).eval()
        for p in self.network.parameters():
            p.requires_grad_(False)
        self.slot = int(slot)

    def _place(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, ...]`` → ``[B, n_g, ...]`` with the agent's rows in its slot and zeros elsewhere."""
        out = x.new_zeros((x.shape[0], self.network.num_agents, *x.shape[1:]))
        out[:, self.slot] = x
        return out

    @torch.no_grad()
    def distribution(self, obs: torch.Tensor, mask: torch.Tensor | None = None) -> ActionDistribution:
        """The action distribution for a batch of this agent's observations.

        Args:
            obs: ``[B, *obs_shape]``.
            mask: ``[B, sum(nvec)]`` bool action mask, or ``None``.

        Returns:
            A distribution with batch shape ``[B]``.
        """
        head = self.network.action_head(self._place(obs))[:, self.slot : self.slot + 1]
        full_mask = None if mask is None else mask.unsqueeze(1)
        return _SqueezedDistribution(self.network.distribution(head, full_mask))

    @torch.no_grad()
    def act(
        self,
        obs: torch.Tensor,
        generator: torch.Generator,
        mask: torch.Tensor | None = None,
        deterministic: bool = False,
    ) -> torch.Tensor:
        """Samples (or takes the mode of) actions for ``[B, *obs_shape]`` observations.

        Returns:
            ``[B, *action_shape]`` actions.
        """
        dist = self.distribution(obs, mask)
        return dist.mode() if deterministic else dist.sample(generator)

    @torch.no_grad()
    def action_probs(self, obs: torch.Tensor, mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Per head, ``[B, n_k]`` action probabilities (categorical actions only).

        Raises:
            ValueError: for a Box action space.
        """
        dist = self.distribution(obs, mask)
        if not hasattr(dist, "head_probs"):
            raise ValueError("action_probs needs categorical actions; this policy acts in a Box space")
        return list(dist.head_probs())


class _SqueezedDistribution:
    """Views a distribution with batch ``[B, 1]`` as batch ``[B]``."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def sample(self, generator: torch.Generator) -> torch.Tensor:
        return self._inner.sample(generator).squeeze(1)

    def mode(self) -> torch.Tensor:
        return self._inner.mode().squeeze(1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self._inner.log_prob(actions.unsqueeze(1)).squeeze(1)

    def entropy(self) -> torch.Tensor:
        return self._inner.entropy().squeeze(1)

    def head_probs(self) -> list[torch.Tensor]:
        if not hasattr(self._inner, "head_probs"):
            raise ValueError("action_probs needs categorical actions; this policy acts in a Box space")
        return [p.squeeze(1) for p in self._inner.head_probs()]
