"""The algorithms a run trains: the :class:`Algorithm` protocol every trainer implements, and the ONE table that
maps each algorithm's name to its config type and builder.

The command line's choices, the run spec's validation, the docs' list and the conformance test read
:data:`ALGORITHMS`; a new algorithm is one config class, one trainer class and one row here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import torch

from marljoint.auxiliary import AuxFn
from marljoint.env.base import JointObs
from marljoint.env.spaces import JointSpec
from marljoint.run.errors import RunError

if TYPE_CHECKING:
    from marljoint.policies.joint import JointPolicy
    from marljoint.run.spec import RunSpec

__all__ = ["ALGORITHMS", "Algorithm", "AlgorithmEntry", "ExportRefused", "algorithm_entry"]


class ExportRefused(RunError):
    """An algorithm whose trained policy cannot be exported (or handed out per agent), with the reason and what to
    use instead."""


@runtime_checkable
class Algorithm(Protocol):
    """A trainer as the run driver (:func:`~marljoint.run.train.train_run`) drives it: every row of
    :data:`ALGORITHMS` builds one.

    Attributes:
        spec: the env's agents, groups and spaces.
        config: the resolved settings the run writes to ``config.toml`` (settings derived from the env filled in).
        derived: the settings derived from the env, each with the reason (written beside them).
        iteration: iterations completed.
        env_steps: env steps completed (one step of one env copy is one env step).
    """

    spec: JointSpec
    config: Any
    derived: dict[str, str]
    iteration: int
    env_steps: int

    @property
    def generator(self) -> torch.Generator:
        """The generator of the trainer's own sampling (evaluation restores it after use, so that training is the
        same with or without evaluations)."""
        ...

    def iterate(self, total: int | None = None, aux_fn: AuxFn | None = None) -> tuple[Any, Mapping[str, Any], float]:
        """One iteration (collection and update): ``(played, stats, seconds)``, for :meth:`iteration_metrics`.

        Args:
            total: the run's number of iterations (for schedules that anneal over the run).
            aux_fn: the cross-agent auxiliary loss added to the joint loss, or ``None``.
        """
        ...

    def iteration_metrics(self, played: Any, stats: Mapping[str, Any], seconds: float) -> dict[str, Any]:
        """One metrics.csv row: at least ``iteration``, ``env_steps``, ``agent_steps``, ``sps``, ``episodes``,
        ``episode_return_mean``, ``episode_length_mean`` and ``episode_return/<agent>``, plus the algorithm's
        own columns (its regulariser's included)."""
        ...

    def act(self, obs: JointObs, deterministic: bool = True) -> list[np.ndarray]:
        """Actions for a :class:`~marljoint.JointObs` of E copies: per group ``[E, n_g, ...]`` (evaluation)."""
        ...

    def acting_policy(self) -> JointPolicy:
        """The policy that acts, for export and per-agent policies.

        Raises:
            ExportRefused: where the algorithm acts with something else (Q networks, its own actors), saying what
                to use instead.
        """
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything an exact resume needs except the env copies."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` output into a trainer built for the same env and config."""
        ...

    def env_state(self) -> dict[str, Any] | None:
        """The env copies mid-episode and their noise generators (``None`` before the first step)."""
        ...

    def load_env_state(self, state: Mapping[str, Any] | None, trust_snapshot: bool = False) -> None:
        """Restores :meth:`env_state` output (``None``: the copies are reset at the next collection)."""
        ...

    def close(self) -> None:
        """Releases what the trainer started (worker processes, actors); the env belongs to the caller."""
        ...


@dataclass(frozen=True)
class AlgorithmEntry:
    """One row of :data:`ALGORITHMS`.

    Attributes:
        name: the algorithm's name (``--algorithm NAME``, ``algorithm = "NAME"`` in ``config.toml``).
        family: ``"ppo"`` (on-policy, joint PPO update), ``"value"`` (value decomposition, off-policy),
            ``"actor-critic"`` (off-policy actor-critics with centralised critics) or ``"game"`` (game solvers).
        summary: one line for ``--help`` and the docs' list.
        command: the command line that runs it, e.g. ``("train", "--algorithm", "vdn")``.
        config_type: the type of its own settings.
        build: ``build(spec, env)``, the trainer of a run on its env.
        docs: the docs page that explains it.
        exports: whether ``marljoint export`` writes its policy (else it refuses, with the reason).
    """

    name: str
    family: str
    summary: str
    command: tuple[str, ...]
    config_type: type
    build: Callable[[RunSpec, Any], Algorithm]
    docs: str
    exports: bool


def _build_ppo(spec: RunSpec, env: Any) -> Algorithm:
    from marljoint.run.build import build_ppo_trainer

    return build_ppo_trainer(spec, env)


def _build_offpolicy(spec: RunSpec, env: Any) -> Algorithm:
    from marljoint.run.offpolicy import build_offpolicy_trainer

    return build_offpolicy_trainer(spec, env)


def _rows() -> dict[str, AlgorithmEntry]:
    from marljoint.offpolicy.config import OffPolicyConfig
    from marljoint.ppo.config import JointTrainerConfig

    rows = [
        AlgorithmEntry(
            "mappo",
            "ppo",
            "PPO with a centralised critic: every agent's loss summed into one joint update",
            ("train", "--algorithm", "mappo"),
            JointTrainerConfig,
            _build_ppo,
            "concepts.md",
            True,
        ),
        AlgorithmEntry(
            "ippo",
            "ppo",
            "PPO with per-agent critics: every agent's loss summed into one joint update",
            ("train", "--algorithm", "ippo"),
            JointTrainerConfig,
            _build_ppo,
            "concepts.md",
            True,
        ),
        AlgorithmEntry(
            "vdn",
            "value",
            "value decomposition: the team's Q value is the sum of the agents' utilities (off-policy)",
            ("train", "--algorithm", "vdn"),
            OffPolicyConfig,
            _build_offpolicy,
            "value_decomposition.md",
            False,
        ),
        AlgorithmEntry(
            "qmix",
            "value",
            "value decomposition: a monotonic mixing network of the agents' utilities (off-policy)",
            ("train", "--algorithm", "qmix"),
            OffPolicyConfig,
            _build_offpolicy,
            "value_decomposition.md",
            False,
        ),
        AlgorithmEntry(
            "masac",
            "actor-critic",
            "multi-agent soft actor-critic: stochastic actors, centralised twin critics (off-policy)",
            ("train", "--algorithm", "masac"),
            OffPolicyConfig,
            _build_offpolicy,
            "masac.md",
            False,
        ),
        AlgorithmEntry(
            "maddpg",
            "actor-critic",
            "multi-agent DDPG: deterministic actors, centralised critics (off-policy)",
            ("train", "--algorithm", "maddpg"),
            OffPolicyConfig,
            _build_offpolicy,
            "masac.md",
            False,
        ),
    ]
    return {row.name: row for row in rows}


class _Table(Mapping[str, AlgorithmEntry]):
    """The table, built on first use (its rows import every family)."""

    def __init__(self) -> None:
        self._rows: dict[str, AlgorithmEntry] | None = None

    def _table(self) -> dict[str, AlgorithmEntry]:
        if self._rows is None:
            self._rows = _rows()
        return self._rows

    def __getitem__(self, name: str) -> AlgorithmEntry:
        return self._table()[name]

    def __iter__(self) -> Any:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


ALGORITHMS: Mapping[str, AlgorithmEntry] = _Table()
"""Every algorithm marljoint runs, by name."""


def algorithm_entry(name: str) -> AlgorithmEntry:
    """The row of ``name``.

    Raises:
        RunError: for an unknown name, listing the known ones.
    """
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise RunError(f"algorithm must be one of {list(ALGORITHMS)}, got {name!r}") from None
