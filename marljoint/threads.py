"""Compute threads as a resource of the machine: each marljoint process sets its own from the cores it may use.

Torch starts as many compute threads as the machine has cores, whatever else runs there, and its threads spin while
they wait for work. Two runs side by side on two cores then hold four spinning threads and slow each other several
times over, and env workers that each start a full set of threads fight the learner for every core. The policy:

- a process that collects rollouts (an env worker, a collecting worker, a Ray task, and the learner when it
  collects in-process) computes on **one** thread: its env steps run on one core, and a second thread would only
  spin against the other processes;
- the learner of a run whose rollouts are collected by K worker processes takes the cores the workers leave free,
  ``cores − K`` (at least one), where ``cores`` is what :func:`usable_cores` reads from the operating system
  (``os.sched_getaffinity``: ``taskset`` and container CPU sets count, other processes' load does not);
- an explicit number always wins (``JointTrainerConfig(torch_threads=4)``, ``--set torch_threads=4``).

This module imports no torch (the env workers import none): :func:`limit_threads` sets torch's count only in a
process that has already loaded it, and the environment variables of the other thread pools for what starts later.
"""

from __future__ import annotations

import os
import sys

__all__ = [
    "AUTO",
    "THREAD_ENV_VARS",
    "auto_workers",
    "learner_threads",
    "limit_threads",
    "set_torch_threads",
    "usable_cores",
]

AUTO = "auto"
"""The ``torch_threads`` value that lets :func:`learner_threads` choose."""

THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""The variables the OpenMP, MKL and OpenBLAS thread pools read when they start (in a worker's own libraries and
the processes it starts)."""


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (``os.sched_getaffinity``), or ``os.cpu_count()`` where
    the operating system does not tell.

    Example:
        >>> usable_cores() >= 1
        True
    """
    if hasattr(os, "sched_getaffinity"):
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except OSError:
            pass
    return max(1, os.cpu_count() or 1)


def learner_threads(
    workers: int, *, collects: bool, cores: int | None = None, accelerator: str | None = None
) -> tuple[int, str]:
    """The learner's compute threads under ``torch_threads="auto"``, and why.

    Args:
        workers: processes that collect the rollouts beside the learner (subprocess workers or Ray actors; 0 when
            the learner collects them itself). Ray actors count against this machine's cores wherever they run:
            with a cluster of other machines, give ``torch_threads`` explicitly.
        collects: whether the learner's own process steps the envs or runs the policies for them (a ``"local"``
            backend): it then takes one thread.
        cores: the cores to share (default :func:`usable_cores`).
        accelerator: the learner's device when it is not the CPU (``"cuda"``): the update runs there, and the
            process only drives it, on one core.

    Returns:
        ``(threads, reason)``: ``1`` when the learner collects or updates on an accelerator, else
        ``max(1, cores − workers)``.

    Raises:
        ValueError: for a negative ``workers`` or ``cores`` below 1.

    Example:
        >>> learner_threads(15, collects=False, cores=16)[0], learner_threads(4, collects=False, cores=16)[0]
        (1, 12)
        >>> learner_threads(0, collects=True, cores=16)[0]
        1
        >>> learner_threads(4, collects=False, cores=16, accelerator="cuda")[0]
        1
    """
    cores = usable_cores() if cores is None else cores
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"workers must be an integer >= 0, got {workers!r}")
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise ValueError(f"cores must be a positive integer, got {cores!r}")
    plural = "s" if cores != 1 else ""
    if accelerator is not None:
        return 1, (
            f"1: the update runs on {accelerator}, which this process drives from one core ({cores} core{plural} "
            "usable; env workers take the others)"
        )
    if collects:
        return 1, (
            f"1: this process collects the rollouts itself (its env steps use one core; {cores} core{plural} "
            "usable), so more threads would only spin"
        )
    threads = max(1, cores - workers)
    return threads, (
        f"{threads}: the {cores} core{plural} this process may use, less the {workers} that the env workers take"
        + (" (at least one)" if cores <= workers else "")
    )


def auto_workers(num_envs: int, cores: int | None = None) -> int:
    """Env workers for ``--env-workers auto``: one per core but the learner's, and no more than the env copies.

    Args:
        num_envs: the env copies E (a worker holds at least one).
        cores: the cores to share (default :func:`usable_cores`).

    Returns:
        ``min(cores − 1, num_envs)``; 0 on one core (collect in-process).

    Example:
        >>> auto_workers(64, cores=16), auto_workers(8, cores=16), auto_workers(64, cores=1)
        (15, 8, 0)
    """
    cores = usable_cores() if cores is None else cores
    return max(0, min(cores - 1, num_envs))


def set_torch_threads(count: int) -> None:
    """Sets torch's intra-op threads of this process only (the environment stays as it is): what a trainer built
    in a user's own program does with its resolved ``torch_threads``, before it builds its networks, since the
    initial weights (orthogonal init) and every parallel sum depend on the thread count in effect.

    Args:
        count: threads, at least 1.

    Raises:
        ValueError: for a count below 1.
    """
    _check_count(count)
    import torch

    torch.set_num_threads(count)


def limit_threads(count: int) -> None:
    """Sets this process's compute threads: torch's intra-op threads (when torch is loaded) and
    :data:`THREAD_ENV_VARS` for the thread pools that start later in it or in its children.

    For the processes marljoint runs itself: env and collecting workers, Ray tasks and the ``marljoint`` command.
    A trainer built in a user's own program sets torch's count only (:func:`set_torch_threads`) and leaves the
    environment as it is.

    Args:
        count: threads, at least 1.

    Raises:
        ValueError: for a count below 1.
    """
    _check_count(count)
    for name in THREAD_ENV_VARS:
        os.environ[name] = str(count)
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != count:
        torch.set_num_threads(count)


def _check_count(count: int) -> None:
    """Refuses a thread count that is not a positive integer."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive integer, got {count!r}")
