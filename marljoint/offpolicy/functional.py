"""The value-decomposition maths as pure functions of tensors: masked maxima, double-Q values, team rewards and
TD targets."""

from __future__ import annotations

import torch

from marljoint.policies.distributions import legal_actions

__all__ = [
    "decode_actions",
    "double_q_values",
    "encode_actions",
    "joint_action_mask",
    "masked_max",
    "td_targets",
    "team_rewards",
]


def _legal(mask: torch.Tensor | None, q: torch.Tensor) -> torch.Tensor | None:
    """The mask with all-forbidden rows allowed everywhere (rows without a decision: the adapter's contract), the
    rule of every masked distribution (:func:`~marljoint.policies.distributions.legal_actions`)."""
    if mask is None:
        return None
    return legal_actions(mask)


def masked_max(q: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The largest value over the legal actions and its action.

    Example:
        >>> masked_max(torch.tensor([[1.0, 5.0, 3.0]]), torch.tensor([[True, False, True]]))
        (tensor([3.]), tensor([2]))

    Args:
        q: ``[..., A]`` action values.
        mask: ``[..., A]`` bool (True = legal) or ``None``; a row with no legal action counts every action legal.

    Returns:
        ``(values [...], actions [...] int64)``; ties go to the lowest action.
    """
    legal = _legal(mask, q)
    if legal is not None:
        q = q.masked_fill(~legal, torch.finfo(q.dtype).min)
    values, actions = q.max(-1)
    return values, actions


def double_q_values(
    online_next: torch.Tensor, target_next: torch.Tensor, mask: torch.Tensor | None, double_q: bool = True
) -> torch.Tensor:
    """Each agent's bootstrap utility of the next state.

    Double-Q: the online networks choose the legal action, the target networks value it; otherwise the target
    networks' own legal maximum.

    Example:
        >>> online = torch.tensor([[0.0, 1.0]])
        >>> target = torch.tensor([[5.0, 2.0]])
        >>> double_q_values(online, target, None), double_q_values(online, target, None, double_q=False)
        (tensor([2.]), tensor([5.]))

    Args:
        online_next: ``[..., A]`` the online networks' values of the next observations.
        target_next: ``[..., A]`` the target networks' values of the same observations.
        mask: ``[..., A]`` bool, the legal actions of the next state (or ``None``).
        double_q: choose with the online networks.

    Returns:
        ``[...]``.
    """
    if not double_q:
        return masked_max(target_next, mask)[0]
    _, choice = masked_max(online_next, mask)
    return target_next.gather(-1, choice.unsqueeze(-1)).squeeze(-1)


def team_rewards(rewards: torch.Tensor, alive: torch.Tensor, reduce: str = "mean") -> torch.Tensor:
    """The team's reward of each joint step from the agents' rewards.

    Example:
        >>> team_rewards(torch.tensor([[1.0, 3.0, 0.0]]), torch.tensor([[True, True, False]]))
        tensor([2.])

    Args:
        rewards: ``[B, N]`` the agents' rewards of the step.
        alive: ``[B, N]`` bool, the agent was present at the step (a turn-based game's waiting players included).
        reduce: ``"mean"`` over the present agents, or ``"sum"``.

    Returns:
        ``[B]``.
    """
    total = (rewards * alive).sum(-1)
    if reduce == "sum":
        return total
    return total / alive.sum(-1).clamp(min=1)


def td_targets(rewards: torch.Tensor, continues: torch.Tensor, next_q_tot: torch.Tensor, gamma: float) -> torch.Tensor:
    """One-step TD targets ``y = r + γ · continues · Q_tot'(s')``.

    ``continues`` is False where the episode terminated for every agent (nothing to bootstrap); a truncated
    episode continues (its next state is the final observation before the reset).

    Example:
        >>> td_targets(torch.tensor([1.0, 1.0]), torch.tensor([True, False]), torch.tensor([10.0, 10.0]), 0.5)
        tensor([6., 1.])

    Args:
        rewards: ``[B]`` team rewards.
        continues: ``[B]`` bool, some agent is present in the next state.
        next_q_tot: ``[B]`` the target mixer's value of the next state.
        gamma: discount.

    Returns:
        ``[B]``, without gradient.
    """
    return (rewards + gamma * continues * next_q_tot).detach()


def joint_action_mask(mask: torch.Tensor, nvec: tuple[int, ...]) -> torch.Tensor:
    """Per-head masks ``[..., sum(nvec)]`` as the mask of the product space ``[..., prod(nvec)]``: a combination
    is legal when every head's choice is (a head with no legal choice counts all legal, as the adapter says).

    Example:
        >>> joint_action_mask(torch.tensor([True, False, True, True, False]), (2, 3)).tolist()
        [True, True, False, False, False, False]
    """
    if len(nvec) == 1:
        return mask
    joint = None
    for head in torch.split(mask, list(nvec), dim=-1):
        head = legal_actions(head)
        joint = head if joint is None else (joint.unsqueeze(-1) & head.unsqueeze(-2)).flatten(-2)
    return joint


def encode_actions(actions: torch.Tensor, nvec: tuple[int, ...]) -> torch.Tensor:
    """Factored actions ``[..., K]`` as indices of the product space ``[...]`` (the first head most significant);
    a Discrete action (``K = 1``) is its own index.

    Example:
        >>> encode_actions(torch.tensor([1, 2]), (2, 3))
        tensor(5)
    """
    index = torch.zeros(actions.shape[:-1], dtype=torch.int64)
    for k, size in enumerate(nvec):
        index = index * size + actions[..., k]
    return index


def decode_actions(index: torch.Tensor, nvec: tuple[int, ...]) -> torch.Tensor:
    """Indices of the product space ``[...]`` as factored actions ``[..., K]`` (inverse of :func:`encode_actions`).

    Example:
        >>> decode_actions(torch.tensor(5), (2, 3))
        tensor([1, 2])
    """
    heads = []
    for size in reversed(nvec):
        heads.append(index % size)
        index = torch.div(index, size, rounding_mode="floor")
    return torch.stack(heads[::-1], -1)
