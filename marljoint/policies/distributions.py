"""Action distributions for a batch of agents, built directly on tensors.

``torch.distributions`` validates and broadcasts on every construction, which costs far more than the arithmetic
for the small batches of a rollout step (a few envs times a few agents). The classes here do only the arithmetic.

Every distribution has a batch shape ``[...]`` (typically ``[B, n_g]``: batch rows times agents of a group) and
exposes ``sample(generator)``, ``mode()``, ``log_prob(actions)`` and ``entropy()``. Sampling always draws from the
``torch.Generator`` it is given, never from torch's global generator.

Categorical actions are head indices ``0 .. n_k - 1``; adding a gymnasium ``start`` offset is the env adapter's job.

The functions serve the learners that differentiate through the action maths themselves (MASAC and MADDPG in
:mod:`marljoint.offpolicy.sac`): :func:`masked_log_softmax` (the categoricals' log-probabilities),
:func:`gumbel_softmax_straight_through` (a differentiable categorical sample) and :func:`squashed_gaussian_log_prob`
(the density of a :class:`DiagGaussian` sample squashed into a Box). One masking rule, :func:`legal_actions`, serves
them all.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
import torch

from marljoint.env.spaces import ActionLayout

__all__ = [
    "ActionDistribution",
    "BehaviourPolicy",
    "Categorical",
    "DiagGaussian",
    "FactoredCategorical",
    "UniformMixture",
    "gumbel_softmax_straight_through",
    "legal_actions",
    "make_distribution",
    "masked_log_softmax",
    "squashed_gaussian_log_prob",
]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class ActionDistribution(Protocol):
    """What the trainer needs from an action distribution with batch shape ``[...]``."""

    def sample(self, generator: torch.Generator) -> torch.Tensor:
        """Draws one action per batch entry from ``generator``."""
        ...

    def mode(self) -> torch.Tensor:
        """The most likely action per batch entry."""
        ...

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-probability (density for continuous actions) of ``actions``, shape ``[...]``."""
        ...

    def entropy(self) -> torch.Tensor:
        """Entropy per batch entry, shape ``[...]``."""
        ...

    @property
    def noise_shape(self) -> torch.Size:
        """Shape of the noise :meth:`sample_from_noise` consumes (leading axis = the batch's first axis)."""
        ...

    def sample_from_noise(self, noise: torch.Tensor) -> torch.Tensor:
        """Samples with caller-supplied noise (``noise_kind``: ``"uniform"`` or ``"normal"``)."""
        ...


def _check_generator(generator: torch.Generator) -> None:
    if not isinstance(generator, torch.Generator):
        raise TypeError(
            f"sample() needs a torch.Generator, got {type(generator).__name__}; marljoint never draws from torch's "
            "global generator. Pass e.g. torch.Generator().manual_seed(seed)."
        )


_WIDE_FLOATS = (torch.float32, torch.float64)


def _exp_floor(dtype: torch.dtype) -> float:
    """Two above the log of the smallest normal number of ``dtype`` (about -85.3 in float32).

    The exponential of anything at or above it is a normal number, which ``exp`` computes at full speed (at -87.3 it
    takes 140x as long).
    """
    return math.log(torch.finfo(dtype).tiny) + 2.0


def _log_softmax(x: torch.Tensor) -> torch.Tensor:
    """``x.log_softmax(-1)``, computed with whole-tensor elementwise kernels.

    Two measured reasons: torch's CPU ``log_softmax`` over a last dimension narrower than its vector width (16 floats
    with AVX-512) runs about 15x slower per element than over a wider one, and its ``exp`` takes a slow path on very
    negative inputs, which masked entries (the dtype's most negative value) always are. The exponentials here are of
    arguments clamped at :func:`_exp_floor`: below it a term adds nothing to a sum that holds ``exp(0) = 1``. The max
    is detached, as log-softmax does not depend on the shift. Half-precision types, whose smallest normal number is
    not negligible against 1, use torch's kernels.
    """
    if x.dtype not in _WIDE_FLOATS:
        return x.log_softmax(-1)
    shifted = x - x.detach().amax(-1, keepdim=True)
    return shifted - shifted.clamp(min=_exp_floor(x.dtype)).exp().sum(-1, keepdim=True).log()


