"""Exploration of value methods: ε-greedy or Boltzmann actions over the legal actions, with schedules, drawn from
each env copy's own generator (so a copy's actions do not depend on which copies share its batch or process)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from marljoint.offpolicy.functional import masked_max

__all__ = ["explore", "linear_schedule"]


def linear_schedule(start: float, end: float, steps: int, t: int) -> float:
    """A value falling (or rising) linearly from ``start`` at ``t = 0`` to ``end`` at ``t = steps``, then ``end``.

    Example:
        >>> linear_schedule(1.0, 0.0, 10, 5), linear_schedule(1.0, 0.0, 10, 50)
        (0.5, 0.0)
    """
    if steps <= 0 or t >= steps:
        return float(end)
    return float(start + (end - start) * t / steps)


def explore(
    q: torch.Tensor,
    mask: torch.Tensor | None,
    mode: str,
    value: float,
    generators: Sequence[torch.Generator],
) -> torch.Tensor:
    """Actions of one agent group in every env copy.

    Args:
        q: ``[E, n, A]`` utilities.
        mask: ``[E, n, A]`` bool legal actions, or ``None``.
        mode: ``"greedy"``, ``"epsilon"`` (a uniformly random legal action with probability ``value``) or
            ``"boltzmann"`` (a legal action drawn from ``softmax(q / value)``; ``value`` 0 is greedy).
        value: ε or the temperature.
        generators: one CPU generator per env copy (row e draws from ``generators[e]``).

    Returns:
        ``[E, n]`` int64 actions on ``q``'s device.
    """
    greedy = masked_max(q, mask)[1]
    if mode == "greedy" or value == 0.0:
        return greedy
    copies, n, width = q.shape
    # Each copy draws its own noise in a fixed order, whatever the other copies do.
    noise = torch.stack([torch.rand((n, width + 1), generator=g) for g in generators[:copies]]).to(q.device)
    legal = torch.ones_like(q, dtype=torch.bool) if mask is None else mask | ~mask.any(-1, keepdim=True)
    if mode == "boltzmann":
        logits = (q / value).masked_fill(~legal, torch.finfo(q.dtype).min)
        gumbel = -torch.log(-torch.log(noise[..., :width].clamp(min=torch.finfo(torch.float32).tiny)))
        return masked_max(logits + gumbel, legal)[1]
    # A uniformly random legal action: the legal one with the largest noise.
    random_action = masked_max(noise[..., :width], legal)[1]
    return torch.where(noise[..., width] < value, random_action, greedy)
