"""One agent's policy, detached from its group network: the unit that populations, evaluation and exploitability use."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from marljoint.policies.actor_critic import ActorCritic
from marljoint.policies.distributions import ActionDistribution, make_distribution

__all__ = ["AgentPolicy"]


class AgentPolicy(nn.Module):
    """A frozen copy of the network that serves one agent, reading that agent's observations only.

    The group network may serve several agents (shared parameters with an agent one-hot, or stacked per-agent
    weights); this wrapper keeps a private copy of it and feeds the agent's observations into the agent's slot, so
    the copy behaves exactly like the agent did when it was taken.

    A recurrent network's policy (:attr:`recurrent`) acts from a state of :attr:`state_size` numbers per row, the
    actor core's: zeros (:meth:`initial_state`) at the start of the agent's episode, then what :meth:`step`
    returned at its previous decision, so that it carries its memory through an episode as the agent did in
    training (in turn-based games, from one of its own turns to the next). :meth:`act`, :meth:`distribution` and
    :meth:`action_probs` take that ``state`` too; a feed-forward policy takes none.

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

    @property
    def recurrent(self) -> bool:
        """Whether the policy acts from a state it carries through an episode."""
        return self.network.actor_state_size > 0

    @property
    def state_size(self) -> int:
        """S, the numbers of one row's state (0 when feed-forward)."""
        return self.network.actor_state_size

    def initial_state(self, batch: int) -> torch.Tensor:
        """``[batch, S]`` zeros: the state at the start of the agent's episode."""
        return torch.zeros(batch, self.state_size, device=self.network.agent_ids.device)

    def _place(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, ...]`` → ``[B, n_g, ...]`` with the agent's rows in its slot and zeros elsewhere."""
        out = x.new_zeros((x.shape[0], self.network.num_agents, *x.shape[1:]))
        out[:, self.slot] = x
        return out

    def _head(
        self, obs: torch.Tensor, mask: torch.Tensor | None, state: torch.Tensor | None
    ) -> tuple[ActionDistribution, torch.Tensor | None]:
        if self.recurrent and (state is None or tuple(state.shape) != (obs.shape[0], self.state_size)):
            got = "none" if state is None else f"shape {tuple(state.shape)}"
            raise ValueError(
                f"this policy is recurrent ({self.network.recurrent}): pass state [{obs.shape[0]}, {self.state_size}] "
                f"(initial_state(B) at an episode's start, then what step() returned), got {got}"
            )
        if not self.recurrent and state is not None:
            raise ValueError("state was given, but this policy is feed-forward; pass state=None")
        head, new_state = self.network.actor_step(self._place(obs), None if state is None else self._place(state))
        full_mask = None if mask is None else mask.unsqueeze(1)
        log_std = self.network.log_std
        if log_std is not None:  # a Box action: the agent's own member's standard deviations, [1, D]
            member = self.network.member_of_agent(self.slot)
            log_std = log_std[member : member + 1]
        head_rows = head[:, self.slot : self.slot + 1]
        dist = _SqueezedDistribution(make_distribution(self.network.action, head_rows, log_std, full_mask))
        return dist, None if new_state is None else new_state[:, self.slot]

    @torch.no_grad()
    def distribution(
        self, obs: torch.Tensor, mask: torch.Tensor | None = None, state: torch.Tensor | None = None
    ) -> ActionDistribution:
        """The action distribution for a batch of this agent's observations.

        Args:
            obs: ``[B, *obs_shape]``.
            mask: ``[B, sum(nvec)]`` bool action mask, or ``None``.
            state: ``[B, S]`` the states acted from (recurrent policies only).

        Returns:
            A distribution with batch shape ``[B]``.

        Raises:
            ValueError: for a recurrent policy without ``state`` (or of the wrong shape), or a feed-forward one
                with it.
        """
        return self._head(obs, mask, state)[0]

    @torch.no_grad()
    def act(
        self,
        obs: torch.Tensor,
        generator: torch.Generator,
        mask: torch.Tensor | None = None,
        deterministic: bool = False,
        state: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Samples (or takes the mode of) actions for ``[B, *obs_shape]`` observations (``state`` ``[B, S]`` for
        a recurrent policy; :meth:`step` also returns the next one).

        Returns:
            ``[B, *action_shape]`` actions.
        """
        return self.step(obs, generator, mask, deterministic, state)[0]

    @torch.no_grad()
    def step(
        self,
        obs: torch.Tensor,
        generator: torch.Generator,
        mask: torch.Tensor | None = None,
        deterministic: bool = False,
        state: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One decision: the actions and the state to act from at the agent's next decision.

        Args:
            obs: ``[B, *obs_shape]``.
            generator: the sampling noise.
            mask: ``[B, sum(nvec)]`` bool action mask, or ``None``.
            deterministic: take the mode instead of sampling.
            state: ``[B, S]`` (recurrent policies only).

        Returns:
            ``([B, *action_shape] actions, [B, S] next state, or None when feed-forward)``.
        """
        dist, new_state = self._head(obs, mask, state)
        return (dist.mode() if deterministic else dist.sample(generator)), new_state

    @torch.no_grad()
    def next_state(self, obs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """``[B, S]``: the state after deciding on ``obs`` from ``state`` (recurrent policies; the action taken
        does not enter it)."""
        if not self.recurrent:
            raise ValueError("next_state needs a recurrent policy; this one is feed-forward")
        new_state = self._head(obs, None, state)[1]
        assert new_state is not None
        return new_state

    @torch.no_grad()
    def action_probs(
        self, obs: torch.Tensor, mask: torch.Tensor | None = None, state: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """Per head, ``[B, n_k]`` action probabilities (categorical actions only; ``state`` ``[B, S]`` for a
        recurrent policy).

        Raises:
            ValueError: for a Box action space.
        """
        dist = self.distribution(obs, mask, state)
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
