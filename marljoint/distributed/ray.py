"""The connection to Ray: started locally or joined, once per process (Ray is optional)."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["RayUnavailable", "connect_ray", "require_ray"]


class RayUnavailable(ImportError):
    """Ray is needed (Ray workers or tasks) but not installed; the message gives the install command."""


def require_ray() -> Any:
    """Imports Ray, or raises :class:`RayUnavailable` saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable(
            'Ray workers need Ray: pip install "marljoint[ray]" (or collect in this process: collection backend '
            '"local")'
        ) from exc
    return ray


def connect_ray(address: str | None = None, num_cpus: int | None = None) -> Any:
    """Starts or joins Ray once: ``address=None`` starts a local instance, ``"auto"`` or ``"ray://host:port"`` joins a
    running cluster. Does nothing if Ray already runs in this process.

    A local instance runs its workers at the driver's priority (``RAY_worker_niceness=0`` unless already set): Ray's
    default niceness of 15 lets any other busy process starve the rollout workers, which measured 100× slower on a
    2-core machine with one other job running, while the driver here mostly waits for its workers.

    Args:
        address: the cluster address (``None``: a new local instance).
        num_cpus: CPUs of a new local instance (``None``: all of this machine's).

    Returns:
        The ``ray`` module.

    Raises:
        ConnectionError: if no cluster answers at ``address``.
    """
    ray = require_ray()
    if ray.is_initialized():
        return ray
    if address is None:
        os.environ.setdefault("RAY_worker_niceness", "0")
    try:
        ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    except ConnectionError as exc:
        raise ConnectionError(
            f"no Ray cluster answers at {address!r} ({exc}); start one with `ray start --head`"
        ) from exc
    return ray
