"""Many frozen feed-forward agent policies of one seat, evaluated as ONE batched computation.

A PSRO population grows by one member per seat every iteration, and its opponents play a mixture over all of
them: in a step, the rows of one seat belong to as many members as the mixture has in its support. Acting member by
member costs a whole network call (a dozen torch operations, each with its fixed dispatch cost) per member in use,
which late in a run is a third of the time of a best-response iteration. :class:`PolicyStack` copies each member's
weights (its own slot of its group network) into stacked tensors ``[K, in, out]``; acting gathers every row's
member's weights and runs each layer as one batched product, so a step costs the same few operations whatever the
number of members.

The computation is the members' own: the same observation normaliser, layers, activation, action head and
distribution. A shared network's agent one-hot, a constant input, is folded into its first layer's bias. Results
agree with :meth:`AgentPolicy.step <marljoint.policies.AgentPolicy.step>` to float32 rounding; the sampling noise
is drawn once for all rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from marljoint.policies.agent_policy import AgentPolicy
from marljoint.policies.distributions import ActionDistribution, make_distribution

__all__ = ["PolicyStack"]


class PolicyStack:
    """Frozen feed-forward policies of one seat acting together, each row with its own member.

    Args:
        policies: the members, :class:`~marljoint.policies.AgentPolicy` of plain MLP networks (flat
            observations, no CNN, no recurrent core) with the same observation size, layer sizes, activation,
            action layout and normaliser use (see :meth:`stackable`). The weights are copied: later changes to
            the policies do not reach the stack.

    Raises:
        ValueError: an empty list, or policies that do not stack (the message names the first that differs).

    Example:
        >>> import numpy as np, torch
        >>> from marljoint.env.spaces import ActionLayout, ObservationLayout
        >>> from marljoint.policies import ActorCritic, AgentPolicy
        >>> obs = ObservationLayout("flat", (4,), np.dtype(np.float32))
        >>> nets = [ActorCritic(obs, ActionLayout("discrete", (3,), ()), 2, False,
        ...                     generator=torch.Generator().manual_seed(k)) for k in range(3)]
        >>> stack = PolicyStack([AgentPolicy(net, 1) for net in nets])
        >>> stack.act(torch.tensor([0, 2, 2, 1]), torch.zeros(4, 4), torch.Generator().manual_seed(0)).shape
        torch.Size([4])
    """

    def __init__(self, policies: Sequence[AgentPolicy]) -> None:
        if not policies:
            raise ValueError("PolicyStack needs at least one policy")
        first = self.signature(policies[0])
        for k, policy in enumerate(policies):
            signature = self.signature(policy)
            if signature is None or signature != first:
                raise ValueError(
                    f"policy {k} ({type(policy).__name__}) does not stack with policy 0: the members must be "
                    "AgentPolicy of plain MLP networks on one device with the same sizes, activation, action layout "
                    "and observation normalisation (check with PolicyStack.stackable)"
                )
        self.size = len(policies)
        network = policies[0].network
        self.device = next(network.parameters()).device
        """Where the stacked weights live and the rows are computed (the members' device)."""
        self.action = network.action
        self.activation = network.encoder.activation
        rows = [(policy.network, policy.network.member_of_agent(policy.slot), policy.slot) for policy in policies]
        with torch.no_grad():
            self.weights, self.biases = self._stack_layers(rows)
            head_w = torch.stack([net.actor_head.weight[m] for net, m, _ in rows])
            head_b = torch.stack([net.actor_head.bias[m] for net, m, _ in rows])
            self.weights.append(head_w)
            self.biases.append(head_b)
            self.log_std = None if network.log_std is None else torch.stack([net.log_std[m] for net, m, _ in rows])
            self.norm: tuple[torch.Tensor, torch.Tensor, float] | None = None
            if network.obs_normalizer is not None:
                norms = [net.obs_normalizer for net, _, _ in rows]
                mean = torch.stack([n.mean[m] for n, (_, m, _) in zip(norms, rows)]).float()
                scale = torch.stack([(n.var[m] + n.eps).rsqrt() for n, (_, m, _) in zip(norms, rows)]).float()
                self.norm = (mean, scale, norms[0].clip)

    @staticmethod
    def signature(policy: object) -> tuple | None:
        """What must agree for two policies to stack: their action layout, observation size, layer sizes,
        activation, normaliser use, parameter sharing and device; ``None`` for a policy that cannot be stacked (not
        an :class:`~marljoint.policies.AgentPolicy`, or a CNN or recurrent network)."""
        if not isinstance(policy, AgentPolicy):
            return None
        network = policy.network
        if network.cnn is not None or network.core is not None or network.observation.kind != "flat":
            return None
        device = next(network.parameters()).device
        layers = tuple(tuple(layer.weight.shape[1:]) for layer in network.encoder.layers)
        normalised = network.obs_normalizer is not None
        return (
            network.action,
            network.observation.size,
            layers,
            network.encoder.activation,
            normalised,
            network.share_parameters,
            device,
        )

    @staticmethod
    def stackable(policies: Sequence[object]) -> bool:
        """Whether ``policies`` (two or more) can form one :class:`PolicyStack`."""
        if len(policies) < 2:
            return False
        first = PolicyStack.signature(policies[0])
        return first is not None and all(PolicyStack.signature(policy) == first for policy in policies[1:])

    @staticmethod
    def largest(policies: Sequence[object]) -> tuple[PolicyStack | None, np.ndarray]:
        """A stack of the largest set of ``policies`` that stack together (a population whose first member is
        a uniform or tabular policy and the rest one run's networks, say).

        Returns:
            ``(stack, position)``: the stack (``None`` when no two policies stack) and ``[len(policies)]`` int64,
            each policy's index in the stack or -1 for one outside it.
        """
        groups: dict[tuple, list[int]] = {}
        for index, policy in enumerate(policies):
            signature = PolicyStack.signature(policy)
            if signature is not None:
                groups.setdefault(signature, []).append(index)
        chosen = max(groups.values(), key=len, default=[])
        position = np.full(len(policies), -1, dtype=np.int64)
        if len(chosen) < 2:
            return None, position
        position[chosen] = np.arange(len(chosen))
        return PolicyStack([policies[index] for index in chosen]), position  # type: ignore[misc]

    @staticmethod
    def _stack_layers(rows: list[tuple]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per encoder layer, the members' ``[K, in, out]`` weights and ``[K, out]`` biases, with a shared
        network's agent one-hot folded into the first layer's bias."""
        weights, biases = [], []
        for index in range(len(rows[0][0].encoder.layers)):
            w, b = [], []
            for network, member, slot in rows:
                layer = network.encoder.layers[index]
                weight, bias = layer.weight[member], layer.bias[member]
                if index == 0 and network.share_parameters:
                    size = network.observation.size
                    bias = bias + weight[size + slot]
                    weight = weight[:size]
                w.append(weight)
                b.append(bias)
            weights.append(torch.stack(w).contiguous())
            biases.append(torch.stack(b).contiguous())
        return weights, biases

    def distribution(
        self, members: torch.Tensor, obs: torch.Tensor, mask: torch.Tensor | None = None
    ) -> ActionDistribution:
        """The action distribution of each row under its own member, computed on :attr:`device` (inputs on another
        device are moved there).

        Args:
            members: ``[B]`` int64, each row's member (an index into the policies given).
            obs: ``[B, obs_size]`` observations.
            mask: ``[B, sum(nvec)]`` bool action mask, or ``None``.

        Returns:
            A distribution with batch shape ``[B]``.

        Raises:
            IndexError: a member index out of range.
        """
        members = torch.as_tensor(members, dtype=torch.int64)
        if members.numel() and (int(members.min()) < 0 or int(members.max()) >= self.size):
            raise IndexError(f"member indices {members.tolist()} out of range for a stack of {self.size}")
        members = members.to(self.device)
        mask = None if mask is None else mask.to(self.device)
        x = obs.reshape(len(obs), -1).to(self.device, torch.float32)
        if self.norm is not None:
            mean, scale, clip = self.norm
            x = ((x - mean[members]) * scale[members]).clamp(-clip, clip)
        x = x.unsqueeze(1)  # [B, 1, f]: row b is one member's batch of one
        last = len(self.weights) - 1
        for index, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            x = torch.baddbmm(bias[members].unsqueeze(1), x, weight[members])
            if index < last:
                x = self.activation(x)
        head = x.squeeze(1)
        log_std = None if self.log_std is None else self.log_std[members]
        return make_distribution(self.action, head, log_std, mask)

    @torch.no_grad()
    def act(
        self,
        members: torch.Tensor,
        obs: torch.Tensor,
        generator: torch.Generator,
        mask: torch.Tensor | None = None,
        deterministic: bool = False,
    ) -> torch.Tensor:
        """Each row's action under its own member: sampled from ``generator``, or the mode.

        Args:
            members: ``[B]`` int64 member indices.
            obs: ``[B, obs_size]``.
            generator: the sampling noise (one draw for all rows).
            mask: ``[B, sum(nvec)]`` bool action mask, or ``None``.
            deterministic: take the mode instead of sampling.

        Returns:
            ``[B, *action_shape]`` actions, on :attr:`device`.
        """
        dist = self.distribution(members, obs, mask)
        return dist.mode() if deterministic else dist.sample(generator)

    def __repr__(self) -> str:
        return f"PolicyStack(members={self.size}, action={self.action.kind})"
