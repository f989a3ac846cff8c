"""The algorithms a run trains: the :class:`Algorithm` protocol every trainer implements, and the ONE table that
maps each algorithm's name to its config type and builder.

The command line's ``--algorithm`` choices and help, the run spec's validation (:func:`check_run_algorithm`), the
trainer a run builds (:func:`run_entry`), the docs' list (``docs/algorithms.md``, checked against the table by a
test) and the conformance test (``tests/run/test_algorithm_conformance.py``) read :data:`ALGORITHMS`; a new
algorithm is one config class, one trainer class and one row here.

Where the contract differs from its first version: :meth:`Algorithm.acting_policy` of a trainer below the run
layer refuses with :class:`~marljoint.policies.NoActingPolicy` (the packages of the trainers cannot import the run
layer); :func:`acting_policy_of` turns that into :class:`ExportRefused`, with what to use instead. A row's ``build``
takes the run's :class:`~marljoint.run.spec.RunSpec` typed ``Any``: the table sits below ``run/spec.py``, which
validates a run's algorithm with it. :meth:`Algorithm.iteration_metrics` need not give ``episode_length_mean`` (PPO's
rows have none).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import torch

from marljoint.auxiliary import AuxFn
from marljoint.env.base import JointObs
from marljoint.env.spaces import JointSpec
from marljoint.policies.joint import NoActingPolicy
from marljoint.run.errors import ExportRefused, RunError
from marljoint.run.reads import SettingsRead, offpolicy_reads

if TYPE_CHECKING:
    from marljoint.distributed.ranks import RankGroup
    from marljoint.policies import AgentPolicy
    from marljoint.policies.joint import JointPolicy
    from marljoint.ppo.regularizer import RegularizerFactory

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "AlgorithmEntry",
    "ExportRefused",
    "acting_policy_of",
    "agent_policies",
    "algorithm_entry",
    "algorithm_options",
    "family_of",
    "build_ppo_trainer",
    "check_run_algorithm",
    "run_entry",
    "table_markdown",
    "train_choices",
    "train_help",
    "with_algorithm_defaults",
]


@runtime_checkable
class Algorithm(Protocol):
    """A trainer as the run driver (:func:`~marljoint.run.train.train_run`) drives it: every row of
    :data:`ALGORITHMS` builds one.

    A trainer built with a regulariser (PPO with MMD self-play) exposes it as ``regularizer``, whose magnet the
    exploitability measurements score too; the run loop itself reads nothing beyond the members below.

    Attributes:
        spec: the env's agents, groups and spaces.
        config: the resolved settings of the trainer. A trainer whose config is the run's
            :class:`~marljoint.JointTrainerConfig` (PPO) has it written to ``config.toml`` as resolved (settings
            derived from the env filled in); any other keeps the run's trainer settings there, as the run gave them.
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
        ``episode_return_mean`` and ``episode_return/<agent>``, plus the algorithm's own columns (its regulariser's
        included; ``episode_length_mean`` where it keeps episode lengths)."""
        ...

    def act(self, obs: JointObs, deterministic: bool = True) -> list[np.ndarray]:
        """Actions for a :class:`~marljoint.JointObs` of E copies: per group ``[E, n_g, ...]`` (evaluation)."""
        ...

    def acting_policy(self) -> JointPolicy:
        """The policy that acts, for export and per-agent policies.

        Raises:
            NoActingPolicy: where the algorithm acts with something else (Q networks, its own actors), saying
                what it acts with (a trainer in the run layer may raise :class:`ExportRefused` itself).
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


REPLAY_FAMILIES = ("value", "actor-critic")
"""The families trained off-policy from a replay buffer."""


