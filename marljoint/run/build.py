"""What a run is built of: its env copies and its trainer, and the checks before they are built (the minibatch
size, the memory the run needs)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, TextIO

from marljoint.ppo.config import JointTrainerConfig
from marljoint.run import memory
from marljoint.run.algorithms import Algorithm, run_entry
from marljoint.run.errors import RunError
from marljoint.run.memory import format_bytes
from marljoint.run.offpolicy import check_offpolicy_env
from marljoint.run.registry import EnvSpecError, ResolvedEnv, resolve_env, supersuit_wrappers, wrapped_factory
from marljoint.run.spec import RunSpec

if TYPE_CHECKING:
    from marljoint.distributed.ranks import RankGroup

__all__ = ["LONG_BUILD_SECONDS", "build_trainer", "check_memory", "check_minibatch", "make_env", "say"]


def _env_factory(spec: RunSpec, **extra_kwargs: Any) -> Any:
    """The factory of one copy of the run's env, wrappers applied."""
    try:
        resolved: ResolvedEnv = resolve_env(spec.env, dict(spec.env_kwargs))
    except EnvSpecError as exc:
        raise RunError(str(exc)) from None
    try:
        return wrapped_factory(resolved.env_fn(**extra_kwargs), supersuit_wrappers(spec.wrappers))
    except Exception as exc:  # env constructors raise anything for bad keyword arguments
        raise RunError(f"env {spec.env!r} with kwargs {dict(spec.env_kwargs)} cannot be built: {exc}") from None


def make_env(
    spec: RunSpec,
    num_envs: int | None = None,
    seed: int | None = None,
    ranks: RankGroup | None = None,
    **extra_kwargs: Any,
) -> Any:
    """Builds the JointEnv of a run: the env its collection backend collects from
    (:meth:`~marljoint.collect.CollectionConfig.make_env`: worker processes for ``"subprocess"``).

    Args:
        spec: the run.
        num_envs: copies (``spec.trainer.num_envs`` when ``None``).
        seed: seed of the first reset (``spec.trainer.seed`` when ``None``).
        ranks: the run's data-parallel ranks, or ``None``: with ranks, only this rank's slice of the copies
            (:meth:`~marljoint.distributed.ranks.RankGroup.slice_of`), in this process, each seeded as its global
            copy (``first_copy``).
        **extra_kwargs: extra env keyword arguments (e.g. ``render_mode``).

    Raises:
        RunError: if the env cannot be resolved or built (naming the env and the reason); with ranks, for a
            collection backend other than ``"local"`` or fewer copies than ranks.
    """
    factory = _env_factory(spec, **extra_kwargs)
    copies = spec.trainer.num_envs if num_envs is None else num_envs
    seed = spec.trainer.seed if seed is None else seed
    if ranks is not None:
        return _rank_env(spec, factory, copies, seed, ranks)
    try:
        return spec.trainer.collection.make_env(factory, num_envs=copies, seed=seed)
    except Exception as exc:  # env constructors raise anything for bad keyword arguments
        raise RunError(f"env {spec.env!r} with kwargs {dict(spec.env_kwargs)} cannot be built: {exc}") from None


def _rank_env(spec: RunSpec, factory: Any, copies: int, seed: int, ranks: RankGroup) -> Any:
    """This rank's slice of the run's copies (:func:`make_env` with ranks)."""
    from marljoint.env import PettingZooJointEnv

    backend = spec.trainer.collection.backend
    if backend != "local":
        raise RunError(
            f"{ranks.world_size} ranks each step their own env copies in-process, so the collection backend "
            f"{backend!r} (--env-workers / --ray) cannot be combined with them; drop --env-workers and --ray, or "
            "train with one rank"
        )
    if copies < ranks.world_size:
        raise RunError(
            f"num_envs = {copies} env copies cannot be split over {ranks.world_size} ranks (each needs at least one); "
            f"raise num_envs to at least {ranks.world_size} or use fewer ranks"
        )
    start, stop = ranks.slice_of(copies)
    try:
        return PettingZooJointEnv(factory, num_envs=stop - start, seed=seed, first_copy=start)
    except Exception as exc:  # env constructors raise anything for bad keyword arguments
        raise RunError(f"env {spec.env!r} with kwargs {dict(spec.env_kwargs)} cannot be built: {exc}") from None


def check_minibatch(config: JointTrainerConfig) -> None:
    """Refuses a ``minibatch_size`` larger than the rows of an update (a minibatch can only hold them all).

    Raises:
        RunError: naming both numbers and the fix.
    """
    rows = config.batch_rows
    if config.num_minibatches is None and config.minibatch_size > rows:
        raise RunError(
            f"minibatch_size = {config.minibatch_size} is more than the {rows} rows of an update (rollout_steps "
            f"{config.rollout_steps} x num_envs {config.num_envs}); set minibatch_size to at most {rows}, raise "
            "rollout_steps or num_envs, or set num_minibatches instead"
        )