def _probs(log_p: torch.Tensor) -> torch.Tensor:
    """``log_p.exp()``, exactly 0 where ``log_p`` is below :func:`_exp_floor` (masked entries, whose value is the
    dtype's most negative one, and probabilities under 1e-37 in float32), without ``exp``'s slow path there."""
    if log_p.dtype not in _WIDE_FLOATS:
        return log_p.exp()
    floor = _exp_floor(log_p.dtype)
    return log_p.clamp(min=floor).exp() * (log_p > floor)


def _blocked_actions(mask: torch.Tensor) -> torch.Tensor:
    """``[..., A]`` bool: the entries a categorical over ``mask`` blocks (:func:`legal_actions`' complement)."""
    return mask.logical_not() & mask.any(-1, keepdim=True)


def legal_actions(mask: torch.Tensor) -> torch.Tensor:
    """The actions a masked categorical may play: those ``mask`` allows, or every action in a row it allows none.

    This is the one masking convention of every categorical here (:class:`FactoredCategorical` per head,
    :func:`masked_log_softmax`, :func:`gumbel_softmax_straight_through`). PettingZoo gives agents that are not
    deciding all-zero masks; such a row is left unmasked, so that its log-probabilities, values and entropies stay
    finite, and the learners leave those rows out of their losses.

    Args:
        mask: ``[..., A]`` bool, True where the action is allowed.

    Returns:
        ``[..., A]`` bool.

    Example:
        >>> import torch
        >>> legal_actions(torch.tensor([[True, False], [False, False]])).tolist()
        [[True, False], [True, True]]
    """
    return ~_blocked_actions(mask)