@dataclass(frozen=True)
class AlgorithmEntry:
    """One row of :data:`ALGORITHMS`.

    Attributes:
        name: the algorithm's name (``--algorithm NAME`` and ``algorithm = "NAME"`` in ``config.toml`` where
            :attr:`option` is set).
        family: ``"ppo"`` (on-policy, joint PPO update), ``"value"`` (value decomposition, off-policy),
            ``"actor-critic"`` (off-policy actor-critics with centralised critics) or ``"game"`` (game solvers).
        summary: one line for ``--help`` and the docs' list.
        command: the command line that selects it, e.g. ``("train", "--algorithm", "vdn")`` or
            ``("train", "--self-play", "mmd")``.
        config_type: the type of its own settings.
        build: ``build(spec, env)``, the trainer of a run (a :class:`~marljoint.run.spec.RunSpec`) on its env;
            a row that trains on ranks (:attr:`ranks_refusal` ``None``) also takes ``ranks`` (a
            :class:`~marljoint.distributed.ranks.RankGroup`, with ``env`` this rank's slice of the copies:
            :func:`~marljoint.run.build.build_trainer`).
        docs: the docs page that explains it.
        exports: whether ``marljoint export`` writes its policy (else it refuses, with the reason).
        table: the ``config.toml`` table of its own settings (a run setting of that name), or ``None``.
        implies: trainer settings its name sets unless the run gives them (a contradicting value is refused).
        check: ``check(spec)``, its refusals of run settings it cannot honour (raising ``RunError``), or ``None``.
        abandons_iterations: a stop request (SIGINT, SIGTERM) abandons its iteration in progress at once (its
            iterations can take minutes); the others finish the iteration and checkpoint it.
        reads: which of the run's settings it reads (a setting it does not read is refused, naming what it reads
            instead); by default every one.
        writes_openspiel_policy: its trainer's ``write_openspiel_policy(path)`` writes the policies it is scored by
            to ``openspiel_policy.json`` after every iteration (the game solvers).
        ranks_refusal: ``None`` where it trains on data-parallel ranks (``marljoint train --ranks K``, torchrun);
            else why it does not and how it uses several cores instead (one clause, read by every refusal of ranks
            and by the docs).
    """

    name: str
    family: str
    summary: str
    command: tuple[str, ...]
    config_type: type
    build: Callable[..., Algorithm]
    docs: str
    exports: bool
    table: str | None = None
    implies: Mapping[str, Any] = field(default_factory=dict)
    check: Callable[[Any], None] | None = None
    abandons_iterations: bool = False
    writes_openspiel_policy: bool = False
    reads: SettingsRead = field(default_factory=SettingsRead)
    ranks_refusal: str | None = None

    @property
    def option(self) -> str | None:
        """The value of ``--algorithm`` (and of ``algorithm`` in ``config.toml``) that selects it, or ``None``; a
        row run by a command of its own (``("psro",)``) is selected by its name."""
        if self.command == (self.name,):
            return self.name
        return self.command[2] if self.command[:2] == ("train", "--algorithm") else None

    @property
    def self_play(self) -> str | None:
        """The value of ``--self-play`` (``self_play``) that selects it, or ``None``."""
        return self.command[2] if self.command[:2] == ("train", "--self-play") else None

    @property
    def replays(self) -> bool:
        """Whether it trains off-policy from a replay buffer (the value and actor-critic families): its memory is
        the buffer's, and it acts with the newest weights at every env step (no policy lag)."""
        return self.family in REPLAY_FAMILIES

    @property
    def scores_seats(self) -> bool:
        """Whether the run driver measures the exploitability of its per-seat policies (the PPO family's): the
        off-policy families act with networks of their own, the game solvers measure their own."""
        return self.family == "ppo"


def build_ppo_trainer(
    spec: Any, env: Any, regularizer: RegularizerFactory | None = None, ranks: RankGroup | None = None
) -> Algorithm:
    """The :class:`~marljoint.JointMultiAgentTrainer` of a run (mappo, ippo, or MMD self-play with the MMD
    ``regularizer``) on ``env`` (with ``ranks``, this rank's slice of the copies).

    Raises:
        RunError: for settings or an env the trainer cannot train (naming the env and the reason).
    """
    from marljoint.ppo.trainer import JointMultiAgentTrainer

    try:
        return JointMultiAgentTrainer.from_env(env, spec.trainer, regularizer=regularizer, ranks=ranks)
    except ValueError as exc:
        raise RunError(f"cannot build the trainer for env {spec.env!r}: {exc}") from None


