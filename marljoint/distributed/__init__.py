"""Scale-out on Ray: the connection (started locally or joined) and the task engine PSRO runs its work on.

Ray is optional (``pip install "marljoint[ray]"``); nothing here imports it until it is used. Rollouts collected
by Ray actors are a collection backend: :class:`~marljoint.collect.RayCollector`.
"""

from marljoint.distributed.ray import RayUnavailable, connect_ray, require_ray
from marljoint.distributed.tasks import TaskEngine

__all__ = ["RayUnavailable", "TaskEngine", "connect_ray", "require_ray"]
