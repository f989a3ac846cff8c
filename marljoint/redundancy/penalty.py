"""RedundancyPenalty: the cross-agent redundancy penalty, usable directly as the trainer's ``aux_fn``."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from marljoint.auxiliary import AuxOutput
from marljoint.redundancy.functional import (
    DEFAULT_EPS,
    REDUNDANCY_KINDS,
    _centered,
    _safe_sqrt,
    agent_pairs,
    pairwise_redundancy,
    validate_features,
)

__all__ = ["RedundancyPenalty"]

_REDUCTIONS = ("mean", "sum")


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class RedundancyPenalty:
    """Penalise redundancy between the agents' encoder features; pass it as ``update(rollout, aux_fn=...)``.

    ``loss = coef · reduce_pairs(value_ij) [+ coef · reduce_agents(mean_k relu(variance_floor - std_ik))]``,
    where ``value_ij`` is :func:`~marljoint.redundancy.pairwise_xcorr`,
    :func:`~marljoint.redundancy.pairwise_cka` or :func:`~marljoint.redundancy.pairwise_hsic` on the rows
    where both agents are alive.

    Example:
        >>> import torch
        >>> penalty = RedundancyPenalty(kind="xcorr", coef=0.1)
        >>> z = torch.randn(64, 8)
        >>> out = penalty([z, z.clone()], torch.ones(64, 2, dtype=torch.bool))
        >>> round(out.metrics["redundancy/xcorr/0-1"], 3) >= 1 / 8
        True
    """

    kind: str = "xcorr"
    """``"xcorr"`` (normalised squared cross-correlation; linear, O(B d²) per pair), ``"cka"`` (debiased
    linear CKA; rotation-invariant, O(B d²)) or ``"hsic"`` (unbiased RBF HSIC; nonlinear, O(B² d))."""

    coef: float = 1.0
    """λ, the weight of the penalty in the joint loss (>= 0). 0 returns an exactly-zero loss with no graph, so
    training is bit-identical to passing no aux_fn, while the metrics are still computed."""

    reduction: str = "mean"
    """``"mean"``: average over the ``N (N - 1) / 2`` agent pairs (and the floor term over the N agents), so λ
    means the same for any N. ``"sum"``: sum over pairs (and agents)."""

    debias: bool = False
    """``xcorr`` only: subtract the exact expectation under independence, ``1/(B_ij - 1)`` for ``eps = 0``
    (see :func:`~marljoint.redundancy.xcorr_null_expectation`), so unrelated features score about 0."""

    variance_floor: float | None = None
    """γ > 0 adds, scaled by ``coef``, the VICReg-style hinge ``mean_k relu(γ - std_k)`` per agent, where
    ``std_k`` is the biased standard deviation of feature k over the agent's alive rows. It stops an agent
    from shrinking its features towards ``sqrt(eps)``, where the standardisation damps them and the penalty
    drops. It prevents that slide rather than reversing it: see the trade-off in ``docs/redundancy.md``. None:
    no hinge."""

    eps: float = DEFAULT_EPS
    """Added to each feature's variance inside the square root when standardising for ``xcorr`` (> 0). Keeps
    constant features finite; features with std well below ``sqrt(eps)`` are damped towards 0."""

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or self.kind not in REDUNDANCY_KINDS:
            kinds = ", ".join(map(repr, REDUNDANCY_KINDS))
            raise ValueError(f"kind={self.kind!r} is not a redundancy kind; use one of {kinds}")
        if not _is_real(self.coef):
            raise TypeError(f"coef must be a float, got {type(self.coef).__name__}; e.g. coef=0.1")
        if not (math.isfinite(self.coef) and self.coef >= 0):
            raise ValueError(
                f"coef={self.coef!r} must be a finite number >= 0 (a negative coef rewards redundancy); "
                "use coef=0 to switch the penalty off"
            )
        if self.reduction not in _REDUCTIONS:
            raise ValueError(
                f"reduction={self.reduction!r} is not supported; use 'mean' (average over agent pairs, "
                "independent of N) or 'sum'"
            )
        if not isinstance(self.debias, bool):
            raise TypeError(f"debias must be a bool, got {type(self.debias).__name__}")
        if self.debias and self.kind != "xcorr":
            raise ValueError(
                f"debias=True applies to kind='xcorr' only; kind={self.kind!r} is unbiased already. "
                "Drop debias=True or use kind='xcorr'"
            )
        if self.variance_floor is not None:
            if not _is_real(self.variance_floor):
                raise TypeError(
                    f"variance_floor must be a float or None, got {type(self.variance_floor).__name__}"
                )
            if not (math.isfinite(self.variance_floor) and self.variance_floor > 0):
                raise ValueError(
                    f"variance_floor={self.variance_floor!r} must be a finite number > 0 (a target feature "
                    "standard deviation, e.g. 1.0), or None for no floor"
                )
        if not _is_real(self.eps):
            raise TypeError(
                f"eps must be a float, got {type(self.eps).__name__}; the default is {DEFAULT_EPS}"
            )
        if not (math.isfinite(self.eps) and self.eps > 0):
            raise ValueError(
                f"eps={self.eps!r} must be a finite number > 0: it keeps (near-)constant features finite; "
                f"the default is {DEFAULT_EPS}"
            )

    def __call__(self, features: Sequence[torch.Tensor], alive: torch.Tensor | None = None) -> AuxOutput:
        """Compute the penalty and its metrics on one minibatch.

        Args:
            features: per agent in ``possible_agents`` order, ``[B, d_i]`` encoder features on the same B
            rows.
            alive: ``[B, N]`` bool; a pair uses the rows where both agents are alive. None: all alive.

        Returns:
            ``AuxOutput(loss, metrics)``: ``loss`` a scalar in the features' dtype (already scaled by
            ``coef``); ``metrics`` holds ``"redundancy/<kind>/<i>-<j>"`` (raw value per pair, unscaled,
            debiased if ``debias``), ``"redundancy/<kind>"`` (their mean; 0 with one agent),
            ``"redundancy/feature_std/<i>"`` (agent i's mean per-feature standard deviation over its alive
            rows; NaN if it has none) and, with a ``variance_floor``, ``"redundancy/variance_hinge"`` (the
            hinge, reduced over agents, unscaled).

        Raises:
            ValueError: a feature or alive shape does not match (the message names the agent and both shapes).
            TypeError: wrong container or dtype.
        """
        _, num_agents = validate_features(features, alive)
        scaled = self.coef != 0
        with contextlib.nullcontext() if scaled else torch.no_grad():
            values = pairwise_redundancy(features, alive, kind=self.kind, eps=self.eps, debias=self.debias)
            variances, counts = self._agent_variances(features, alive)
            total = self._reduce(values)
            hinge = None
            if self.variance_floor is not None:
                hinge = self._reduce(self._hinges(variances, counts))
                total = total + hinge
        loss = (
            self.coef * total
            if scaled
            else torch.zeros((), dtype=features[0].dtype, device=features[0].device)
        )
        return AuxOutput(loss, self._metrics(values, variances, counts, hinge, num_agents))

    def _reduce(self, values: torch.Tensor) -> torch.Tensor:
        if self.reduction == "sum" or values.numel() == 0:
            return values.sum()
        return values.mean()

    @staticmethod
    def _agent_variances(
        features: Sequence[torch.Tensor], alive: torch.Tensor | None
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Per agent, the biased variance ``[d_i]`` over its alive rows, and the row counts ``[N]``."""
        variances, counts = [], []
        for i, z in enumerate(features):
            centered, count = _centered(z, None if alive is None else alive[:, i])
            variances.append(centered.square().sum(dim=0) / count.clamp_min(1))
            counts.append(count)
        return variances, torch.stack(counts)

    def _hinges(self, variances: list[torch.Tensor], counts: torch.Tensor) -> torch.Tensor:
        """``[N]``: ``mean_k relu(γ - std_k)`` per agent; 0 for an agent with fewer than 2 rows.

        The plain std (no eps): its gradient with respect to a feature's scale stays constant as the std
        shrinks, whereas ``sqrt(var + eps)`` would fade exactly where the shortcut it guards against opens up.
        """
        hinges = torch.stack([torch.relu(self.variance_floor - _safe_sqrt(var)).mean() for var in variances])
        return torch.where(counts >= 2, hinges, torch.zeros_like(hinges))

    def _metrics(
        self,
        values: torch.Tensor,
        variances: list[torch.Tensor],
        counts: torch.Tensor,
        hinge: torch.Tensor | None,
        num_agents: int,
    ) -> dict[str, float]:
        with torch.no_grad():
            stds = torch.stack([var.sqrt().mean() for var in variances])
            stds = torch.where(counts > 0, stds, torch.full_like(stds, float("nan")))
            mean_value = values.mean() if values.numel() else values.new_zeros(())
            extra = [mean_value] if hinge is None else [mean_value, hinge]
            flat = torch.cat([values.detach(), stds, torch.stack(extra).detach()]).tolist()
        num_pairs = values.numel()
        metrics = {
            f"redundancy/{self.kind}/{i}-{j}": flat[p] for p, (i, j) in enumerate(agent_pairs(num_agents))
        }
        metrics[f"redundancy/{self.kind}"] = flat[num_pairs + num_agents]
        for i in range(num_agents):
            metrics[f"redundancy/feature_std/{i}"] = flat[num_pairs + i]
        if hinge is not None:
            metrics["redundancy/variance_hinge"] = flat[-1]
        return metrics
