"""The team reward's scale in the TD target: a fixed factor, or ``"auto"``, one over the running standard deviation
of the team rewards stored so far."""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["MIN_REWARD_STD", "RewardScale"]

MIN_REWARD_STD = 1e-8
"""Below this standard deviation (no transitions yet, or every team reward alike) ``"auto"`` scales by 1."""


class RewardScale:
    """The factor on the team reward in the TD target.

    With a number, that number. With ``"auto"``, ``1 / std`` of every team reward observed so far (all the
    transitions stored in the replay buffer since the start, the overwritten ones included), kept as exact running
    moments in float64 (Chan et al.'s parallel update) so the same transitions give the same factor, bit for bit.
    The statistics keep running rather than freezing after a warm-up: the first transitions come from a random
    policy and may hold no reward at all (sparse rewards), while a running estimate sees the rewards a learning
    policy reaches; after n transitions one more moves it by O(1/n), so late TD targets hardly move.

    Args:
        setting: a positive factor, or ``"auto"``.

    Example:
        >>> scale = RewardScale("auto")
        >>> scale.observe(torch.tensor([1.0, 3.0]))
        >>> scale.factor
        1.0
        >>> scale.observe(torch.tensor([5.0, 7.0]))
        >>> round(scale.factor, 6)  # the population std of [1, 3, 5, 7] is sqrt(5)
        0.447214
    """

    def __init__(self, setting: float | str) -> None:
        self.auto = setting == "auto"
        self.fixed = 1.0 if self.auto else float(setting)
        self.count = 0
        self.mean = 0.0
        self.sum_squares = 0.0

    @property
    def std(self) -> float:
        """The population standard deviation of the team rewards observed (0 before any)."""
        return math.sqrt(self.sum_squares / self.count) if self.count else 0.0

    @property
    def factor(self) -> float:
        """The factor the TD target multiplies the team reward by."""
        if not self.auto:
            return self.fixed
        return 1.0 / self.std if self.std > MIN_REWARD_STD else 1.0

    def observe(self, team_rewards: torch.Tensor) -> None:
        """Adds stored transitions' team rewards to the running moments (no effect with a fixed factor).

        Args:
            team_rewards: ``[B]`` the team rewards of the transitions just stored.
        """
        if not self.auto or team_rewards.numel() == 0:
            return
        values = team_rewards.detach().to(torch.float64).flatten()
        n = values.numel()
        batch_mean = float(values.mean())
        batch_squares = float(((values - batch_mean) ** 2).sum())
        total = self.count + n
        delta = batch_mean - self.mean
        self.sum_squares += batch_squares + delta * delta * self.count * n / total
        self.mean += delta * n / total
        self.count = total

    def state_dict(self) -> dict[str, Any]:
        """The running moments (plain numbers)."""
        return {"count": self.count, "mean": self.mean, "sum_squares": self.sum_squares}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output."""
        self.count, self.mean = int(state["count"]), float(state["mean"])
        self.sum_squares = float(state["sum_squares"])
