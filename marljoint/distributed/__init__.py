"""Scale-out on Ray: rollout workers as Ray actors and PSRO's simulations and best responses as Ray tasks.

Ray is optional (``pip install "marljoint[ray]"``); nothing here imports it until it is used. The embedded default
collects in-process.
"""

from marljoint.distributed.rollout import (
    RayRolloutWorkers,
    WorkerLostError,
    connect_ray,
    require_ray,
    worker_slices,
)

__all__ = ["RayRolloutWorkers", "WorkerLostError", "connect_ray", "require_ray", "worker_slices"]