def masked_log_softmax(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Log-probabilities of a categorical over the :func:`legal_actions` of ``mask``.

    Blocked entries get the dtype's most negative finite logit rather than ``-inf``: their probability is exactly 0
    and no ``inf - inf`` can make a NaN. A row whose mask allows nothing is left unmasked (:func:`legal_actions`).
    :class:`FactoredCategorical` computes its heads' log-probabilities with this function.

    Args:
        logits: ``[..., A]`` floating point.
        mask: ``[..., A]`` bool (or broadcastable to ``logits``), True where the action is legal; ``None``: all legal.

    Returns:
        ``[..., A]`` log-probabilities, about the dtype's most negative value on blocked entries (their
        exponential is exactly 0).

    Raises:
        TypeError: if ``mask`` is not a bool tensor.

    Example:
        >>> import torch
        >>> logp = masked_log_softmax(torch.zeros(2, 3), torch.tensor([[True, False, True], [False, False, False]]))
        >>> [[round(p, 3) for p in row] for row in logp.exp().tolist()]
        [[0.5, 0.0, 0.5], [0.333, 0.333, 0.333]]
    """
    if mask is None:
        return _log_softmax(logits)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = legal), got dtype {mask.dtype}; pass mask.bool()")
    return _log_softmax(logits.masked_fill(_blocked_actions(mask), torch.finfo(logits.dtype).min))


def gumbel_softmax_straight_through(
    logits: torch.Tensor,
    mask: torch.Tensor | None,
    generator: torch.Generator,
    temperature: float = 1.0,
) -> torch.Tensor:
    """A one-hot sample of a masked categorical whose gradient is that of the Gumbel-softmax relaxation.

    Forward: ``one_hot(argmax(log π + g))`` with Gumbel noise ``g``, an exact sample of π over the
    :func:`legal_actions` of ``mask`` (the Gumbel-max trick, as :meth:`FactoredCategorical.sample`). Backward: the
    gradient of ``softmax((log π + g) / temperature)`` over the same legal actions (the straight-through estimator
    of MADDPG's discrete actions). Blocked actions are never sampled and get no gradient.

    Args:
        logits: ``[..., A]``.
        mask: ``[..., A]`` bool legal actions, or ``None``.
        generator: the source of the Gumbel noise (on any device: the noise moves to the logits').
        temperature: the relaxation temperature, > 0.

    Returns:
        ``[..., A]`` one-hot rows (exactly 0 or 1 in the forward pass).

    Raises:
        TypeError: if ``generator`` is not a ``torch.Generator`` or ``mask`` not a bool tensor.
        ValueError: if ``temperature`` is not a positive number.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> gumbel_softmax_straight_through(torch.zeros(1, 3), torch.tensor([[False, True, False]]), g)
        tensor([[0., 1., 0.]])
    """
    _check_generator(generator)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature must be a number > 0, got {temperature!r}; e.g. gumbel_temperature=1.0")
    log_p = masked_log_softmax(logits, mask)
    uniform = torch.rand(logits.shape, generator=generator, dtype=logits.dtype, device=generator.device)
    uniform = uniform.to(logits.device)
    gumbel = -torch.log(-torch.log(uniform.clamp(min=torch.finfo(logits.dtype).tiny)))
    perturbed = log_p + gumbel
    soft = _probs(masked_log_softmax(perturbed / temperature, mask))
    hard = torch.nn.functional.one_hot(perturbed.argmax(-1), logits.shape[-1]).to(logits.dtype)
    return hard - soft.detach() + soft


@functools.lru_cache(maxsize=64)
def _padding_index(nvec: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """Position of each of the ``sum(nvec)`` logits in a row of ``K * max(nvec)`` padded logits."""
    width = max(nvec)
    positions = [k * width + j for k, n in enumerate(nvec) for j in range(n)]
    return torch.tensor(positions, dtype=torch.long, device=device)


HeadLogProbs = TypeVar("HeadLogProbs", torch.Tensor, np.ndarray)


class BehaviourPolicy(Protocol):
    """How a rollout plays when it does not play the policy itself (exploration): a map from the policy's
    categorical head log-probabilities to the behaviour's, which the collector samples and stores. ``None`` in its
    place everywhere means "play the policy"."""

    def head_log_probs(self, log_p: HeadLogProbs) -> HeadLogProbs:
        """The behaviour's log-probabilities.

        Args:
            log_p: ``[..., K, max(nvec)]`` the policy's normalised log-probabilities per head, masked and padding
                entries at the dtype's most negative value; a torch tensor (the torch acting path) or a numpy array
                (the host acting path, :mod:`marljoint.collect.acting`).

        Returns:
            The same shape, type and dtype, in the same convention.
        """
        ...


@dataclass(frozen=True)
class UniformMixture:
    """The behaviour ``(1 − ε)·π + ε·uniform``, where each categorical head's uniform share is spread over its
    allowed choices (a :class:`BehaviourPolicy`). The one implementation of this mixture: both acting paths and
    :meth:`FactoredCategorical.mixed_with_uniform` call :meth:`head_log_probs`.

    Attributes:
        epsilon: ε in ``[0, 1)``; 0 plays π itself.

    Raises:
        ValueError: for ε outside ``[0, 1)``.

    Example:
        >>> import torch
        >>> UniformMixture(0.5).head_log_probs(torch.tensor([[0.0, -1e4]])).exp()  # 0.5 * [1, 0] + 0.5 * [1/2, 1/2]
        tensor([[0.7500, 0.2500]])
    """

    epsilon: float

    def __post_init__(self) -> None:
        value = self.epsilon
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
            raise ValueError(f"epsilon must be in [0, 1), got {value!r}; 0 plays the policy itself")

    def head_log_probs(self, log_p: HeadLogProbs) -> HeadLogProbs:
        """See :meth:`BehaviourPolicy.head_log_probs`."""
        if self.epsilon == 0.0:
            return log_p
        ops = _NUMPY_OPS if isinstance(log_p, np.ndarray) else _TORCH_OPS
        fill = ops.fill(log_p)
        allowed = log_p > fill / 2  # masked and padding entries sit at the dtype's most negative value
        share = ops.cast(allowed, log_p) / ops.cast(ops.count(allowed), log_p)
        mixture = (
            ops.scalar(1.0 - self.epsilon, log_p) * ops.probs(log_p, allowed) + ops.scalar(self.epsilon, log_p) * share
        )
        return ops.where(allowed, ops.log(ops.where(allowed, mixture, 1.0)), fill)


class _TorchOps:
    """The array operations of :meth:`UniformMixture.head_log_probs` on torch tensors."""

    @staticmethod
    def fill(x: torch.Tensor) -> float:
        return torch.finfo(x.dtype).min

    @staticmethod
    def cast(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        return x.to(like.dtype)

    @staticmethod
    def count(allowed: torch.Tensor) -> torch.Tensor:
        return allowed.sum(-1, keepdim=True)

    @staticmethod
    def scalar(value: float, like: torch.Tensor) -> float:
        return float(value)

    @staticmethod
    def probs(log_p: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        return _probs(log_p)

    where = staticmethod(torch.where)
    log = staticmethod(torch.log)


class _NumpyOps:
    """The same operations on numpy arrays (scalars in the array's dtype, as numpy would otherwise widen them).

    :meth:`probs` is exactly 0 on masked entries without ``exp``'s slow path there, as torch's ``_probs`` is; that one
    also zeroes probabilities under 1e-37, which no mixture with ε > 1e-20 can tell apart.
    """

    @staticmethod
    def fill(x: np.ndarray) -> Any:
        return np.finfo(x.dtype).min

    @staticmethod
    def cast(x: np.ndarray, like: np.ndarray) -> np.ndarray:
        return x.astype(like.dtype)

    @staticmethod
    def count(allowed: np.ndarray) -> np.ndarray:
        return allowed.sum(-1, keepdims=True)

    @staticmethod
    def scalar(value: float, like: np.ndarray) -> Any:
        return like.dtype.type(value)

    @staticmethod
    def probs(log_p: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        return np.exp(np.where(allowed, log_p, 0.0)) * allowed

    where = staticmethod(np.where)
    log = staticmethod(np.log)


_TORCH_OPS, _NUMPY_OPS = _TorchOps(), _NumpyOps()


class FactoredCategorical:
    """Independent categorical heads (a MultiDiscrete action), with optional action masks.

    One linear layer emits ``sum(nvec)`` logits, split into K heads of ``nvec[k]`` choices. The joint action is
    the tuple of head choices, so :meth:`log_prob` is the SUM of head log-probabilities (PPO's ratio is then the
    joint-action ratio) and :meth:`entropy` is the sum of head entropies.

    Masked entries get the most negative finite logit of the dtype rather than ``-inf``: their probability is
    exactly 0, they are never sampled, they add exactly 0 to the entropy, and no ``inf - inf`` can produce NaN in
    the loss or its gradient. A head whose entries are ALL masked (PettingZoo gives all-zero masks to agents that
    are not acting on this turn) is left unmasked, so its log-probabilities stay finite; the trainer excludes such
    rows from the loss. Both rules are :func:`masked_log_softmax`'s, which computes every head.

    Heads of equal size are evaluated as one ``[..., K, n]`` tensor. Heads of different sizes are padded to the
    largest size with masked entries, so every method is the same few tensor operations whatever ``nvec`` is.

    Args:
        logits: ``[..., sum(nvec)]`` unnormalised log-probabilities, heads concatenated in order.
        nvec: number of choices of each head.
        mask: ``[..., sum(nvec)]`` bool, True where the action is allowed; ``None`` allows everything.

    Raises:
        ValueError: if ``nvec`` is empty or has a non-positive entry, or the logits or mask have the wrong shape.
        TypeError: if the logits are not floating point or the mask is not bool.

    Example:
        >>> import torch
        >>> dist = FactoredCategorical(torch.zeros(2, 5), nvec=(3, 2))
        >>> dist.sample(torch.Generator().manual_seed(0)).shape
        torch.Size([2, 2])
        >>> dist.entropy()  # log 3 + log 2 per row
        tensor([1.7918, 1.7918])
    """

    #: whether actions carry the trailing K axis (False only for :class:`Categorical`).
    _has_head_axis = True

    def __init__(
        self,
        logits: torch.Tensor,
        nvec: Sequence[int],
        mask: torch.Tensor | None = None,
    ) -> None:
        nvec = tuple(int(n) for n in nvec)
        if not nvec or min(nvec) < 1:
            raise ValueError(f"nvec must hold at least one positive head size, got {nvec}")
        if not logits.is_floating_point():
            raise TypeError(f"logits must be a floating-point tensor, got dtype {logits.dtype}")
        total = sum(nvec)
        if logits.dim() == 0 or logits.shape[-1] != total:
            raise ValueError(
                f"logits of shape {tuple(logits.shape)} do not match nvec {nvec}: the last dimension must be "
                f"sum(nvec) = {total}. Build the head with out_features = ActionLayout.logits_size."
            )
        self.nvec = nvec
        self.batch_shape = logits.shape[:-1]
        width = max(nvec)
        fill = torch.finfo(logits.dtype).min
        uniform = all(n == width for n in nvec)
        head_shape = (*self.batch_shape, len(nvec), width)
        if uniform:
            logits3 = logits.reshape(head_shape)
        else:
            index = _padding_index(nvec, logits.device)
            logits3 = logits.new_full((*self.batch_shape, len(nvec) * width), fill)
            logits3 = logits3.index_copy(-1, index, logits).view(head_shape)
        mask3 = None
        if mask is not None:
            if mask.dtype != torch.bool:
                raise TypeError(f"mask must be a bool tensor (True = allowed), got dtype {mask.dtype}")
            if mask.shape != logits.shape:
                raise ValueError(
                    f"mask of shape {tuple(mask.shape)} does not match logits of shape {tuple(logits.shape)}; "
                    "pass one entry per logit (ActionLayout.mask_size per agent)."
                )
            if uniform:
                mask3 = mask.reshape(head_shape)
            else:
                mask3 = mask.new_zeros((*self.batch_shape, len(nvec) * width))
                mask3 = mask3.index_copy(-1, index, mask).view(head_shape)
        self._log_p = masked_log_softmax(logits3, mask3)

    def sample(self, generator: torch.Generator) -> torch.Tensor:
        """Draws one joint action per batch entry with the Gumbel-max trick.

        Args:
            generator: the source of randomness; the same generator state gives bit-identical samples.

        Returns:
            ``[..., K]`` int64 head choices (``[...]`` for :class:`Categorical`).

        Raises:
            TypeError: if ``generator`` is not a ``torch.Generator``.
        """
        _check_generator(generator)
        log_p = self._log_p
        # Drawn where the generator lives (a CPU generator serves networks on any device), then moved.
        noise = torch.rand(log_p.shape, generator=generator, dtype=log_p.dtype, device=generator.device)
        return self.sample_from_noise(noise.to(log_p.device))

    #: the noise :meth:`sample_from_noise` consumes: uniform on [0, 1).
    noise_kind = "uniform"

    @property
    def noise_shape(self) -> torch.Size:
        """Shape of the noise one :meth:`sample_from_noise` call consumes: ``[..., K, max(nvec)]``."""
        return self._log_p.shape

    def sample_from_noise(self, uniform: torch.Tensor) -> torch.Tensor:
        """Samples with caller-supplied uniform noise of shape :attr:`noise_shape` (it is overwritten).

        Lets a caller draw each env copy's noise from that copy's own generator, so results do not depend on how
        copies are split across processes.
        """
        log_p = self._log_p
        # argmax(log p + Gumbel) with Gumbel = -log(E), E = -log(u) ~ Exp(1). Clamping u away from 0 bounds the
        # noise to [-4.5, 16.7] (float32), so an allowed action always outscores a masked one (~dtype min).
        log_exp = uniform.clamp_(min=torch.finfo(log_p.dtype).tiny).log_().neg_().log_()
        return self._drop_head_axis((log_p - log_exp).argmax(-1))

    def mixed_with_uniform(self, epsilon: float) -> FactoredCategorical:
        """The mixture ``(1 − ε)·p + ε·u`` of this distribution and the uniform one over each head's allowed
        choices: :meth:`under` a :class:`UniformMixture` of ``epsilon``.

        Args:
            epsilon: ε in ``[0, 1)``; 0 gives a copy of this distribution.

        Raises:
            ValueError: for ε outside ``[0, 1)``.

        Example:
            >>> import torch
            >>> dist = Categorical(torch.tensor([[10.0, 0.0, 0.0]]), mask=torch.tensor([[True, True, False]]))
            >>> dist.mixed_with_uniform(0.2).log_prob(torch.tensor([1])).exp()  # 0.8 * p(1) + 0.2 / 2
            tensor([0.1000])
        """
        return self.under(UniformMixture(epsilon))

    def under(self, behaviour: BehaviourPolicy) -> FactoredCategorical:
        """The distribution that ``behaviour`` plays in place of this one: a distribution of the same kind whose
        :meth:`sample`, :meth:`sample_from_noise` (the same noise) and :meth:`log_prob` are the behaviour's."""
        played = copy.copy(self)
        played._log_p = behaviour.head_log_probs(self._log_p)
        return played

    def mode(self) -> torch.Tensor:
        """The most likely choice of each head, ``[..., K]`` int64 (``[...]`` for :class:`Categorical`)."""
        return self._drop_head_axis(self._log_p.argmax(-1))

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Joint-action log-probability: the sum over heads of each head's log-probability.

        Args:
            actions: ``[..., K]`` integer head choices (``[...]`` for :class:`Categorical`).

        Returns:
            ``[...]`` log-probabilities.

        Raises:
            ValueError: if ``actions`` does not have the distribution's batch shape (plus the K axis).
            TypeError: if ``actions`` is not an integer tensor.

        Actions must be valid head indices (``0 <= a_k < nvec[k]``); they are not range-checked here.
        """
        index = self._check_actions(actions)
        return self._log_p.gather(-1, index).sum((-2, -1))

    def entropy(self) -> torch.Tensor:
        """Sum of the head entropies, ``[...]``; masked entries contribute exactly 0."""
        return self.head_entropy().sum(-1)

    def head_entropy(self) -> torch.Tensor:
        """Entropy of each head, ``[..., K]``."""
        log_p = self._log_p
        return -(_probs(log_p) * log_p).sum(-1)

    def head_probs(self) -> list[torch.Tensor]:
        """Probabilities of each head: a list of K tensors ``[..., nvec[k]]``."""
        probs = _probs(self._log_p)
        return [probs[..., k, :n] for k, n in enumerate(self.nvec)]

    def _drop_head_axis(self, actions: torch.Tensor) -> torch.Tensor:
        return actions if self._has_head_axis else actions.squeeze(-1)

    def _check_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Validates ``actions`` and returns the ``[..., K, 1]`` gather index."""
        expected = (*self.batch_shape, len(self.nvec)) if self._has_head_axis else tuple(self.batch_shape)
        if actions.shape != expected:
            raise ValueError(
                f"actions of shape {tuple(actions.shape)} do not match the distribution: expected {expected} "
                "(the batch shape of the logits"
                + (", plus one entry per head)." if self._has_head_axis else "; a Discrete action has no head axis).")
            )
        if actions.dtype != torch.long:
            if actions.is_floating_point() or actions.is_complex() or actions.dtype == torch.bool:
                raise TypeError(f"actions must be an integer tensor of head indices, got dtype {actions.dtype}")
            actions = actions.long()
        return actions.unsqueeze(-1) if self._has_head_axis else actions.view(*expected, 1, 1)


class Categorical(FactoredCategorical):
    """A single categorical head (a Discrete action), with an optional action mask.

    Same semantics as :class:`FactoredCategorical` with one head, except that actions have no head axis:
    :meth:`sample` and :meth:`mode` return ``[...]`` and :meth:`log_prob` takes ``[...]``.

    Args:
        logits: ``[..., n]`` unnormalised log-probabilities.
        mask: ``[..., n]`` bool, True where the action is allowed; ``None`` allows everything.

    Example:
        >>> import torch
        >>> dist = Categorical(torch.zeros(4, 3), mask=torch.tensor([True, False, True]).expand(4, 3))
        >>> dist.log_prob(torch.tensor([0, 2, 0, 2]))
        tensor([-0.6931, -0.6931, -0.6931, -0.6931])
    """

    _has_head_axis = False

    def __init__(self, logits: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        if logits.dim() == 0:
            raise ValueError("logits must have at least one dimension (the choices), got a 0-d tensor")
        super().__init__(logits, (logits.shape[-1],), mask)


class DiagGaussian:
    """A Gaussian with diagonal covariance (a Box action).

    Samples are NOT clipped: PPO evaluates the log-probability of the unclipped sample, and the env adapter clips
    to the Box bounds when stepping the env.

    Args:
        mean: ``[..., D]`` means.
        log_std: log standard deviations, broadcastable to ``mean`` (e.g. a state-independent ``[M, D]``).

    Raises:
        ValueError: if ``log_std`` does not broadcast to the shape of ``mean``.
        TypeError: if either tensor is not floating point.
    """

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor) -> None:
        if not (mean.is_floating_point() and log_std.is_floating_point()):
            raise TypeError(f"mean and log_std must be floating point, got {mean.dtype} and {log_std.dtype}")
        if mean.dim() == 0:
            raise ValueError("mean must have at least one dimension (the action dimensions D), got a 0-d tensor")
        try:
            shape = torch.broadcast_shapes(mean.shape, log_std.shape)
        except RuntimeError as exc:
            raise ValueError(
                f"log_std of shape {tuple(log_std.shape)} does not broadcast to mean of shape {tuple(mean.shape)}; "
                "give it shape [D] or [M, D] matching the trailing dimensions of the mean."
            ) from exc
        if shape != mean.shape:
            raise ValueError(
                f"log_std of shape {tuple(log_std.shape)} would enlarge mean of shape {tuple(mean.shape)} to "
                f"{tuple(shape)}; give it shape [D] or [M, D] matching the trailing dimensions of the mean."
            )
        self.mean = mean
        self.log_std = log_std
        self.batch_shape = mean.shape[:-1]

    def sample(self, generator: torch.Generator) -> torch.Tensor:
        """Draws ``mean + std * noise`` from ``generator``, ``[..., D]``, without gradient.

        Raises:
            TypeError: if ``generator`` is not a ``torch.Generator``.
        """
        _check_generator(generator)
        mean = self.mean.detach()
        noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=generator.device)
        return self.sample_from_noise(noise.to(mean.device))

    #: the noise :meth:`sample_from_noise` consumes: standard normal.
    noise_kind = "normal"

    @property
    def noise_shape(self) -> torch.Size:
        """Shape of the noise one :meth:`sample_from_noise` call consumes: the mean's, ``[..., D]``."""
        return self.mean.shape

    def sample_from_noise(self, noise: torch.Tensor) -> torch.Tensor:
        """``mean + std * noise`` with caller-supplied standard-normal noise of shape :attr:`noise_shape`."""
        return torch.addcmul(self.mean.detach(), noise, self.log_std.detach().exp())

    def mode(self) -> torch.Tensor:
        """The mean, ``[..., D]``."""
        return self.mean

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-density of ``actions`` ``[..., D]``, summed over the D dimensions: ``[...]``.

        Raises:
            ValueError: if ``actions`` does not have the shape of the mean.
        """
        if actions.shape != self.mean.shape:
            raise ValueError(
                f"actions of shape {tuple(actions.shape)} do not match the Gaussian's mean of shape "
                f"{tuple(self.mean.shape)}; pass the unclipped sampled actions."
            )
        z = (actions - self.mean) * torch.exp(-self.log_std)
        return (-0.5 * z.square() - self.log_std).sum(-1) - _HALF_LOG_2PI * self.mean.shape[-1]

    def entropy(self) -> torch.Tensor:
        """Sum over dimensions of ``0.5 + 0.5 log(2 pi) + log_std``, ``[...]``."""
        return (self.log_std + (0.5 + _HALF_LOG_2PI)).expand(self.mean.shape).sum(-1)


def squashed_gaussian_log_prob(
    pre_tanh: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor, half_range: torch.Tensor
) -> torch.Tensor:
    """Log-density of ``a = center + half_range · tanh(u)`` with ``u ~`` :class:`DiagGaussian` ``(mean, log_std)``.

    The change of variables: ``log π(a) = log N(u) − Σ_k [log half_range_k + log(1 − tanh(u_k)²)]``, with
    ``log(1 − tanh(u)²) = 2 (log 2 − u − softplus(−2u))`` (stable for large ``|u|``).

    Args:
        pre_tanh: ``[..., D]`` the Gaussian sample ``u``.
        mean: ``[..., D]``.
        log_std: ``[..., D]``.
        half_range: ``[D]`` ``(high − low) / 2`` of the action space.

    Returns:
        ``[...]`` the log-density of the squashed action (summed over the D dimensions).

    Raises:
        ValueError: if ``pre_tanh``'s shape is not ``mean``'s, or ``log_std`` does not broadcast to it.

    Example:
        >>> import torch
        >>> u = torch.zeros(1, 1)
        >>> round(squashed_gaussian_log_prob(u, u, u, torch.ones(1)).item(), 4)  # log N(0; 0, 1)
        -0.9189
    """
    softplus = torch.nn.functional.softplus
    log_jacobian = 2.0 * (math.log(2.0) - pre_tanh - softplus(-2.0 * pre_tanh)) + half_range.log()
    return DiagGaussian(mean, log_std).log_prob(pre_tanh) - log_jacobian.sum(-1)


def make_distribution(
    layout: ActionLayout,
    head_output: torch.Tensor,
    log_std: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> Categorical | FactoredCategorical | DiagGaussian:
    """Builds the distribution that matches an action layout.

    Args:
        layout: the agents' action layout.
        head_output: ``[..., layout.logits_size]``: logits for categorical layouts, means for a Box.
        log_std: log standard deviations broadcastable to ``head_output`` (Box only, required there).
        mask: ``[..., layout.mask_size]`` bool, True = allowed (categorical layouts only).

    Returns:
        :class:`Categorical` for Discrete, :class:`FactoredCategorical` for MultiDiscrete, :class:`DiagGaussian`
        for Box.

    Raises:
        ValueError: if the head output does not match the layout, a Box layout gets a mask or no ``log_std``.
    """
    if head_output.dim() == 0 or head_output.shape[-1] != layout.logits_size:
        raise ValueError(
            f"head output of shape {tuple(head_output.shape)} does not match the {layout.kind} action layout, "
            f"which needs {layout.logits_size} entries in the last dimension (ActionLayout.logits_size)."
        )
    if layout.kind == "discrete":
        return Categorical(head_output, mask)
    if layout.kind == "multidiscrete":
        return FactoredCategorical(head_output, layout.nvec, mask)
    if mask is not None:
        raise ValueError("a Box action layout takes no action mask; pass mask=None for continuous actions.")
    if log_std is None:
        raise ValueError("a Box action layout needs log_std (e.g. ActorCritic.log_std); got None.")
    return DiagGaussian(head_output, log_std)
