"""The reservoir buffer: capacity, uniform inclusion, and batch insertion equal to one-by-one insertion."""

import numpy as np
import pytest
import torch

from marljoint.best_response.reservoir import ReservoirBuffer


def sequential_reservoir(capacity, items, draws):
    """Algorithm R, one row at a time, consuming one uniform draw per row once the buffer is full."""
    slots = [None] * capacity
    next_draw = 0
    for t, item in enumerate(items):
        if t < capacity:
            slots[t] = item
            continue
        j = int(np.floor(draws[next_draw] * (t + 1)))
        next_draw += 1
        if j < capacity:
            slots[j] = item
    return slots


def test_batch_insertion_equals_sequential_insertion():
    buffer = ReservoirBuffer(7, obs_shape=(1,), action_shape=(), seed=3)
    items = np.arange(60)
    for start in (0, 5, 9, 30):
        stop = {0: 5, 5: 9, 9: 30, 30: 60}[start]
        buffer.add(torch.as_tensor(items[start:stop], dtype=torch.float32)[:, None], torch.as_tensor(items[start:stop]))
    # Replay the same generator stream (one draw per row after the buffer filled up).
    reference = np.random.default_rng(np.random.SeedSequence([3, 0x726573]))
    draws = reference.random(60 - 7)
    expected = sequential_reservoir(7, items, draws)
    assert buffer.actions.tolist() == expected
    assert buffer.obs[:, 0].long().tolist() == expected
    assert len(buffer) == 7 and buffer.seen == 60


def test_every_row_is_kept_with_probability_capacity_over_seen():
    counts = np.zeros(100)
    for seed in range(300):
        buffer = ReservoirBuffer(10, obs_shape=(1,), action_shape=(), seed=seed)
        for start in range(0, 100, 25):
            rows = torch.arange(start, start + 25)
            buffer.add(rows[:, None].float(), rows)
        counts[buffer.actions.numpy()] += 1
    frequency = counts / 300
    # Expected 0.1 each; binomial standard error sqrt(0.1 * 0.9 / 300) = 0.017.
    assert abs(frequency.mean() - 0.1) < 1e-12
    assert np.abs(frequency - 0.1).max() < 0.075
    assert abs(frequency[:50].mean() - frequency[50:].mean()) < 0.02


def test_masks_sampling_and_state():
    buffer = ReservoirBuffer(4, obs_shape=(2,), action_shape=(3,), mask_size=5, seed=0)
    with pytest.raises(ValueError, match="stores action masks"):
        buffer.add(torch.zeros(2, 2), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"expected \[k, 2\] and \[k, 3\]"):
        buffer.add(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="reservoir is empty"):
        buffer.sample(2, torch.Generator())
    masks = torch.zeros(3, 5, dtype=torch.bool)
    masks[:, 0] = True
    buffer.add(torch.ones(3, 2), torch.ones(3, 3, dtype=torch.long), masks)
    batch = buffer.sample(8, torch.Generator().manual_seed(0))
    assert batch.obs.shape == (8, 2) and batch.actions.shape == (8, 3) and batch.masks.shape == (8, 5)
    assert bool(batch.masks[:, 0].all()) and not bool(batch.masks[:, 1:].any())
    restored = ReservoirBuffer(4, obs_shape=(2,), action_shape=(3,), mask_size=5, seed=1)
    restored.load_state_dict(buffer.state_dict())
    assert len(restored) == 3 and torch.equal(restored.masks[:3], masks)
    with pytest.raises(ValueError, match="capacity must be a positive integer"):
        ReservoirBuffer(0, obs_shape=(1,), action_shape=())
