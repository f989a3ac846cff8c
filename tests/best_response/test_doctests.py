"""The docstring examples of the best-response modules (and of their commands) run."""

import doctest
import importlib

import pytest

MODULES = [
    "marljoint.cli.best_response",
    "marljoint.run.recipes",
    *(
        f"marljoint.best_response.{name}"
        for name in ("average", "exploitability", "kuhn", "meta_game", "nfsp", "psro", "reservoir")
    ),
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    # Imported by path: the package's `exploitability` attribute is the function of that name.
    module = importlib.import_module(name)
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
