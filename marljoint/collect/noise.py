"""Per-copy sampling noise: every env copy draws its actions' noise from a generator of its own, addressed by the
copy's global index, so a copy's actions do not depend on which other copies share its batch or process."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from marljoint.policies.noise import NoiseRequest

__all__ = ["CopyNoise", "copy_generators", "generators_from_states"]


def copy_generators(seed: int, num_envs: int, first_copy: int = 0) -> list[torch.Generator]:
    """One sampling generator per env copy, addressed by the copy's global index.

    Copy ``e`` of a set whose first copy has global index ``first_copy`` gets the generator of global copy
    ``first_copy + e``, so a slice of the copies (a rollout worker's) draws exactly what they draw in one process.

    Args:
        seed: the run's seed.
        num_envs: how many copies.
        first_copy: the global index of the first one.

    Returns:
        ``num_envs`` CPU generators.
    """
    root = np.random.SeedSequence([int(seed) % 2**63, 0x616374])
    return [
        torch.Generator().manual_seed(
            int(np.random.SeedSequence(root.entropy, spawn_key=(first_copy + e,)).generate_state(1)[0])
        )
        for e in range(num_envs)
    ]


def generators_from_states(states: Iterable[torch.Tensor]) -> list[torch.Generator]:
    """Generators restored from ``get_state()`` snapshots (per-copy noise generators of a saved rollout).

    Args:
        states: one ``torch.Generator.get_state()`` tensor per copy.

    Returns:
        The generators, in the same order.
    """
    generators = []
    for saved in states:
        generator = torch.Generator()
        generator.set_state(saved)
        generators.append(generator)
    return generators


class CopyNoise:
    """The sampling noise of one rollout, row e of every draw coming from ``generators[e]`` (env copy e).

    When every unit samples from uniform noise, each copy's noise for many steps is drawn in one call (up to
    ``max_elements`` numbers over all copies): the CPU generator fills uniform tensors element by element, so a
    copy receives exactly the numbers (and its generator ends in exactly the state) that one draw per step and unit
    would give. Gaussian noise is drawn step by step, since the generator fills normal tensors in size-dependent
    blocks.

    Args:
        generators: one generator per batch row (env copy).
        steps: the rollout's length T (how many :meth:`draw` calls will follow).
        max_elements: the largest block of uniform noise drawn at once, over all copies.
    """

    def __init__(self, generators: Sequence[torch.Generator], steps: int, max_elements: int = 1 << 20) -> None:
        self.generators = generators
        self.steps_left = steps
        self.max_elements = max_elements
        self._block: torch.Tensor | None = None
        self._t = 0

    def draw(self, dists: Sequence[NoiseRequest]) -> list[torch.Tensor]:
        """Noise of each distribution's ``noise_shape`` for the current step; advances to the next step (a
        :class:`~marljoint.policies.noise.SamplingNoise`)."""
        shapes = [dist.noise_shape[1:] for dist in dists]
        if not all(dist.noise_kind == "uniform" for dist in dists):
            draws = [torch.rand if dist.noise_kind == "uniform" else torch.randn for dist in dists]
            return [
                torch.stack([draw(shape, generator=g) for g in self.generators]) for draw, shape in zip(draws, shapes)
            ]
        sizes = [math.prod(shape) for shape in shapes]
        if self._block is None or self._t == self._block.shape[0]:
            total = sum(sizes)
            steps = max(1, min(self.steps_left, self.max_elements // max(1, total * len(self.generators))))
            self._block = torch.stack([torch.rand((steps, total), generator=g) for g in self.generators], dim=1)
            self._t = 0
        row = self._block[self._t]
        self._t += 1
        self.steps_left -= 1
        noises, offset = [], 0
        for shape, size in zip(shapes, sizes):
            noises.append(row[:, offset : offset + size].reshape(row.shape[0], *shape))
            offset += size
        return noises
