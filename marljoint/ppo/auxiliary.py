"""The auxiliary-loss interface, re-exported from :mod:`marljoint.auxiliary` where it lives (both the trainer and
the auxiliary losses of :mod:`marljoint.redundancy` import it from there)."""

from marljoint.auxiliary import AuxFn, AuxOutput

__all__ = ["AuxFn", "AuxOutput"]
