"""The recurrent-state bookkeeping of a :class:`~marljoint.policies.JointPolicy`: per agent group, the states
``[B, n_g, S_g]`` its networks carry between steps, and how they start, reset and advance."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from marljoint.env.spaces import JointSpec
from marljoint.policies.actor_critic import ActorCritic, PolicyOutput

__all__ = ["GroupStates"]


class GroupStates:
    """The per-group recurrent states of a joint policy (mixed into :class:`~marljoint.policies.JointPolicy`,
    whose ``spec``, ``networks``, ``slots``, ``device`` and ``network_obs`` it reads)."""

    spec: JointSpec
    networks: list[ActorCritic]
    slots: list[Any]
    device: torch.device

    if TYPE_CHECKING:

        def network_obs(self, k: int, group_obs: Sequence[torch.Tensor]) -> torch.Tensor: ...

    @property
    def recurrent(self) -> bool:
        """Whether some network has a recurrent core (then every forward takes the agents' states)."""
        return any(getattr(network, "core", None) is not None for network in self.networks)

    def state_sizes(self) -> tuple[int, ...]:
        """Per group, S_g, the size of one agent's recurrent state (0 for feed-forward groups).

        Raises:
            ValueError: if the networks of one group have different state sizes.
        """
        sizes: list[set[int]] = [set() for _ in self.spec.groups]
        for network, slot in zip(self.networks, self.slots):
            sizes[slot.group].add(int(getattr(network, "state_size", 0)))
        for g, found in enumerate(sizes):
            if len(found) > 1:
                raise ValueError(
                    f"the networks of agents {list(self.spec.groups[g].agents)} have recurrent states of sizes "
                    f"{sorted(found)}; one group's networks need one state size"
                )
        return tuple(found.pop() for found in sizes)

    def initial_states(self, batch: int) -> tuple[torch.Tensor, ...]:
        """Per group, the zero states ``[batch, n_g, S_g]`` of an episode's start."""
        return tuple(
            torch.zeros(batch, group.size, size, device=self.device)
            for group, size in zip(self.spec.groups, self.state_sizes())
        )

    def network_state(self, k: int, states: Sequence[torch.Tensor] | None) -> torch.Tensor | None:
        """Network ``k``'s states ``[B, n_k, S]`` from the per-group states (``None`` for a feed-forward one)."""
        if states is None or getattr(self.networks[k], "core", None) is None:
            return None
        return self.network_obs(k, states)

    def group_states(self, outputs: Sequence[PolicyOutput]) -> tuple[torch.Tensor, ...] | None:
        """Per group, the states after a step ``[B, n_g, S_g]`` from :meth:`forward` outputs (``None`` for a
        feed-forward policy)."""
        if not self.recurrent:
            return None
        parts: list[list[torch.Tensor]] = [[] for _ in self.spec.groups]
        for out, slot in zip(outputs, self.slots):
            state = out.state if out.state is not None else out.values.new_zeros((*out.values.shape, 0))
            parts[slot.group].append(state)
        return tuple(torch.cat(p, dim=1) if len(p) > 1 else p[0] for p in parts)

    def reset_states(self, states: Sequence[torch.Tensor], fresh: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``states`` (per group ``[B, n_g, S_g]``) with the agents set in ``fresh`` (``[B, N]`` bool) zeroed."""
        fresh = fresh.to(device=states[0].device, dtype=torch.bool)
        return tuple(
            torch.where(fresh[:, list(g.agent_indices)].unsqueeze(-1), torch.zeros_like(h), h)
            for g, h in zip(self.spec.groups, states)
        )

    def advance_states(
        self, states: Sequence[torch.Tensor], outputs: Sequence[PolicyOutput], advance: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """The states after a step: the :meth:`forward` outputs' states for the agents set in ``advance``
        (``[B, N]`` bool: they decided at this step), ``states`` for the others (absent, or waiting)."""
        stepped = self.group_states(outputs)
        assert stepped is not None
        advance = advance.to(device=states[0].device, dtype=torch.bool)
        return tuple(
            torch.where(advance[:, list(g.agent_indices)].unsqueeze(-1), new, old)
            for g, new, old in zip(self.spec.groups, stepped, states)
        )
