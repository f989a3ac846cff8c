"""Shared test setup: single-threaded torch keeps tiny-network tests fast and deterministic on small machines, and
the key that signs env snapshots lives in a directory of the test session, never in the user's own."""

import os

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
