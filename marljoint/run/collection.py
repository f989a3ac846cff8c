"""A run's collection written out for the machine: ``marljoint train --env-workers auto``."""

from __future__ import annotations

from marljoint.collect.config import CollectionConfig
from marljoint.run.algorithms import run_entry
from marljoint.run.spec import RunSpec
from marljoint.threads import auto_workers

__all__ = ["with_auto_workers"]


def with_auto_workers(
    spec: RunSpec, policy_lag: int | None = None, balance: bool = False, cores: int | None = None
) -> RunSpec:
    """``spec`` with one env worker process per core this process may use but the learner's (or per core of
    ``cores``; :func:`marljoint.threads.auto_workers`), at most one per env copy; in-process collection on one core.

    Args:
        spec: the run.
        policy_lag: the workers' policy lag; ``None``: 1 for feed-forward policies, where the decoupled update was
            measured to learn as lag 0 does, 0 for recurrent ones and for off-policy runs (which act at every env
            step, so their workers only step the copies).
        balance: hand env copies between the workers by their measured speed.
        cores: the cores to plan for (``None``: this process's).
    """
    workers = auto_workers(spec.trainer.num_envs, cores)
    if workers == 0:  # one core: the learner collects in-process
        return RunSpec.from_dict({"collection": {"backend": "local"}}, base=spec)
    lag = policy_lag
    if lag is None:
        lag = int(spec.trainer.recurrent is None and not run_entry(spec).replays)
    collection = CollectionConfig("subprocess", workers=workers, policy_lag=lag, balance=bool(balance))
    return RunSpec.from_dict({"collection": collection.to_dict()}, base=spec)
