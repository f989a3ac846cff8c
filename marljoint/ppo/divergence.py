"""Divergence: a loss, gradient or parameter that is no longer a finite number stops the update.

The learner checks every minibatch's joint loss and the gradient norms its per-network clipping measures anyway, in
one reduction, before any optimizer steps: a non-finite gradient has a non-finite norm, so the check costs one small
reduction per minibatch. After each update it checks the parameters once. Only when something is found are the
loss terms and parameters searched for the first culprit, to name it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

__all__ = ["DIVERGENCE_FIX", "DivergenceError", "first_non_finite", "non_finite_parameter"]

DIVERGENCE_FIX = (
    "lower learning_rate (or critic_lr), keep max_grad_norm finite (e.g. 0.5), and check the scale of the rewards "
    "and observations (value_normalization and normalize_observations help)"
)
"""What a :class:`DivergenceError` advises."""


class DivergenceError(FloatingPointError):
    """Training diverged: a loss, a gradient or a parameter became NaN or infinite.

    Raised by the update before the optimizers step on a non-finite loss or gradient, and after the update when a
    parameter is no longer finite; the message names the metric, the agent or network, the iteration and the fix.

    Attributes:
        metric: what was not finite, e.g. ``"value_loss of agent 'agent_0'"``, ``"gradient norm of
            actor/agent_1"`` or ``"parameter actor.layers.0.weight of network agent_0"``.
        value: the value found (``nan``, ``inf`` or ``-inf``).
        iteration: the iteration in progress (1 for the first; ``None`` when the update was called outside an
            iteration count).
        note: what the caller did about it (a training run: which checkpoint holds the last good weights).
    """

    def __init__(self, metric: str, value: float, iteration: int | None = None, note: str = "") -> None:
        self.metric, self.value, self.iteration, self.note = metric, float(value), iteration, note
        where = "" if iteration is None else f" at iteration {iteration}"
        message = f"training diverged{where}: {metric} is {self.value}; {DIVERGENCE_FIX}"
        super().__init__(message + (f"; {note}" if note else ""))

    def at_iteration(self, iteration: int) -> DivergenceError:
        """The same error, naming ``iteration``."""
        return DivergenceError(self.metric, self.value, iteration, self.note)

    def with_note(self, note: str) -> DivergenceError:
        """The same error with ``note`` (e.g. which checkpoint was kept) at the end of the message."""
        return DivergenceError(self.metric, self.value, self.iteration, note)


def all_finite(values: Sequence[torch.Tensor]) -> bool:
    """Whether every element of ``values`` (floating-point tensors of any shape, on one device) is finite, read
    with one sync."""
    return bool(torch.isfinite(torch.cat([v.detach().reshape(-1) for v in values])).all())


def first_non_finite(named: Iterable[tuple[str, torch.Tensor]]) -> tuple[str, float] | None:
    """The first ``(name, value)`` whose tensor holds a non-finite element, or ``None``.

    Example:
        >>> first_non_finite([("a", torch.ones(2)), ("b", torch.tensor([1.0, float("nan")]))])
        ('b', nan)
    """
    for name, tensor in named:
        if not tensor.is_floating_point():
            continue
        bad = ~torch.isfinite(tensor.detach())
        if bool(bad.any()):
            return name, float(tensor.detach()[bad].reshape(-1)[0])
    return None


def non_finite_parameter(modules: Iterable[tuple[str, torch.nn.Module]]) -> tuple[str, float] | None:
    """The first parameter of ``(network name, module)`` pairs that is not finite, as ``("parameter P of network
    X", value)``, or ``None``; all parameters are checked in one reduction first."""
    modules = list(modules)
    params = [p for _, module in modules for p in module.parameters()]
    if not params or bool(torch.stack([torch.isfinite(p.detach()).all() for p in params]).all()):
        return None
    named = ((f"parameter {p} of network {net}", t) for net, module in modules for p, t in module.named_parameters())
    return first_non_finite(named)
