"""The collector a :class:`~marljoint.collect.CollectionConfig` asks for."""

from __future__ import annotations

from typing import Any

from marljoint.collect.base import Collector
from marljoint.collect.config import CollectionConfig
from marljoint.collect.local import LocalCollector
from marljoint.env.base import JointEnv

__all__ = ["make_collector"]


def make_collector(
    env: JointEnv, config: CollectionConfig, seed: int, torch_threads: int | None = None
) -> Collector:
    """Builds the collector of ``config.backend`` over ``env``.

    Args:
        env: the env copies; a :class:`~marljoint.env.SubprocessJointEnv` for ``"subprocess"``, an env with an
            ``env_fn`` factory for ``"ray"`` (its copies are rebuilt in the actors).
        config: the backend and its workers.
        seed: the seed of the env resets and of the copies' noise generators.
        torch_threads: torch threads of each worker process (default 1).

    Raises:
        ValueError: if the env does not fit the backend (with the fix), or has fewer copies than Ray workers.
    """
    if config.backend == "local":
        return LocalCollector(env, seed)
    inner = _worker_collector(env, config, seed, torch_threads)
    if config.policy_lag:
        from marljoint.collect.overlap import OverlappedCollector

        return OverlappedCollector(inner)
    return inner


def _worker_collector(
    env: JointEnv, config: CollectionConfig, seed: int, torch_threads: int | None
) -> Collector:
    """The subprocess or Ray collector of ``config``."""
    if config.backend == "subprocess":
        from marljoint.collect.subprocess import SubprocessCollector
        from marljoint.env.subprocess import SubprocessJointEnv

        if not isinstance(env, SubprocessJointEnv):
            raise ValueError(
                f"collection backend 'subprocess' plays the rollouts in a SubprocessJointEnv's workers, but the env "
                f"is a {type(env).__name__}; build it with config.collection.make_env(env_fn, num_envs, seed), or "
                "collect with backend 'local'"
            )
        return SubprocessCollector(env, seed, torch_threads, balance=config.balance)
    env_fn: Any = getattr(env, "env_fn", None)
    if env_fn is None:
        raise ValueError(
            f"{config.workers} Ray workers rebuild the env copies from a factory, but {type(env).__name__} has no "
            "env_fn; build the env with PettingZooJointEnv or CollectionConfig.make_env"
        )
    from marljoint.collect.ray import RayCollector

    return RayCollector(env_fn, env.spec, env.num_envs, config.workers, seed, torch_threads, balance=config.balance)