def _build_ppo(spec: Any, env: Any, ranks: RankGroup | None = None) -> Algorithm:
    return build_ppo_trainer(spec, env, ranks=ranks)


def _build_mmd(spec: Any, env: Any, ranks: RankGroup | None = None) -> Algorithm:
    from marljoint.best_response.mmd import mmd_regularizer

    return build_ppo_trainer(spec, env, regularizer=mmd_regularizer(spec.mmd_config()), ranks=ranks)


def _build_offpolicy(spec: Any, env: Any, ranks: RankGroup | None = None) -> Algorithm:
    from marljoint.run.offpolicy import build_offpolicy_trainer

    return build_offpolicy_trainer(spec, env, ranks=ranks)


def _check_offpolicy(spec: Any) -> None:
    from marljoint.run.offpolicy import check_offpolicy_run

    check_offpolicy_run(spec)


def _offpolicy_row(name: str, family: str, summary: str, docs: str) -> AlgorithmEntry:
    from marljoint.offpolicy.config import OffPolicyConfig

    command = ("train", "--algorithm", name)
    build, check = _build_offpolicy, _check_offpolicy
    return AlgorithmEntry(
        name,
        family,
        summary,
        command,
        OffPolicyConfig,
        build,
        docs,
        False,
        "offpolicy",
        {},
        check,
        reads=offpolicy_reads(name),
    )


def _ppo_row(name: str, summary: str, centralized_critic: bool) -> AlgorithmEntry:
    from marljoint.ppo.config import JointTrainerConfig

    command, implies = ("train", "--algorithm", name), {"centralized_critic": centralized_critic}
    return AlgorithmEntry(
        name, "ppo", summary, command, JointTrainerConfig, _build_ppo, "concepts.md", True, None, implies
    )


def _rows() -> dict[str, AlgorithmEntry]:
    from marljoint.best_response.mmd import MmdConfig

    rows = [
        _ppo_row("mappo", "PPO with a centralised critic: every agent's loss summed into one joint update", True),
        _ppo_row("ippo", "PPO with per-agent critics: every agent's loss summed into one joint update", False),
        AlgorithmEntry(
            "mmd",
            "ppo",
            "PPO self-play of a two-player zero-sum game with magnetic mirror descent: each seat's loss plus a KL "
            "to a magnet policy",
            ("train", "--self-play", "mmd"),
            MmdConfig,
            _build_mmd,
            "best_response.md",
            True,
            table="mmd",
        ),
        _offpolicy_row(
            "vdn",
            "value",
            "value decomposition: the team's Q value is the sum of the agents' utilities (off-policy)",
            "value_decomposition.md",
        ),
        _offpolicy_row(
            "qmix",
            "value",
            "value decomposition: a monotonic mixing network of the agents' utilities (off-policy)",
            "value_decomposition.md",
        ),
        _offpolicy_row(
            "masac",
            "actor-critic",
            "multi-agent soft actor-critic: stochastic actors, centralised twin critics (off-policy)",
            "masac.md",
        ),
        _offpolicy_row(
            "maddpg",
            "actor-critic",
            "multi-agent DDPG: deterministic actors, centralised critics (off-policy)",
            "masac.md",
        ),
        *_game_rows(),
    ]
    return {row.name: row for row in rows}


def _build_game(spec: Any, env: Any) -> Algorithm:
    from marljoint.run.game_runs import build_game_trainer

    return build_game_trainer(spec, env)


def _game_rows() -> list[AlgorithmEntry]:
    """PSRO and NFSP: their own commands (``marljoint psro``, ``marljoint nfsp``), ``algorithm = "psro"`` /
    ``"nfsp"`` in ``config.toml`` with their settings in the table of that name (:mod:`marljoint.run.game_runs`)."""
    from marljoint.best_response.nfsp import NfspConfig
    from marljoint.best_response.psro import PsroConfig

    psro = "PSRO: populations of best responses and an empirical meta-game solved by a meta-solver"
    nfsp = "NFSP: PPO best responses and average policies trained on their moves (neural fictitious self-play)"
    long = {"abandons_iterations": True, "writes_openspiel_policy": True}
    apart = {
        "psro": "its best responses are PPO runs of their own, which --task-split K runs as parallel tasks (on Ray)",
        "nfsp": "its PPO best responses and average policies train together, in one process, on every rollout of "
        "one small game (run several seeds side by side to use more cores)",
    }
    return [
        AlgorithmEntry(
            name,
            "game",
            summary,
            (name,),
            config,
            _build_game,
            "best_response.md",
            False,
            name,
            **long,
            ranks_refusal=apart[name],
        )
        for name, summary, config in (("psro", psro, PsroConfig), ("nfsp", nfsp, NfspConfig))
    ]


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

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


