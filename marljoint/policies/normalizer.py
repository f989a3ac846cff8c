"""Running per-agent statistics of returns, for value normalisation."""

from __future__ import annotations

import math

import torch

__all__ = ["RunningNormalizer"]


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
