"""marljoint.threads.set_torch_threads: the one place a trainer sets torch's thread count."""

import os

import pytest
import torch

from marljoint.threads import set_torch_threads


def test_sets_torch_s_threads_and_leaves_the_environment(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        set_torch_threads(1)
        assert torch.get_num_threads() == 1
        assert "OMP_NUM_THREADS" not in os.environ
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("count", [0, -2, 1.5, True, "2"])
def test_refuses_what_is_not_a_positive_count(count):
    with pytest.raises(ValueError, match=r"count must be a positive integer, got"):
        set_torch_threads(count)
