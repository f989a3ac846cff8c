"""Bit-identity checks shared by the tests of the ways to collect a rollout or step env copies (in-process,
subprocess, Ray)."""

import numpy as np
import torch

from marljoint.collect import PER_AGENT_FIELDS

# Every per-agent [T, E, N] field, then the [E, N] fields of the state after the last step.
FIELDS = (*PER_AGENT_FIELDS, "bootstrap_values", "next_alive", "next_acting")


def assert_same_rollout(a, b):
    """Every tensor and episode record of two rollouts is equal, bit for bit, the moves carried in from the
    previous rollout and the deferred ones included."""
    assert (a.carried is None) == (b.carried is None)
    assert (a.deferred is None) == (b.deferred is None)
    if a.deferred is not None:
        assert torch.equal(a.deferred, b.deferred)
    if a.carried is not None:
        assert_same_rollout(a.carried, b.carried)
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:  # carried rows have no next-state flags
            assert torch.equal(x, y), name
    for g in range(len(a.obs)):
        assert torch.equal(a.obs[g], b.obs[g])
        assert torch.equal(a.actions[g], b.actions[g])
        if a.action_masks[g] is not None:
            assert torch.equal(a.action_masks[g], b.action_masks[g])
    for name in ("episode_returns", "episode_lengths", "episode_steps"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def assert_same_parameters(a, b):
    """Two trainers' networks hold the same parameters and buffers, bit for bit."""
    for p, q in zip(a.policies, b.policies):
        for (name, x), (_, y) in zip(p.state_dict().items(), q.state_dict().items()):
            assert torch.equal(x, y), name


def same_state(a, b) -> bool:
    """Whether two nested states (tensors, arrays, dicts, sequences, scalars; a checkpoint's, a trainer's) hold the
    same bits."""
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_state(x, y) for x, y in zip(a, b))
    return a == b
