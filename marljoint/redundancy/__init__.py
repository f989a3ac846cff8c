"""Cross-agent redundancy penalties: the xcorr penalty, debiased linear CKA and unbiased RBF HSIC.

:class:`RedundancyPenalty` is an ``aux_fn`` for the joint trainer; the pure functions behind it are exported
too. See ``docs/redundancy.md`` for the formulas, the exact facts the tests pin, and when not to use it.
"""

from marljoint.redundancy.functional import (
    DEFAULT_EPS,
    RedundancyKind,
    agent_pairs,
    debiased_cka,
    feature_std,
    hsic_unbiased,
    linear_kernel,
    pairwise_cka,
    pairwise_hsic,
    pairwise_redundancy,
    pairwise_xcorr,
    rbf_hsic,
    rbf_kernel,
    xcorr_null_expectation,
    xcorr_redundancy,
)
from marljoint.redundancy.penalty import RedundancyPenalty

__all__ = [
    "DEFAULT_EPS",
    "RedundancyKind",
    "RedundancyPenalty",
    "agent_pairs",
    "debiased_cka",
    "feature_std",
    "hsic_unbiased",
    "linear_kernel",
    "pairwise_cka",
    "pairwise_hsic",
    "pairwise_redundancy",
    "pairwise_xcorr",
    "rbf_hsic",
    "rbf_kernel",
    "xcorr_null_expectation",
    "xcorr_redundancy",
]
