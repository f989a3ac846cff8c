"""How rollouts are collected: one frozen, validated choice of backend and workers."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["BACKENDS", "CollectionConfig"]

BACKENDS = ("local", "subprocess", "ray")


@dataclass(frozen=True)
class CollectionConfig:
    """Where the env copies step and the policies act during a rollout.

    Every backend gives the same rollout, bit for bit, for the same seed and number of env copies: copy e samples
    from its own noise generator and is seeded by its global index, whichever worker holds it.

    Example:
        >>> CollectionConfig(backend="subprocess", workers=2)
        CollectionConfig(backend='subprocess', workers=2, policy_lag=0, balance=False)
    """

    backend: str = "local"
    """``"local"``: this process steps the env it is given and runs the policies (the env may itself be a
    :class:`~marljoint.env.SubprocessJointEnv`, which then only steps). ``"subprocess"``: a
    :class:`~marljoint.env.SubprocessJointEnv` of ``workers`` processes (built by :meth:`make_env`), whose
    workers also run CPU copies of the policies for their own copies. ``"ray"``: ``workers`` Ray actors
    (``pip install "marljoint[ray]"``), each stepping a slice of the copies with a CPU copy of the policies."""
    workers: int = 2
    """Worker processes (``"subprocess"``) or Ray actors (``"ray"``); each holds a contiguous slice of the env
    copies (:func:`~marljoint.collect.split_copies`). Not used by ``"local"``."""

    policy_lag: int = 0
    """0: every rollout is collected with the current weights (the workers wait through each update). 1: the
    workers collect rollout k + 1 with the weights of update k − 1 while the learner computes update k
    (multi-process backends only). The learner then runs decoupled PPO: the clipped ratio is taken against the
    log-probs of the weights the update starts from (the proximal policy), and each row's clipped surrogate is
    multiplied by the unclipped importance weight ``π_prox / π_behaviour``, ``π_behaviour`` coming from the
    log-probs stored in the rollout. The schedule is fixed, so runs stay seeded and bit-identical across backends
    and resume."""

    balance: bool = False
    """Hand env copies from slow workers to fast ones by their measured speed (multi-process backends;
    :class:`~marljoint.collect.balance.WorkBalancer`), so that a worker on a busier core does not idle the others.
    A copy's stream does not depend on the worker that holds it, so the rollouts are the same bits either way."""

    def __post_init__(self) -> None:
        if self.policy_lag not in (0, 1) or isinstance(self.policy_lag, bool):
            raise ValueError(f"collection policy_lag must be 0 or 1, got {self.policy_lag!r}")
        if self.policy_lag and self.backend == "local":
            raise ValueError(
                "policy_lag=1 overlaps collection in worker processes with the update; backend 'local' collects in "
                "this process, so use backend 'subprocess' or 'ray' with it (or policy_lag=0)"
            )
        if not isinstance(self.balance, bool):
            raise ValueError(f"collection balance must be true or false, got {self.balance!r}")
        if self.balance and self.backend == "local":
            raise ValueError(
                "balance=True hands env copies between worker processes; backend 'local' has none, so use backend "
                "'subprocess' or 'ray' with it (or balance=False)"
            )
        if self.backend not in BACKENDS:
            raise ValueError(
                f"collection backend must be one of {list(BACKENDS)}, got {self.backend!r} ('local': this process, "
                "'subprocess': worker processes on this machine, 'ray': Ray actors)"
            )
        if not isinstance(self.workers, int) or isinstance(self.workers, bool) or self.workers < 1:
            raise ValueError(f"collection workers must be a positive integer, got {self.workers!r}")

    @property
    def multiprocess(self) -> bool:
        """Whether the policies act in other processes (``"subprocess"`` or ``"ray"``)."""
        return self.backend != "local"

    def make_env(self, env_fn: Any, num_envs: int, seed: int | None = None) -> Any:
        """The JointEnv this backend collects from: a :class:`~marljoint.env.SubprocessJointEnv` of
        :attr:`workers` processes for ``"subprocess"``, else a :class:`~marljoint.PettingZooJointEnv` (the Ray
        actors rebuild their copies from its ``env_fn``).

        Args:
            env_fn: a PettingZoo env factory or module.
            num_envs: E, the env copies.
            seed: seed of the first reset.
        """
        from marljoint.env import PettingZooJointEnv, SubprocessJointEnv

        if self.backend == "subprocess":
            return SubprocessJointEnv(env_fn, num_envs=num_envs, num_workers=self.workers, seed=seed)
        return PettingZooJointEnv(env_fn, num_envs=num_envs, seed=seed)

    def replace(self, **changes: Any) -> CollectionConfig:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (``policy_lag`` only when it is not 0 and ``balance`` only when it is on: a
        collection that leaves them at their defaults writes neither)."""
        out = dataclasses.asdict(self)
        if not out["policy_lag"]:
            del out["policy_lag"]
        if not out["balance"]:
            del out["balance"]
        return out

    @classmethod
    def from_options(
        cls,
        *,
        env_workers: int | str | None = None,
        ray: bool = False,
        ray_address: str | None = None,
        num_workers: int | None = None,
        policy_lag: int | None = None,
        balance: bool = False,
    ) -> CollectionConfig | None:
        """The collection that ``marljoint train``'s options choose, each keyword named after its option:
        ``--env-workers K`` (``"subprocess"``, K workers; 0: ``"local"``, in this process), ``--ray``,
        ``--ray-address`` or ``--num-workers K`` (``"ray"``, K actors, 2 by default), with ``--policy-lag`` and
        ``--balance`` on top.

        Returns:
            The config, or ``None`` when no option chooses a backend (the run's own settings decide) and for
            ``env_workers="auto"``, whose workers are chosen for the machine once the run's env copies are known.

        Raises:
            ValueError: for two backends at once, or ``policy_lag=1`` or ``balance`` without worker processes,
                naming the options and the fix.

        Example:
            >>> CollectionConfig.from_options(env_workers=2, policy_lag=1)
            CollectionConfig(backend='subprocess', workers=2, policy_lag=1, balance=False)
        """
        wants_ray = ray or ray_address is not None or num_workers is not None
        if env_workers is not None and wants_ray:
            raise ValueError(
                "--env-workers (worker processes on this machine) and --ray/--num-workers (Ray rollout workers) are "
                "two ways to collect on several cores; choose one"
            )
        if env_workers == "auto":
            return None
        if wants_ray:
            chosen: CollectionConfig | None = cls("ray", workers=2 if num_workers is None else num_workers)
        elif env_workers == 0:  # in this process, said explicitly
            chosen = cls()
        else:
            chosen = None if env_workers is None else cls("subprocess", workers=env_workers)  # type: ignore[arg-type]
        if env_workers == 0 and (policy_lag or balance):
            raise ValueError(
                "--env-workers 0 collects in this process, which has no workers to overlap or balance; drop "
                "--policy-lag 1 and --balance, or give --env-workers K"
            )
        if policy_lag and chosen is None:
            raise ValueError(
                "--policy-lag 1 overlaps collection in worker processes with the update; add --env-workers K or "
                "--ray (in-process collection cannot overlap)"
            )
        if balance and chosen is None:
            raise ValueError(
                "--balance hands env copies between worker processes; add --env-workers K or --ray (in-process "
                "collection has no workers)"
            )
        if chosen is None:
            return None
        return chosen.replace(policy_lag=policy_lag or 0, balance=bool(balance))

    @classmethod
    def from_value(cls, value: CollectionConfig | Mapping[str, Any] | str) -> CollectionConfig:
        """A config from itself, a mapping of its fields (a ``config.toml`` table) or a backend name.

        Raises:
            ValueError: for unknown keys (naming the valid ones) or invalid values.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            return cls(backend=value)
        if isinstance(value, Mapping):
            names = {f.name for f in dataclasses.fields(cls)}
            unknown = sorted(set(value) - names)
            if unknown:
                raise ValueError(f"unknown collection setting(s) {unknown}; valid: {sorted(names)}")
            return cls(**value)
        raise ValueError(
            f'collection must be a CollectionConfig, a table such as {{backend = "subprocess", workers = 2}} or a '
            f"backend name, got {value!r}"
        )