ALGORITHMS: Mapping[str, AlgorithmEntry] = _Table()
"""Every algorithm marljoint runs, by name."""


def algorithm_options() -> list[str]:
    """The values ``--algorithm`` (``algorithm`` in ``config.toml``) takes, in the table's order."""
    return [row.option for row in ALGORITHMS.values() if row.option is not None]


def train_choices() -> list[str]:
    """The values of ``marljoint train --algorithm``: the rows whose command is ``train --algorithm NAME``."""
    return [row.command[2] for row in ALGORITHMS.values() if row.command[:2] == ("train", "--algorithm")]


def train_help() -> str:
    """The help of ``marljoint train --algorithm``: each choice's summary, docs page and settings table, and the
    rows ``train`` selects otherwise (``--self-play``)."""
    rows = ALGORITHMS.values()
    choices = [
        f"{row.name}: {row.summary} (docs/{row.docs}{_settings_hint(row)})"
        for row in rows
        if row.command[:2] == ("train", "--algorithm")
    ]
    others = [f"{' '.join(row.command[1:])}: {row.summary}{_settings_hint(row)}" for row in rows if row.self_play]
    return "; ".join(choices) + ". Default: PPO as centralized_critic says" + "".join(f"; {o}" for o in others)


def _settings_hint(row: AlgorithmEntry) -> str:
    return f"; its settings: --set {row.table}.KEY=VALUE" if row.table else ""


