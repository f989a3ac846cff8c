"""One local Ray instance for the distributed tests (2 CPUs, no dashboard)."""

import sys

import pytest
import ray
from ray import cloudpickle


@pytest.fixture(scope="session")
def ray_local():
    """Starts Ray for the session; test modules are pickled by value so worker processes need not import them."""
    for name, module in list(sys.modules.items()):
        if name.startswith(("test_", "tests.")) or ".test_" in name:
            cloudpickle.register_pickle_by_value(module)
    from marljoint.distributed import connect_ray

    started = not ray.is_initialized()
    if started:
        connect_ray(num_cpus=2)
    yield ray
    if started:
        ray.shutdown()