LONG_BUILD_SECONDS = 30.0
"""Building the env copies is announced when one copy's build time says it will take longer than this."""


def check_memory(spec: RunSpec, stream: TextIO | None = None) -> Any:
    """Refuses a run whose rollout storage, update and env copies would not fit in the memory available, before
    the env copies are built: one copy is built, measured and closed (:mod:`marljoint.run.memory`). An off-policy
    run is checked by :func:`~marljoint.run.offpolicy.check_offpolicy_env` instead (its replay buffer and networks,
    and an env it cannot learn on). A build of the copies expected to take longer than :data:`LONG_BUILD_SECONDS`
    is announced on ``stream``.

    Returns:
        The :class:`~marljoint.run.memory.MemoryEstimate` (an ``OffPolicyMemory`` for an off-policy run).

    Raises:
        RunError: with the estimate, the memory available and the fix; or if the env cannot be built.
    """
    from marljoint.collect.config import CollectionConfig

    local = dataclasses.replace(spec, trainer=spec.trainer.replace(collection=CollectionConfig()))
    probe = make_env(local, num_envs=1)
    try:
        joint_spec = probe.spec
    finally:
        probe.close()
    try:
        per_copy, seconds = memory.measure_env_copy(_env_factory(spec), seed=spec.trainer.seed)
    except Exception:  # the copy above was built and reset by the adapter: the estimate goes without its size
        per_copy, seconds = 0, 0.0
    if run_entry(spec).replays:  # a replay buffer, not a rollout; and envs it cannot learn on
        from marljoint.run.exploitability import zero_sum_env

        estimate = check_offpolicy_env(spec, joint_spec, per_copy, zero_sum_env(spec.env, spec.env_kwargs))
    else:
        estimate = memory.estimate_memory(joint_spec, spec.trainer, per_copy)
        _refuse_oversized(estimate, spec.trainer, joint_spec.num_agents)
    copies = spec.trainer.num_envs
    if stream is not None and seconds * copies > LONG_BUILD_SECONDS:
        expected = f"about {seconds * copies:.0f} s ({seconds * 1e3:.1f} ms each)"
        say(stream, True, f"building {copies:,} env copies: {expected}")
    return estimate


def _refuse_oversized(estimate: Any, config: JointTrainerConfig, agents: int) -> None:
    copies = config.num_envs
    parts = (
        f"the rollout storage of {config.rollout_steps} steps x {copies:,} env copies x {agents} agents needs "
        f"{format_bytes(estimate.rollout)}, the update {format_bytes(estimate.update)}, the {copies:,} env copies "
        f"{format_bytes(estimate.env_copies)} ({format_bytes(estimate.per_copy)} each)"
    )
    fix = "lower rollout_steps or num_envs (or shrink the observations, e.g. with --wrap resize_v1:x_size=...)"
    for needed, free, where in (
        (estimate.host, memory.available_memory(), "memory"),
        (estimate.device, memory.available_device_memory(estimate.on_device), f"free memory on {estimate.on_device}"),
    ):
        if free is not None and needed > free:
            raise RunError(
                f"{parts}: about {format_bytes(needed)} of {where}, but only {format_bytes(free)} is available; {fix}"
            )


def build_trainer(spec: RunSpec, env: Any, ranks: RankGroup | None = None) -> Algorithm:
    """The trainer of a run on ``env``: the one its row of :data:`~marljoint.run.algorithms.ALGORITHMS` builds
    (:func:`~marljoint.run.algorithms.run_entry`).

    Args:
        spec: the run.
        env: its env (with ranks, this rank's slice of the copies: :func:`make_env` with the same ``ranks``).
        ranks: the run's data-parallel ranks, or ``None`` (one process). The rows whose
            :attr:`~marljoint.run.algorithms.AlgorithmEntry.ranks_refusal` is ``None`` train on ranks.

    Raises:
        RunError: for settings or an env the algorithm cannot train, or ranks for an algorithm whose row refuses
            them (saying why and how it parallelises instead).
    """
    entry = run_entry(spec)
    if ranks is None:
        return entry.build(spec, env)
    if entry.ranks_refusal is not None:
        raise RunError(
            f"algorithm {entry.name!r} does not train on data-parallel ranks: {entry.ranks_refusal}; train it with "
            "one rank"
        )
    return entry.build(spec, env, ranks)


def say(stream: TextIO, enabled: bool, text: str) -> None:
    """Writes one line of the run's messages to ``stream`` when ``enabled``."""
    if enabled:
        stream.write(text + "\n")
        stream.flush()
