"""The value normaliser, re-exported from :mod:`marljoint.policies.normalizer` where it lives."""

from marljoint.policies.normalizer import RunningNormalizer

__all__ = ["RunningNormalizer"]
