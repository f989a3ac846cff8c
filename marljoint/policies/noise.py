"""Sampling noise handed in from outside: the typed interface through which a caller supplies the noise of
:meth:`~marljoint.policies.JointPolicy.sample`.

A policy samples with a :class:`torch.Generator` by default. A caller that must decide where each batch row's noise
comes from (a collector that gives every env copy a generator of its own, so a copy's actions do not depend on the
batch it shares) supplies a :class:`SamplingNoise` instead; the policy then asks it once per call for the noise of
every distribution and samples with :meth:`~marljoint.policies.distributions.ActionDistribution.sample_from_noise`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import torch

__all__ = ["NoiseRequest", "SamplingNoise", "check_sampling_noise"]


class NoiseRequest(Protocol):
    """What one distribution needs: noise of one kind and shape (every action distribution is one).

    Attributes:
        noise_kind: ``"uniform"`` (in ``[0, 1)``, Gumbel-max sampling) or ``"normal"`` (standard normal, Gaussian
            sampling).
        noise_shape: ``[B, ...]``: the leading axis is the batch row.
    """

    noise_kind: str

    @property
    def noise_shape(self) -> torch.Size: ...


@runtime_checkable
class SamplingNoise(Protocol):
    """A source of sampling noise for :meth:`~marljoint.policies.JointPolicy.sample` (e.g.
    :class:`~marljoint.collect.CopyNoise`, one generator per env copy)."""

    def draw(self, requests: Sequence[NoiseRequest]) -> list[torch.Tensor]:
        """The noise of one sampling call.

        Args:
            requests: one per distribution, in the order the policy samples them.

        Returns:
            One CPU or device tensor per request, of its ``noise_shape`` and ``noise_kind`` (the policy may
            overwrite it).
        """
        ...


def check_sampling_noise(noise: object) -> SamplingNoise:
    """``noise`` if it is a :class:`SamplingNoise`.

    Raises:
        TypeError: for anything without a ``draw(requests)`` method, naming what to pass instead.
    """
    if not isinstance(noise, SamplingNoise):
        raise TypeError(
            f"noise must be a SamplingNoise (an object with draw(requests) -> list of tensors), got "
            f"{type(noise).__name__}; pass e.g. marljoint.collect.CopyNoise(generators, steps), or generator= for "
            "one torch.Generator"
        )
    return noise
