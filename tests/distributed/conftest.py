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
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    if started:
        ray.shutdown()
