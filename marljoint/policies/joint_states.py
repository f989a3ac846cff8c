"""The recurrent states of a :class:`~marljoint.policies.JointPolicy`'s agent groups: per group, the states
``[B, n_g, S_g]`` its networks carry between steps, how they start, reset and advance, and what
:meth:`~marljoint.policies.JointPolicy.act` remembers between calls."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from marljoint.env.base import JointObs, JointStep
from marljoint.env.spaces import JointSpec
from marljoint.policies.actor_critic import PolicyOutput

__all__ = ["GroupStates"]


class GroupStates:
    """The recurrent-state layout of a joint policy's groups, read once from its networks, and the states
    :meth:`~marljoint.policies.JointPolicy.act` carries between calls.

    A :class:`~marljoint.policies.JointPolicy` holds one as its ``group_states``.

    Args:
        spec: the env's agents and groups.
        networks: the policy's networks (a network without a ``core`` attribute is feed-forward).
        groups: per network, the index into ``spec.groups`` of the agents it serves.
    """

    def __init__(self, spec: JointSpec, networks: Sequence[Any], groups: Sequence[int]) -> None:
        self.spec = spec
        self.network_groups = list(groups)
        self.network_recurrent = [getattr(network, "core", None) is not None for network in networks]
        """Per network, whether it has a recurrent core."""
        self.recurrent = any(self.network_recurrent)
        """Whether some network has a recurrent core (then every forward takes the agents' states)."""
        self._sizes: list[set[int]] = [set() for _ in spec.groups]
        for network, group in zip(networks, self.network_groups):
            self._sizes[group].add(int(getattr(network, "state_size", 0)))
        # What act() remembers between calls for a recurrent policy: the states and alive flags after its last call.
        self._acting: tuple[tuple[torch.Tensor, ...], np.ndarray] | None = None

    def sizes(self) -> tuple[int, ...]:
        """Per group, S_g, the size of one agent's recurrent state (0 for feed-forward groups).

        Raises:
            ValueError: if the networks of one group have different state sizes.
        """
        for g, found in enumerate(self._sizes):
            if len(found) > 1:
                raise ValueError(
                    f"the networks of agents {list(self.spec.groups[g].agents)} have recurrent states of sizes "
                    f"{sorted(found)}; one group's networks need one state size"
                )
        return tuple(next(iter(found)) for found in self._sizes)

    def initial(self, batch: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
        """Per group, the zero states ``[batch, n_g, S_g]`` of an episode's start."""
        return tuple(
            torch.zeros(batch, group.size, size, device=device) for group, size in zip(self.spec.groups, self.sizes())
        )

    def stepped(self, outputs: Sequence[PolicyOutput]) -> tuple[torch.Tensor, ...] | None:
        """Per group, the states after a step ``[B, n_g, S_g]`` from the networks' outputs (``None`` for a
        feed-forward policy)."""
        if not self.recurrent:
            return None
        parts: list[list[torch.Tensor]] = [[] for _ in self.spec.groups]
        for out, group in zip(outputs, self.network_groups):
            state = out.state if out.state is not None else out.values.new_zeros((*out.values.shape, 0))
            parts[group].append(state)
        return tuple(torch.cat(p, dim=1) if len(p) > 1 else p[0] for p in parts)

    def reset(self, states: Sequence[torch.Tensor], fresh: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``states`` (per group ``[B, n_g, S_g]``) with the agents set in ``fresh`` (``[B, N]`` bool) zeroed."""
        fresh = fresh.to(device=states[0].device, dtype=torch.bool)
        return tuple(
            torch.where(fresh[:, list(g.agent_indices)].unsqueeze(-1), torch.zeros_like(h), h)
            for g, h in zip(self.spec.groups, states)
        )

    def advance(
        self, states: Sequence[torch.Tensor], outputs: Sequence[PolicyOutput], advance: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """The states after a step: the networks' output states for the agents set in ``advance`` (``[B, N]``
        bool: they decided at this step), ``states`` for the others (absent, or waiting)."""
        stepped = self.stepped(outputs)
        assert stepped is not None
        advance = advance.to(device=states[0].device, dtype=torch.bool)
        return tuple(
            torch.where(advance[:, list(g.agent_indices)].unsqueeze(-1), new, old)
            for g, new, old in zip(self.spec.groups, stepped, states)
        )

    def acting(self, obs: JointObs, device: torch.device) -> tuple[torch.Tensor, ...] | None:
        """The states :meth:`~marljoint.policies.JointPolicy.act` acts from on ``obs`` (``None`` for a
        feed-forward policy): fresh ones for a :class:`~marljoint.env.JointObs` (a reset), else those remembered
        after the last call, reset where a copy's episode restarted or an agent appeared."""
        if not self.recurrent:
            return None
        copies = len(obs.alive)
        remembered = self._acting
        if not isinstance(obs, JointStep) or remembered is None or len(remembered[1]) != copies:
            return self.initial(copies, device)
        hidden, alive_before = remembered
        return self.reset(hidden, torch.from_numpy(obs.alive & (obs.reset_envs[:, None] | ~alive_before)))

    def remember(
        self, states: Sequence[torch.Tensor], outputs: Sequence[PolicyOutput], advance: torch.Tensor, alive: Any
    ) -> None:
        """Keeps the states after an :meth:`~marljoint.policies.JointPolicy.act` step (:meth:`advance`) and the
        ``[E, N]`` alive flags it acted on, for the next call."""
        self._acting = (self.advance(states, outputs, advance), np.array(alive, dtype=bool))
