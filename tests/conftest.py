"""Shared test setup: single-threaded torch keeps tiny-network tests fast and deterministic on small machines, and
the key that signs env snapshots lives in a directory of the test session, never in the user's own."""

import os
import sys

import pytest
import torch

from marljoint.trust import HOME_VARIABLE

torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """Skips the tests marked ``gpu`` on a machine without CUDA."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def snapshot_key_home(tmp_path_factory):
    """Points the snapshot key at a per-session directory (through the environment, so that env workers and the
    CLI run in subprocesses use it too)."""
    home = tmp_path_factory.mktemp("marljoint_home")
    previous = os.environ.get(HOME_VARIABLE)
    os.environ[HOME_VARIABLE] = str(home)
    yield home
    if previous is None:
        os.environ.pop(HOME_VARIABLE, None)
    else:
        os.environ[HOME_VARIABLE] = previous


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray instance for the session (2 CPUs, no dashboard), for the tests that use Ray actors; test
    modules are pickled by value so worker processes need not import them."""
    ray = pytest.importorskip("ray")
    from ray import cloudpickle

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