def table_markdown() -> str:
    """The table of ``docs/algorithms.md``: one line per row of :data:`ALGORITHMS` (a test keeps the page equal to
    it)."""
    lines = [
        "| algorithm | family | command | its own settings | `marljoint export` | `--ranks K` | what it is |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in ALGORITHMS.values():
        settings = f"`[{row.table}]`" if row.table else "the run's"
        exports = "writes its policy" if row.exports else "refuses, with the reason"
        ranks = "trains on ranks" if row.ranks_refusal is None else "refuses, with the reason"
        lines.append(
            f"| [{row.name}]({row.docs}) | {row.family} | `marljoint {' '.join(row.command)}` | {settings} | "
            f"{exports} | {ranks} | {row.summary} |"
        )
    return "\n".join(lines) + "\n"


def algorithm_entry(name: str) -> AlgorithmEntry:
    """The row of ``name``.

    Raises:
        RunError: for an unknown name, listing the known ones.
    """
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise RunError(f"algorithm must be one of {list(ALGORITHMS)}, got {name!r}") from None


def family_of(algorithm: str | None) -> str:
    """The family of the algorithm named ``algorithm`` (``"ppo"`` for ``None``: PPO as ``centralized_critic``
    says).

    Raises:
        RunError: for an unknown name, listing the known ones.
    """
    return "ppo" if algorithm is None else algorithm_entry(algorithm).family


def run_entry(spec: Any) -> AlgorithmEntry:
    """The row a run (a :class:`~marljoint.run.spec.RunSpec`) trains: the one its ``self_play`` selects, else
    the one its ``algorithm`` names, else the PPO row whose implied settings it has (``centralized_critic``)."""
    rows = list(ALGORITHMS.values())
    for row in rows:
        if row.self_play is not None and row.self_play == spec.self_play:
            return row
    if spec.algorithm is not None:
        return algorithm_entry(spec.algorithm)
    for row in rows:
        if row.option is not None and row.implies and _has_settings(spec.trainer, row.implies):
            return row
    raise RunError(f"the run names no algorithm; set algorithm to one of {algorithm_options()}")


def _has_settings(trainer: Any, settings: Mapping[str, Any]) -> bool:
    return all(getattr(trainer, key) == value for key, value in settings.items())


def with_algorithm_defaults(values: Mapping[str, Any]) -> dict[str, Any]:
    """Run settings with the settings the named algorithm implies (``centralized_critic`` for mappo and ippo)
    added where not given."""
    out = dict(values)
    name = out.get("algorithm")
    if isinstance(name, str) and name in ALGORITHMS:
        for key, value in ALGORITHMS[name].implies.items():
            out.setdefault(key, value)
    return out


_TRAINS = {"ppo": "with PPO", "value": "off-policy", "actor-critic": "off-policy", "game": "by best responses"}
"""How each family trains, for the messages that refuse combining two."""


def check_run_algorithm(spec: Any) -> None:
    """Refuses a run (a :class:`~marljoint.run.spec.RunSpec`) whose algorithm is unknown, whose settings
    contradict what its name implies, that gives a table of settings its algorithm does not read, or that selects
    two algorithms of different families (``self_play`` and ``algorithm``); then the row's own refusals.

    Raises:
        RunError: naming the setting, its value and the fix.
    """
    options = algorithm_options()
    if spec.algorithm is not None and spec.algorithm not in options:
        raise RunError(f"algorithm must be one of {options}, got {spec.algorithm!r}")
    named = None if spec.algorithm is None else ALGORITHMS[spec.algorithm]
    _check_tables(spec, named)
    if named is not None:
        for key, value in named.implies.items():
            if getattr(spec.trainer, key) != value:
                raise RunError(
                    f"algorithm {named.name!r} trains {'a centralised' if value else 'per-agent'} critic, but "
                    f"{key}={str(getattr(spec.trainer, key)).lower()}; drop one of the two settings"
                )
    entry = run_entry(spec)
    if named is not None and entry is not named and entry.family != named.family:
        raise RunError(
            f"self_play = {spec.self_play!r} regularises the PPO loss, but algorithm={named.name!r} trains "
            f"{_TRAINS.get(named.family, named.family)}; drop one of the two"
        )
    if entry.check is not None:
        entry.check(spec)


def _check_tables(spec: Any, named: AlgorithmEntry | None) -> None:
    """Refuses a table of settings (``offpolicy``) that the algorithm named does not read."""
    readers: dict[str, list[str]] = {}
    for row in ALGORITHMS.values():
        if row.option is not None and row.table is not None:
            readers.setdefault(row.table, []).append(row.name)
    for table, names in readers.items():
        if not getattr(spec, table, None):
            continue
        if named is None:
            raise RunError(f"{table} settings need algorithm = one of {names}; set algorithm or drop them")
        if named.table != table:
            raise RunError(f"{table} settings apply to {', '.join(names)}, not {named.name}; drop them")


def _spoken(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def acting_policy_of(trainer: Algorithm) -> JointPolicy:
    """The trainer's :meth:`~Algorithm.acting_policy`, for export and per-agent policies.

    Raises:
        ExportRefused: where the trainer acts with something else: what it acts with, which runs export, and
            what to use instead.
    """
    try:
        return trainer.acting_policy()
    except NoActingPolicy as exc:
        exporting = _spoken([row.name for row in ALGORITHMS.values() if row.exports and row.option is not None])
        raise ExportRefused(
            f"{exc}, and export and per-agent policies take PPO's policy networks; export supports {exporting} runs; "
            "use marljoint eval, or load_run(run_dir).act(obs) from Python"
        ) from None


def agent_policies(trainer: Algorithm, agents: Sequence[int | str]) -> list[AgentPolicy]:
    """A frozen copy of each of ``agents``' current policies (:class:`~marljoint.policies.AgentPolicy`), taken
    from the trainer's :meth:`~Algorithm.acting_policy`.

    Raises:
        ExportRefused: as :func:`acting_policy_of`.
    """
    from marljoint.policies import AgentPolicy

    policy = acting_policy_of(trainer)
    return [AgentPolicy(*policy.network_of(agent)) for agent in agents]
