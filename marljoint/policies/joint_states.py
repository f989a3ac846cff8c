"""The recurrent-state bookkeeping of a :class:`~marljoint.policies.JointPolicy`: per agent group, the states
``[B, n_g, S_g]`` its networks carry between steps, how they start, reset and advance, and the replay of a
rollout's sequence chunks through them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from marljoint.env.spaces import JointSpec
from marljoint.policies.actor_critic import ActorCritic, PolicyOutput

__all__ = ["GroupStates"]


class GroupStates:
    """The per-group recurrent states of a joint policy and the replay of its sequence chunks (mixed into
    :class:`~marljoint.policies.JointPolicy`, whose ``spec``, ``networks``, ``slots``, ``device``, ``network_obs``
    and ``critic_state`` it reads)."""

    spec: JointSpec
    networks: list[ActorCritic]
    slots: list[Any]
    device: torch.device

    if TYPE_CHECKING:

        def network_obs(self, k: int, group_obs: Sequence[torch.Tensor]) -> torch.Tensor: ...

        def critic_state(self, group_obs: Sequence[torch.Tensor], alive: torch.Tensor) -> torch.Tensor | None: ...

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

    def forward_sequence(
        self,
        group_obs: Sequence[torch.Tensor],
        alive: torch.Tensor,
        states: Sequence[torch.Tensor],
        starts: torch.Tensor,
        advance: torch.Tensor,
        *,
        replay: str = "cells",
    ) -> list[PolicyOutput]:
        """Replays sequence chunks of a recurrent policy (truncated BPTT); outputs flattened to ``L × B`` rows.

        Args:
            group_obs: per group, ``[L, B, n_g, *obs_shape]``.
            alive: ``[L, B, N]`` bool.
            states: per group, ``[B, n_g, S_g]``, the states before each chunk's first step.
            starts: ``[L, B, N]`` bool, the agent's state is reset before that step.
            advance: ``[L, B, N]`` bool, the agent's state advances through that step.
            replay: ``"cells"`` or ``"fused"``: how the recurrent cores replay the chunks
                (:meth:`~marljoint.policies.ActorCritic.forward_sequence`).

        Returns:
            One :class:`~marljoint.policies.PolicyOutput` per network with fields over ``L × B`` rows in
            ``(step, chunk)`` order (as ``[L, B]`` flattened), and the states after the chunks ``[B, n_k, S]``.
        """
        length, batch = alive.shape[:2]
        rows = length * batch
        flat_obs = [o.reshape(rows, *o.shape[2:]) for o in group_obs]
        critic_state = self.critic_state(flat_obs, alive.reshape(rows, -1))
        outputs = []
        for k, network in enumerate(self.networks):
            agents = list(self.slots[k].agents)
            obs = self.network_obs(k, flat_obs)
            critic_obs = None
            if critic_state is not None:
                critic_obs = critic_state.view(length, batch, 1, -1).expand(-1, -1, obs.shape[1], -1)
            out = network.forward_sequence(
                obs.reshape(length, batch, *obs.shape[1:]),
                self.network_state(k, states),
                starts[:, :, agents],
                advance[:, :, agents],
                critic_obs,
                replay=replay,
            )
            outputs.append(PolicyOutput(*(x.reshape(rows, *x.shape[2:]) for x in out[:3]), state=out.state))
        return outputs
