"""The rollout's per-copy sampling noise: drawn once per rollout, identical to one draw per step and unit."""

from __future__ import annotations

import torch

from marljoint.collect import CopyNoise
from marljoint.policies.distributions import Categorical, DiagGaussian, FactoredCategorical


def _generators(n: int) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(100 + e) for e in range(n)]


def _per_step(dists: list, generators: list[torch.Generator]) -> list[torch.Tensor]:
    """The reference: each step, each unit draws row e from generator e."""
    out = []
    for dist in dists:
        draw = torch.rand if dist.noise_kind == "uniform" else torch.randn
        out.append(torch.stack([draw(dist.noise_shape[1:], generator=g) for g in generators]))
    return out


def test_uniform_noise_drawn_per_rollout_equals_per_step_draws_and_generator_states() -> None:
    E, steps = 3, 7
    dists = [
        Categorical(torch.zeros(E, 2, 5)),
        FactoredCategorical(torch.zeros(E, 1, 7), nvec=(3, 4)),
    ]
    pooled, reference = _generators(E), _generators(E)
    noise = CopyNoise(pooled, steps)
    for _ in range(steps):
        got = noise.draw(dists)
        expected = _per_step(dists, reference)
        assert [g.shape for g in got] == [d.noise_shape for d in dists]
        for a, b in zip(got, expected):
            assert torch.equal(a, b)
    for a, b in zip(pooled, reference):
        assert torch.equal(a.get_state(), b.get_state())


def test_gaussian_noise_is_drawn_step_by_step_in_unit_order() -> None:
    E, steps = 2, 4
    dists = [Categorical(torch.zeros(E, 2, 3)), DiagGaussian(torch.zeros(E, 2, 3), torch.zeros(2, 3))]
    pooled, reference = _generators(E), _generators(E)
    noise = CopyNoise(pooled, steps)
    for _ in range(steps):
        for a, b in zip(noise.draw(dists), _per_step(dists, reference)):
            assert torch.equal(a, b)
    for a, b in zip(pooled, reference):
        assert torch.equal(a.get_state(), b.get_state())


def test_noise_rows_follow_their_own_generator() -> None:
    """Copy e's noise does not depend on the other copies: a lone generator gives row e's numbers."""
    dists = [Categorical(torch.zeros(3, 1, 4))]
    row_dists = [Categorical(torch.zeros(1, 1, 4))]
    together = CopyNoise(_generators(3), 5)
    alone = CopyNoise([_generators(3)[2]], 5)
    for _ in range(5):
        assert torch.equal(together.draw(dists)[0][2], alone.draw(row_dists)[0][0])


def test_noise_drawn_in_chunks_when_a_rollout_would_need_too_many_numbers() -> None:
    E, steps = 2, 9
    dists = [Categorical(torch.zeros(E, 2, 5))]  # 10 numbers per copy and step
    pooled, reference = _generators(E), _generators(E)
    noise = CopyNoise(pooled, steps, max_elements=80)  # 4 steps per chunk
    for _ in range(steps):
        for a, b in zip(noise.draw(dists), _per_step(dists, reference)):
            assert torch.equal(a, b)
    assert noise._block is not None and noise._block.shape[0] == 1  # the last chunk holds the one step left
    for a, b in zip(pooled, reference):
        assert torch.equal(a.get_state(), b.get_state())
