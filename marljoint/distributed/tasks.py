"""A task engine: a list of calls of one pure function, run on Ray as tasks or here one after another.

The calls depend only on their arguments, so the results are the same whichever engine runs them and however Ray
schedules or retries them (PSRO's best responses and simulations use it: :mod:`marljoint.best_response.tasks`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from marljoint.distributed.ray import connect_ray

__all__ = ["TaskEngine"]


class TaskEngine:
    """Runs a list of calls of one function: on Ray as tasks (``"ray"``) or here, in order (``"local"``).

    Args:
        engine: ``"ray"`` or ``"local"``.
        max_retries: Ray re-runs a task whose worker died this many times (the tasks are pure, so a retry gives
            the same result).

    Raises:
        ValueError: for an unknown engine.
    """

    def __init__(self, engine: str, max_retries: int = 3) -> None:
        if engine not in ("ray", "local"):
            raise ValueError(f"engine={engine!r} is not one of ['local', 'ray']")
        self.engine = engine
        self.max_retries = max_retries
        self._remote: dict[Callable[..., Any], Any] = {}

    def map(self, fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]]) -> list[Any]:
        """``[fn(*args) for args in calls]``, with the calls running in parallel on Ray."""
        if self.engine == "local":
            return [fn(*args) for args in calls]
        ray = connect_ray()
        remote = self._remote.get(fn)
        if remote is None:
            remote = self._remote[fn] = ray.remote(num_cpus=1, max_retries=self.max_retries)(fn)
        # Arguments shared by every call (populations, the env factory) go to the object store once.
        shared: dict[int, Any] = {}

        def put(value: Any) -> Any:
            if isinstance(value, (int, float, str, bool, type(None))):
                return value
            key = id(value)
            if key not in shared:
                shared[key] = ray.put(value)
            return shared[key]

        refs = [remote.remote(*[put(a) for a in args]) for args in calls]
        return ray.get(refs)
