import doctest

import pytest

from marljoint.policies import actor_critic, distributions, layers, normalizer, optim


@pytest.mark.parametrize("module", [distributions, layers, actor_critic, optim, normalizer], ids=lambda m: m.__name__)
def test_docstring_examples_run(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
