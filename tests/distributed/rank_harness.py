"""Runs a function in K processes joined as data-parallel ranks (gloo on 127.0.0.1, a free port), the way torchrun
starts them: each process gets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT and joins with
:meth:`~marljoint.distributed.ranks.RankGroup.from_environment`."""

from __future__ import annotations

import os
import pathlib
import socket
from collections.abc import Callable
from typing import Any

import torch
import torch.multiprocessing as mp

from marljoint.distributed.ranks import RankGroup


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_ranks(case: Callable[..., Any], tmp_path: pathlib.Path, world_size: int = 2, **kwargs: Any) -> list[Any]:
    """``case(group, **kwargs)`` in ``world_size`` processes; every rank's return value, in rank order (a case that
    raises fails the call with the rank's traceback)."""
    port = free_port()
    mp.spawn(_entry, args=(case, world_size, port, str(tmp_path), kwargs), nprocs=world_size, join=True)
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(world_size)]


def _entry(rank: int, case: Callable[..., Any], world_size: int, port: int, out: str, kwargs: dict) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    group = RankGroup.from_environment(timeout_s=60)
    assert group is not None
    try:
        result = case(group, **kwargs)
    finally:
        group.close()
    torch.save(result, os.path.join(out, f"rank{rank}.pt"))
