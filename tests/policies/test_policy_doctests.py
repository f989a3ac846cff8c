import doctest

import pytest

from marljoint.policies import actor_critic, distributions, layers, normalizer, optim, stack

MODULES = [distributions, layers, actor_critic, optim, normalizer, stack]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_docstring_examples_run(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
