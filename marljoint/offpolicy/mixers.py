"""Mixers: the team value ``Q_tot`` from every agent's utility ``Q_i`` (VDN, QMIX)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["QmixMixer", "VdnMixer"]


class VdnMixer(nn.Module):
    """VDN: ``Q_tot = Σ_i present_i · Q_i`` (no parameters).

    Example:
        >>> VdnMixer()(torch.tensor([[1.0, 2.0]]), torch.tensor([[True, False]]), torch.zeros(1, 0))
        tensor([1.])
    """

    def forward(self, utilities: torch.Tensor, present: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """The team value.

        Args:
            utilities: ``[B, N]`` each agent's utility of its action.
            present: ``[B, N]`` bool, the agent counts on the row (absent agents add nothing).
            state: ``[B, S]`` the global state (unused).

        Returns:
            ``[B]``.
        """
        return (utilities * present).sum(-1)


class QmixMixer(nn.Module):
    """QMIX: a two-layer mixing network whose weights, produced by hypernetworks from the global state, are
    non-negative, so ``∂Q_tot/∂Q_i ≥ 0`` for every agent and the greedy joint action is each agent's greedy action.

    ``Q_tot = w₂(s)ᵀ · elu(W₁(s)ᵀ u + b₁(s)) + V(s)`` with ``W₁ = |hyper₁(s)|``, ``w₂ = |hyper₂(s)|``, where ``u`` is
    the utilities with absent agents' set to 0.

    Args:
        num_agents: N.
        state_size: S, the global state's size.
        embed_dim: the mixing network's hidden width.
        hypernet_hidden: hidden width of the weight hypernetworks.
        generator: source of the initial weights.
    """

    def __init__(
        self,
        num_agents: int,
        state_size: int,
        embed_dim: int = 32,
        hypernet_hidden: int = 64,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.num_agents, self.embed_dim = num_agents, embed_dim

        def hyper(out: int) -> nn.Sequential:
            return nn.Sequential(nn.Linear(state_size, hypernet_hidden), nn.ReLU(), nn.Linear(hypernet_hidden, out))

        self.hyper_w1 = hyper(num_agents * embed_dim)
        self.hyper_w2 = hyper(embed_dim)
        self.hyper_b1 = nn.Linear(state_size, embed_dim)
        self.value = hyper(1)
        if generator is not None:  # the run's own generator, never torch's global one
            with torch.no_grad():
                for module in self.modules():
                    if isinstance(module, nn.Linear):
                        bound = 1.0 / module.in_features**0.5
                        module.weight.uniform_(-bound, bound, generator=generator)
                        module.bias.uniform_(-bound, bound, generator=generator)

    def forward(self, utilities: torch.Tensor, present: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """The team value.

        Args:
            utilities: ``[B, N]`` each agent's utility of its action.
            present: ``[B, N]`` bool, the agent counts on the row (absent agents' utilities enter as 0).
            state: ``[B, S]`` the global state.

        Returns:
            ``[B]``.
        """
        batch = utilities.shape[0]
        u = (utilities * present).unsqueeze(1)  # [B, 1, N]
        w1 = self.hyper_w1(state).abs().view(batch, self.num_agents, self.embed_dim)
        hidden = F.elu(torch.bmm(u, w1).squeeze(1) + self.hyper_b1(state))  # [B, H]
        w2 = self.hyper_w2(state).abs()  # [B, H]
        return (hidden * w2).sum(-1) + self.value(state).squeeze(-1)
