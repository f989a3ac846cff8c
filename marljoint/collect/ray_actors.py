"""Ray actors of one CPU each, shared by the Ray collector and the Ray env: starting them and reading their errors."""

from __future__ import annotations

from typing import Any

from marljoint.distributed.ray import connect_ray
from marljoint.env.base import EnvCopyError

__all__ = ["WorkerLostError", "raise_env_copy_error", "ray_actor_class"]


class WorkerLostError(RuntimeError):
    """A Ray rollout worker died, or kept dying after the allowed number of restarts."""


def ray_actor_class(body: type, workers: int, role: str) -> tuple[Any, Any]:
    """Ray (started locally or joined, :func:`~marljoint.distributed.connect_ray`) and ``body`` as a class of Ray
    actors of one CPU each, once the cluster has a CPU for each of ``workers`` actors.

    Args:
        body: the class an actor hosts.
        workers: how many actors will run at once.
        role: what the actors are, for the message (``"rollout workers"``).

    Returns:
        ``(ray, actor_class)``; an actor that dies is not restarted by Ray (its caller decides).

    Raises:
        ValueError: if the Ray cluster has fewer CPUs than ``workers``.
    """
    ray = connect_ray()
    cpus = ray.cluster_resources().get("CPU", 0)
    if cpus < workers:
        raise ValueError(
            f"{workers} Ray {role} need {workers} CPUs, but the Ray cluster has {cpus:g}; use fewer workers or add "
            "CPUs to the cluster"
        )
    return ray, ray.remote(num_cpus=1, max_restarts=0)(body)


def raise_env_copy_error(exc: Exception) -> None:
    """Raises the :class:`~marljoint.env.EnvCopyError` an actor's env copy raised, named as in one process (with the
    actor's traceback); returns for any other failure of a Ray task."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, EnvCopyError):
        raise EnvCopyError(*cause.args[:5], traceback=str(exc)) from None
