"""Balanced work: env copies handed from slow workers to fast ones, by their measured speed.

A multi-process rollout lasts as long as its slowest worker: a worker on a busier core (beside the learner, another
job), or one whose copies happen to cost more, idles the others at the end of every rollout. A
:class:`WorkBalancer` watches how long each worker spends on its slice and, when giving each worker a share of the
copies proportional to its speed would shorten the slowest one's rollout by at least ``min_gain``, proposes the new
split. The collector then moves the copies (env state, noise generators, recurrent states) with its own exact
``state()`` / ``load_state()``.

Which worker holds a copy never changes the copy's stream (it is seeded and sampled by its global index, and the
policy evaluates it at its own row of an E-row batch), so balancing changes no result: the rollouts are the same
bits with any split, however the timings fall.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["WorkBalancer", "proportional_slices"]


def proportional_slices(num_envs: int, speeds: Sequence[float]) -> list[tuple[int, int]]:
    """Contiguous ``[start, stop)`` slices of ``num_envs`` copies, sized in proportion to ``speeds``.

    Example:
        >>> proportional_slices(16, [1.0, 3.0])
        [(0, 4), (4, 16)]

    Args:
        num_envs: E, the copies to hand out.
        speeds: ``[K]`` copies per second of each worker (> 0).

    Returns:
        One slice per worker, in order: the sizes are the largest-remainder rounding of
        ``E × speed / sum(speeds)``, with at least one copy each.

    Raises:
        ValueError: for fewer copies than workers, or a speed that is not positive and finite.
    """
    speed = np.asarray(speeds, dtype=np.float64)
    if speed.ndim != 1 or len(speed) < 1 or not np.all(np.isfinite(speed)) or np.any(speed <= 0):
        raise ValueError(f"every worker's speed must be positive and finite, got {list(speeds)}")
    workers = len(speed)
    if num_envs < workers:
        raise ValueError(f"{num_envs} env copies cannot be handed to {workers} workers (each needs one)")
    share = num_envs * speed / speed.sum()
    sizes = np.maximum(1, np.floor(share)).astype(np.int64)
    while sizes.sum() < num_envs:  # the largest remainders get the copies left
        sizes[int(np.argmax(share - sizes))] += 1
    while sizes.sum() > num_envs:  # a worker raised to one copy: the others give it back, least short first
        spare = np.where(sizes > 1, share - sizes, np.inf)
        sizes[int(np.argmin(spare))] -= 1
    stops = np.cumsum(sizes)
    return [(int(stop - size), int(stop)) for stop, size in zip(stops, sizes)]


class WorkBalancer:
    """Proposes a new split of the copies when the workers' measured speeds make it worth moving them.

    Each :meth:`observe` records one rollout: how many seconds each worker was busy on its slice. After ``window``
    rollouts with the same split, it compares the slowest worker's time per rollout with what the split
    proportional to the measured speeds would give (each worker's seconds per copy times its new number of
    copies); if that is shorter by at least ``min_gain``, it returns the new split, else it starts a new window.

    Args:
        slices: the current ``[start, stop)`` slice of each worker.
        window: rollouts measured before each decision (>= 1).
        min_gain: the fraction of the slowest worker's time a new split must save (moving copies costs one
            snapshot of them), in ``[0, 1)``.

    Attributes:
        slices: the split the balancer last proposed (or was given).
        moves: how many times it proposed a new split.

    Raises:
        ValueError: for empty or non-contiguous slices, ``window`` < 1 or ``min_gain`` outside ``[0, 1)``.
    """

    def __init__(self, slices: Sequence[tuple[int, int]], window: int = 4, min_gain: float = 0.1) -> None:
        self.slices = [(int(a), int(b)) for a, b in slices]
        if not self.slices or any(b <= a for a, b in self.slices) or any(
            self.slices[w][1] != self.slices[w + 1][0] for w in range(len(self.slices) - 1)
        ) or self.slices[0][0] != 0:
            raise ValueError(f"the slices must be contiguous non-empty [start, stop) ranges from 0, got {self.slices}")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be a positive integer, got {window!r}")
        if not 0.0 <= min_gain < 1.0:
            raise ValueError(f"min_gain must be in [0, 1), got {min_gain!r}")
        self.window = window
        self.min_gain = float(min_gain)
        self.moves = 0
        self._busy = np.zeros(len(self.slices))
        self._seen = 0

    @property
    def num_envs(self) -> int:
        """E, the copies split."""
        return self.slices[-1][1]

    def observe(self, busy_seconds: Sequence[float]) -> list[tuple[int, int]] | None:
        """Records one rollout's busy seconds per worker; returns the new split when it is worth moving copies.

        Args:
            busy_seconds: ``[K]`` the seconds each worker spent on its slice this rollout.

        Returns:
            The new slices (the caller moves the copies), or ``None`` to keep the current ones.

        Raises:
            ValueError: for a number of timings other than the number of workers.
        """
        busy = np.asarray(busy_seconds, dtype=np.float64)
        if busy.shape != self._busy.shape:
            raise ValueError(f"{len(self.slices)} workers, but {busy.size} busy times were given")
        self._busy += np.maximum(busy, 0.0)
        self._seen += 1
        if self._seen < self.window:
            return None
        total, self._busy, self._seen = self._busy, np.zeros_like(self._busy), 0
        copies = np.array([b - a for a, b in self.slices], dtype=np.float64)
        if np.any(total <= 0):
            return None  # a worker too fast to time: nothing to learn from this window
        per_copy = total / copies  # seconds per copy and window, per worker
        proposed = proportional_slices(self.num_envs, 1.0 / per_copy)
        new_copies = np.array([b - a for a, b in proposed], dtype=np.float64)
        now, then = float(np.max(copies * per_copy)), float(np.max(new_copies * per_copy))
        if proposed == self.slices or then > (1.0 - self.min_gain) * now:
            return None
        self.slices = proposed
        self.moves += 1
        return list(proposed)
