"""Truncated BPTT for recurrent policies: a rollout cut into sequence chunks, and minibatches of whole chunks.

Each env copy's T steps are cut into ``C = ceil(T / L)`` consecutive chunks of L steps (the last one padded when
L does not divide T). A chunk is replayed from the state its agents acted from at its first step, which the
rollout stored, resetting where an episode starts inside it (:attr:`~marljoint.collect.JointRollout.starts`) and
keeping the state where an agent does not decide (absent, or waiting for its turn). Padding positions point at
one extra row appended to the update's rows, which no loss counts (it is not valid) and which never advances.
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


def chunk_rows(steps: int, num_envs: int, length: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``[C × E, L]`` row indices (row of step t, copy e: ``t × E + e``) of every chunk, chunk-major per copy
    (chunk c of copy e is entry ``c × E + e``); positions past the last step hold the padding row ``T × E``.

    Example:
        >>> chunk_rows(3, 2, 2).tolist()
        [[0, 2], [1, 3], [4, 6], [5, 6]]
    """
    chunks = math.ceil(steps / length)
    t = torch.arange(chunks * length, device=device).view(chunks, 1, length)  # [C, 1, L]
    e = torch.arange(num_envs, device=device).view(1, num_envs, 1)  # [1, E, 1]
    rows = t * num_envs + e
    rows = torch.where(t < steps, rows, torch.full_like(rows, steps * num_envs))
    return rows.reshape(chunks * num_envs, length)


def pad_row(x: torch.Tensor, fill: float | bool = 0) -> torch.Tensor:
    """``x`` ``[R, ...]`` with one row of ``fill`` appended (the padding row of the chunks)."""
    return torch.cat((x, torch.full((1, *x.shape[1:]), fill, dtype=x.dtype, device=x.device)))
