"""Running statistics: per-agent returns (value normalisation) and per-feature observations."""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["ObservationNormalizer", "RunningNormalizer"]


class RunningNormalizer:
    """Exact running mean and variance per agent (Chan et al.'s parallel merge), in float64.

    The critic predicts normalised values; :meth:`denormalize` maps them back for GAE, and the value loss compares
    predictions with :meth:`normalize` d returns. Frozen agents' statistics are left untouched.

    The variance is clamped from below at ``min_var`` (MAPPO's ValueNorm uses 1e-2): after a long run of
    identical returns (a sparse reward not found yet) the variance is 0, and a first new return ``x`` then
    normalises to at most ``|x − mean| / sqrt(min_var)`` (10 per unit of return at the default), not to
    ``|x − mean| / sqrt(eps)`` in the hundreds, which would blow the value loss up to tens of thousands.

    Example:
        >>> norm = RunningNormalizer(2)
        >>> norm.update(torch.tensor([[1.0, 10.0], [3.0, 30.0]]), torch.ones(2, 2, dtype=torch.bool))
        >>> norm.mean.tolist(), norm.var.tolist()
        ([2.0, 20.0], [1.0, 100.0])

    Args:
        num_agents: N.
        min_var: floor of the variance (> 0), in squared return units.
        device: where the statistics live (the trainer's device).

    Raises:
        ValueError: if ``min_var`` is not a positive finite number.
    """

    def __init__(self, num_agents: int, min_var: float = 1e-2, device: torch.device | str = "cpu") -> None:
        if not (isinstance(min_var, (int, float)) and math.isfinite(min_var) and min_var > 0):
            raise ValueError(f"min_var must be a positive finite number (MAPPO uses 1e-2), got {min_var!r}")
        self.device = torch.device(device)
        stats = {"dtype": torch.float64, "device": self.device}
        self.mean = torch.zeros(num_agents, **stats)
        self.var = torch.ones(num_agents, **stats)
        self.count = torch.zeros(num_agents, **stats)
        self.min_var = float(min_var)
        self._cast: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}

    def update(self, values: torch.Tensor, mask: torch.Tensor, active: torch.Tensor | None = None) -> None:
        """Merges a batch into the statistics.

        Args:
            values: ``[B, N]`` samples.
            mask: ``[B, N]`` bool, which samples count.
            active: ``[N]`` bool; agents set to False keep their statistics.
        """
        weights = mask.to(torch.float64)
        if active is not None:
            weights = weights * active.to(device=weights.device, dtype=torch.float64)
        x = values.to(torch.float64)
        n = weights.sum(0)
        batch_mean = (x * weights).sum(0) / n.clamp_min(1.0)
        batch_var = (((x - batch_mean) ** 2) * weights).sum(0) / n.clamp_min(1.0)
        total = self.count + n
        delta = batch_mean - self.mean
        has_data = n > 0
        new_mean = self.mean + delta * n / total.clamp_min(1.0)
        m2 = self.var * self.count + batch_var * n + delta**2 * self.count * n / total.clamp_min(1.0)
        new_var = m2 / total.clamp_min(1.0)
        first = self.count == 0
        new_var = torch.where(first, batch_var, new_var)
        self.mean = torch.where(has_data, new_mean, self.mean)
        self.var = torch.where(has_data, new_var, self.var)
        self.count = total
        self._cast.clear()

    @property
    def std(self) -> torch.Tensor:
        """``[N]`` standard deviation, ``sqrt(max(var, min_var))``."""
        return self.var.clamp_min(self.min_var).sqrt()

    def stats(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``[N]`` mean and std cast to ``dtype``, cached until the next update (denormalising runs every env
        step)."""
        if dtype not in self._cast:
            self._cast[dtype] = (self.mean.to(dtype), self.std.to(dtype))
        return self._cast[dtype]

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """``(x − mean) / std`` per agent; ``x`` is ``[..., N]``."""
        mean, std = self.stats(x.dtype)
        return (x - mean) / std

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        """``x · std + mean`` per agent; ``x`` is ``[..., N]``."""
        mean, std = self.stats(x.dtype)
        return x * std + mean

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The statistics, for checkpoints."""
        return {"mean": self.mean.clone(), "var": self.var.clone(), "count": self.count.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restores :meth:`state_dict` output (onto this normaliser's device)."""
        self.mean, self.var, self.count = (
            state[k].clone().to(device=self.device, dtype=torch.float64) for k in ("mean", "var", "count")
        )
        self._cast.clear()


class ObservationNormalizer(nn.Module):
    """Standardises observation features by running statistics: ``clip((x − mean) / sqrt(var + eps))``.

    There is one set of per-feature statistics per member of the owning network (M = 1 for a shared network,
    one per agent for stacked per-agent weights), so freezing one agent of a stacked group leaves its statistics,
    like its weights, untouched. The statistics are buffers (float64, exact parallel merge) of the owning network:
    they are saved in its ``state_dict``, copied with it to env workers and frozen policies, and loaded back with
    it. The learner calls :meth:`update` after each PPO update on that rollout's observations, so every rollout is
    collected, and then trained on, with one set of statistics: the PPO ratio starts at 1 up to float32 rounding
    (not exactly 1, since the acting forward, a numpy path or another batch shape, rounds differently from the
    update's). Before the first update the statistics are the identity (mean 0, variance 1).

    Example:
        >>> norm = ObservationNormalizer(2)
        >>> norm.update(torch.tensor([[[1.0, 10.0]], [[3.0, 30.0]]]), torch.ones(2, 1, dtype=torch.bool))
        >>> norm(torch.tensor([[[3.0, 30.0]]])).tolist()
        [[[1.0, 1.0]]]

    Args:
        size: F, the number of features of one observation.
        members: M, the number of independent statistics (the owning network's member axis).
        clip: bound of the standardised features (SB3's ``VecNormalize`` and CleanRL use 10).
        eps: added to the variance (a constant feature standardises to 0, not to a division by zero).

    Raises:
        ValueError: for a non-positive ``size``, ``members``, ``clip`` or ``eps``.
    """

    def __init__(self, size: int, members: int = 1, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        for name, count in (("size", size), ("members", members)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(f"{name} must be a positive int, got {count!r}")
        for name, value in (("clip", clip), ("eps", eps)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")
        self.size = size
        self.members = members
        self.clip = float(clip)
        self.eps = float(eps)
        self.register_buffer("mean", torch.zeros(members, size, dtype=torch.float64))
        self.register_buffer("var", torch.ones(members, size, dtype=torch.float64))
        self.register_buffer("count", torch.zeros(members, 1, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Standardises ``x`` ``[..., M, F]`` by each member's statistics.

        ``x``'s second-to-last axis is the member axis (size M), or any size when M = 1. The result has ``x``'s
        floating dtype (float32 for integer input).
        """
        dtype = x.dtype if x.is_floating_point() else torch.float32
        mean = self.mean.to(dtype)
        scale = (self.var + self.eps).rsqrt().to(dtype)
        return ((x.to(dtype) - mean) * scale).clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, x: torch.Tensor, weights: torch.Tensor) -> None:
        """Merges the rows of ``x`` ``[R, M, F]`` whose ``weights`` ``[R, M]`` (bool or 0/1) are set; a member
        without a set weight keeps its statistics exactly.

        Raises:
            ValueError: if ``x`` is not ``[R, M, F]`` or ``weights`` not ``[R, M]``.
        """
        expected = (self.members, self.size)
        if x.dim() != 3 or tuple(x.shape[1:]) != expected or weights.shape != x.shape[:2]:
            raise ValueError(
                f"update takes x [R, {self.members}, {self.size}] and weights [R, {self.members}]; got "
                f"{tuple(x.shape)} and {tuple(weights.shape)}"
            )
        w = weights.to(device=self.mean.device, dtype=torch.float64).unsqueeze(-1)  # [R, M, 1]
        n = w.sum(0)  # [M, 1]
        if not bool((n > 0).any()):
            return
        x = x.to(device=self.mean.device, dtype=torch.float64)
        safe_n = n.clamp_min(1.0)
        batch_mean = (x * w).sum(0) / safe_n
        batch_var = (((x - batch_mean) ** 2) * w).sum(0) / safe_n
        total = self.count + n
        safe_total = total.clamp_min(1.0)
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * n + delta**2 * self.count * n / safe_total
        has_data = n > 0
        self.mean.copy_(torch.where(has_data, self.mean + delta * n / safe_total, self.mean))
        self.var.copy_(torch.where(has_data, m2 / safe_total, self.var))
        self.count.copy_(total)

    def extra_repr(self) -> str:
        return f"size={self.size}, members={self.members}, clip={self.clip}"
