"""Loading a benchmark script as a module, the way its spawned processes import it (by name from a path entry)."""

import contextlib
import importlib
import pathlib
import sys

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"


@contextlib.contextmanager
def benchmark_module(name):
    """Imports ``benchmarks/<name>.py`` for the duration of the block, then forgets it."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))
        sys.modules.pop(name, None)
