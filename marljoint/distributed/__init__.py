"""Scale-out: the process group of data-parallel ranks (torch.distributed), and on Ray the connection (started
locally or joined) and the task engine PSRO runs its work on.

:class:`RankGroup` (:mod:`marljoint.distributed.ranks`) is the group of a run trained by K processes
(``marljoint train --ranks K`` or torchrun): gloo on the CPU, NCCL on CUDA. Ray is optional
(``pip install "marljoint[ray]"``); nothing here imports it until it is used. Rollouts collected by Ray actors are a
collection backend: :class:`~marljoint.collect.RayCollector`.
"""

from marljoint.distributed.ranks import RankGroup, RanksDiverged
from marljoint.distributed.ray import RayUnavailable, connect_ray, require_ray
from marljoint.distributed.tasks import TaskEngine

__all__ = ["RankGroup", "RanksDiverged", "RayUnavailable", "TaskEngine", "connect_ray", "require_ray"]
