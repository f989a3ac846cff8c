"""Truncated BPTT for recurrent policies: a rollout cut into sequence chunks, and minibatches of whole chunks.

Each env copy's T steps are cut into ``C = ceil(T / L)`` consecutive chunks of L steps (the last one padded when
L does not divide T). A chunk is replayed from the state its agents acted from at its first step, which the
rollout stored, resetting where an episode starts inside it (:attr:`~marljoint.collect.JointRollout.starts`) and
keeping the state where an agent does not decide (absent, or waiting for its turn). Padding positions point at
one extra row appended to the update's rows, which no loss counts (it is not valid) and which never advances.
In turn-based games the moves carried in from the previous rollout come first, each a chunk of one row.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

__all__ = ["SequenceChunks", "chunk_rows", "pad_row"]


class SequenceChunks(NamedTuple):
    """How an update's ``R = T × E`` rows (plus one padding row, index R) form sequence chunks.

    Attributes:
        rows: ``[K, L]`` long, the rows of each of the ``K = C × E`` chunks in step order (R where padded).
        length: L.
        states: per group, ``[R + 1, n_g, S_g]``, the state each agent acted from at each row.
        starts: ``[R + 1, N]`` bool, the agent's state is reset before that row.
        advance: ``[R + 1, N]`` bool, the agent's state advances through that row.
    """

    rows: torch.Tensor
    length: int
    states: list[torch.Tensor]
    starts: torch.Tensor
    advance: torch.Tensor

    @property
    def count(self) -> int:
        """K, the number of chunks."""
        return int(self.rows.shape[0])


def chunk_rows(
    steps: int, num_envs: int, length: int, device: torch.device | str = "cpu", carried: int = 0
) -> torch.Tensor:
    """``[K, L]`` row indices of every chunk of an update's rows (row of step t, copy e: ``t × E + e``).

    The first ``carried`` steps are moves carried in from the previous rollout of a turn-based game (one per
    agent, see :attr:`~marljoint.collect.JointRollout.carried`): each of their rows is a chunk of its own, one
    move replayed from the state it was taken in. The ``steps`` steps after them are cut into ``C = ceil(steps /
    L)`` chunks per copy, chunk-major (chunk c of copy e follows the carried chunks as entry ``c × E + e``).
    Positions past a chunk's last row hold the padding row ``(carried + steps) × E``.

    Example:
        >>> chunk_rows(3, 2, 2).tolist()
        [[0, 2], [1, 3], [4, 6], [5, 6]]
        >>> chunk_rows(2, 1, 2, carried=1).tolist()
        [[0, 3], [1, 2]]
    """
    pad = (carried + steps) * num_envs
    chunks = math.ceil(steps / length)
    t = torch.arange(chunks * length, device=device).view(chunks, 1, length)  # [C, 1, L]
    e = torch.arange(num_envs, device=device).view(1, num_envs, 1)  # [1, E, 1]
    rows = (t + carried) * num_envs + e
    rows = torch.where(t < steps, rows, torch.full_like(rows, pad)).reshape(chunks * num_envs, length)
    if not carried:
        return rows
    lead = torch.full((carried * num_envs, length), pad, dtype=rows.dtype, device=device)
    lead[:, 0] = torch.arange(carried * num_envs, device=device)
    return torch.cat((lead, rows))


def pad_row(x: torch.Tensor, fill: float | bool = 0) -> torch.Tensor:
    """``x`` ``[R, ...]`` with one row of ``fill`` appended (the padding row of the chunks)."""
    return torch.cat((x, torch.full((1, *x.shape[1:]), fill, dtype=x.dtype, device=x.device)))
