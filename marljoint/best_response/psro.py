"""Policy-Space Response Oracles (PSRO; Lanctot et al., 2017) over PettingZoo envs.

Each iteration runs three named steps:

1. :meth:`PSRO.add_best_responses`: the oracle trains (or computes) one new policy per player, a best response
   to the other players' current meta-strategies; the new policies are frozen and appended to the populations.
2. :meth:`PSRO.update_meta_game`: the empirical meta-game grows by the new rows and columns, and only those
   entries are estimated (exactly from the game tree, or by simulating ``episodes_per_entry`` episodes each).
3. :meth:`PSRO.solve_meta_game`: the meta-solver (by name, from ``META_SOLVERS``) returns the new
   meta-strategies.

All randomness derives from ``PsroConfig.seed`` and the iteration number (no global RNG), so a run is
reproducible and a resumed run continues exactly as an uninterrupted one would.

Example:
    >>> from marljoint.best_response import PSRO, PsroConfig
    >>> from marljoint.best_response.games import KuhnGame
    >>> from marljoint_envs import kuhn_poker_v0
    >>> psro = PSRO(kuhn_poker_v0.raw_env, PsroConfig(oracle="exact", iterations=8), game=KuhnGame())
    >>> history = psro.run()
    >>> history[-1]["exploitability"] < 0.01
    True
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from marljoint.best_response.games import KnownGame
from marljoint.best_response.members import member_from_plain, member_to_plain
from marljoint.best_response.meta_game import MetaGame
from marljoint.best_response.meta_solvers import META_SOLVERS, get_meta_solver
from marljoint.best_response.oracles import (
    GAIN_DEFAULTS,
    GAIN_METRICS,
    ExactOracle,
    Oracle,
    PPOOracle,
    check_current_format,
    check_gain_settings,
    check_warm_start,
    gain_metrics,
    run_trainer_config,
)
from marljoint.best_response.population import FrozenPolicy, PolicyMixture, UniformPolicy
from marljoint.best_response.psro_tasks import derived_seed as _derived_seed
from marljoint.best_response.psro_tasks import psro_steps
from marljoint.checkpoint import atomic_torch_save, load_checkpoint
from marljoint.collect.config import CollectionConfig
from marljoint.collect.settings import SHARED_DEFAULTS
from marljoint.env.pettingzoo import PettingZooJointEnv
from marljoint.env.spaces import JointSpec
from marljoint.ppo.build import check_device_available
from marljoint.ppo.config import JointTrainerConfig, known_fields
from marljoint.ppo.trainer import JointMultiAgentTrainer

__all__ = ["PSRO", "PsroConfig", "PSRO_METRICS"]

_ORACLES = ("ppo", "exact")
_EVALUATIONS = ("auto", "exact", "simulation")
_INITIAL_POLICIES = ("uniform", "network")
_ENGINES = ("ray", "local")
CHECKPOINT_NAME = "psro.pt"
PSRO_METRICS: dict[str, str] = {
    "iteration": "PSRO iteration (0 = the initial population)",
    "wall_time": "seconds since the run started (resumed runs continue the count)",
    "population": "population size of each player after this iteration",
    "exploitability": "exact exploitability (NashConv / P) of the meta-mixture; NaN without a known game",
    "nash_conv": "exact NashConv of the meta-mixture; NaN without a known game",
    "meta_nash_conv": "NashConv of the new meta-strategies in the empirical meta-game (the solver's residual)",
    "psro_gap": "NashConv of the previous meta-strategies in the grown meta-game: what the new policies gain",
    "meta_game_entries": "entries of the empirical meta-game estimated this iteration",
    "eval_episodes": "episodes simulated to estimate them (0 with exact evaluation)",
    "br_env_steps": "env steps of best-response training this iteration (PPO oracle)",
    "br_seconds": "seconds of best-response training this iteration (PPO oracle)",
    "br_warm_started": "learners that started from their seat's newest member (PPO oracle with warm_start)",
    "br_explained_var/<agent>": "explained variance of the best response's critic, mean of its last quarter of "
    "updates (PPO)",
    "br_return/<agent>": "mean return of the best response in its last quarter of training episodes (PPO)",
    "br_value/<agent>": "exact value of the new policy against the meta-mixture it answered (known games)",
    "br_regret/<agent>": "exact best-response value minus br_value: how far from best the new policy is",
    "iteration_seconds": "wall seconds of this iteration",
    **GAIN_METRICS,
}
"""Every column PSRO reports, with its meaning (pinned by a test)."""


@dataclass(frozen=True)
class PsroConfig:
    """Settings of :class:`PSRO`.

    Example:
        >>> PsroConfig(oracle="exact", meta_solver="nash").iterations
        10
    """

    iterations: int = 10
    """Iterations :meth:`PSRO.run` performs (counted from the initial population, iteration 0)."""
    oracle: str = "ppo"
    """``"ppo"``: best responses trained by the joint PPO trainer; ``"exact"``: exact (needs a known game)."""
    meta_solver: str = "nash"
    """A key of ``META_SOLVERS``; ``"nash"`` solves two-player meta-games only (use ``"prd"`` for more)."""
    evaluation: str = "auto"
    """``"exact"`` (from the game tree), ``"simulation"``, or ``"auto"``: exact when a known game is given."""
    episodes_per_entry: int = 32
    """Episodes simulated per new meta-game entry (simulation only)."""
    eval_num_envs: int = 32
    """Env copies used to simulate meta-game entries."""
    br_steps: int = 50_000
    """Env steps of PPO best-response training per iteration, shared by the players' learners."""
    trainer: JointTrainerConfig = field(default_factory=lambda: JointTrainerConfig(share_parameters=False))
    """PPO settings of the best responses (``num_envs`` copies train them); ``seed`` is set per iteration,
    ``share_parameters`` is forced to False (one network per seat) and ``device`` is :attr:`device`."""
    warm_start: bool = False
    """PPO oracle: each new best response starts from its seat's newest population member (actor and critic)
    instead of fresh networks, so best responses keep improving across iterations (see ``PPOOracle``)."""
    warm_start_policy_scale: float = 1.0
    """With ``warm_start``: the copied policy output layer (logits, or a Gaussian's mean) is multiplied by this, in
    [0, 1]. 1 keeps the member's policy; smaller values keep its features and critic and give its policy back the
    entropy to explore (0: uniform). A nearly deterministic copy can stop exploring and stall PSRO (Leduc poker:
    OpenSpiel games use 0.3)."""
    symmetric: bool = False
    """Two interchangeable seats share ONE population (one best response per iteration, trained in seat 0)."""
    initial_policy: str = "uniform"
    """The population's first member: ``"uniform"`` (uniform over allowed actions) or ``"network"`` (an
    untrained network, for Box actions)."""
    seed: int = SHARED_DEFAULTS["seed"]
    """Seed of everything (best-response training, simulation, initial networks)."""
    task_split: int = 0
    """0: each iteration runs in this process as described above. K >= 1: the iteration is split into independent
    tasks run by ``engine``: one PPO best-response training per learning seat (each on its own ``trainer.num_envs``
    copies, with ``br_steps / learners`` steps, seeded by (seed, iteration, seat)) and K simulation chunks of the
    missing meta-game entries (``eval_num_envs / K`` copies each). The result depends on K, not on the engine."""
    gain_every: int = GAIN_DEFAULTS["gain_every"]
    """Every this many iterations (0: never), estimate the meta-mixture's exploitability with fresh PPO best
    responses (:func:`~marljoint.best_response.oracles.best_response_gain`): the columns ``best_response_gain`` and
    ``best_response_gain_ci``. For envs without a known game, where ``exploitability`` is NaN."""
    gain_steps: int = GAIN_DEFAULTS["gain_steps"]
    """Env steps of best-response training per estimate (with :attr:`gain_every`)."""
    gain_episodes: int = GAIN_DEFAULTS["gain_episodes"]
    """Episodes simulated per estimate, for the profile and for each best response (with :attr:`gain_every`)."""
    engine: str = "ray"
    """Who runs the tasks when ``task_split >= 1``: ``"ray"`` (Ray tasks, ``pip install "marljoint[ray]"``) or
    ``"local"`` (the same tasks one after another in this process)."""
    device: str = SHARED_DEFAULTS["device"]
    """Torch device of every network of the run: the best responses while they train, the population's networks
    as they play the meta-game simulations and are tabulated, and the initial network. Payoffs, tables and
    exploitability come back to the CPU, and ``psro.pt`` holds CPU tensors, so a run resumes on any device.
    ``trainer.device`` may stay ``"cpu"`` or name the same device. Ray tasks (``task_split`` with
    ``engine="ray"``) run on the CPU only."""

    def __post_init__(self) -> None:
        if isinstance(self.trainer, Mapping):
            object.__setattr__(self, "trainer", JointTrainerConfig.from_dict(self.trainer))
        if not isinstance(self.trainer, JointTrainerConfig):
            raise ValueError(f"trainer must be a JointTrainerConfig, got {type(self.trainer).__name__}")
        _check_positive_int("iterations", self.iterations, "e.g. 10")
        _check_positive_int("episodes_per_entry", self.episodes_per_entry, "e.g. 32")
        _check_positive_int("eval_num_envs", self.eval_num_envs, "e.g. 32")
        _check_positive_int("br_steps", self.br_steps, "e.g. 50000")
        _check_choice("oracle", self.oracle, _ORACLES)
        _check_choice("evaluation", self.evaluation, _EVALUATIONS)
        _check_choice("initial_policy", self.initial_policy, _INITIAL_POLICIES)
        _check_choice("meta_solver", self.meta_solver, tuple(sorted(META_SOLVERS)))
        _check_choice("engine", self.engine, _ENGINES)
        split = self.task_split
        if not isinstance(split, (int, np.integer)) or isinstance(split, bool) or split < 0:
            raise ValueError(f"task_split must be an integer >= 0 (0: no task split), got {self.task_split!r}")
        if not isinstance(self.seed, (int, np.integer)) or isinstance(self.seed, bool):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        if not isinstance(self.symmetric, bool):
            raise ValueError(f"symmetric must be True or False, got {self.symmetric!r}")
        check_warm_start(self.warm_start, self.warm_start_policy_scale)
        check_gain_settings(self.gain_every, self.gain_steps, self.gain_episodes)
        run_trainer_config(self.device, self.trainer)
        if split and self.engine == "ray" and self.device != "cpu":
            raise ValueError(
                f"device={self.device!r} with task_split={split} and engine='ray': Ray hides the GPUs from tasks that "
                "request none, so the tasks could not reach the device; use device='cpu' with Ray tasks, or "
                "engine='local' (or task_split=0) to run on the device"
            )

    def replace(self, **changes: Any) -> PsroConfig:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain Python values (the trainer config as a dict)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["trainer"] = self.trainer.to_dict()
        return out

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> PsroConfig:
        """Builds a config from :meth:`to_dict` output (an older run's is converted by
        :func:`marljoint.run.migrations.migrate_psro_config`).

        Raises:
            ValueError: naming unknown keys.
        """
        return cls(**known_fields(cls, values))


def _check_positive_int(name: str, value: Any, hint: str) -> None:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r} ({hint})")


def _check_choice(name: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {list(choices)}")


def _check_game(config: PsroConfig, spec: JointSpec, game: KnownGame | None) -> None:
    """The checks of a run's settings against its env and its known game (see :class:`PSRO`'s errors)."""
    if config.oracle == "exact" and game is None:
        raise ValueError(
            "oracle='exact' needs the env's known game tree; pass game=KuhnGame() or MatrixGame(...) (see "
            "marljoint.run.registry.known_game), or use oracle='ppo'"
        )
    if config.evaluation == "exact" and game is None:
        raise ValueError(
            "evaluation='exact' needs the env's known game tree; pass game=..., or use evaluation='simulation'"
        )
    if game is not None and game.num_players != spec.num_agents:
        raise ValueError(
            f"the game {game!r} has {game.num_players} players but the env has {spec.num_agents} agents "
            f"{list(spec.agents)}; pass the game that matches the env"
        )
    if config.symmetric:
        if spec.num_agents != 2 or spec.group_of(0)[0] != spec.group_of(1)[0]:
            raise ValueError(
                "symmetric=True needs two seats with identical observation and action spaces; this env has "
                f"agents {list(spec.agents)} in groups {[list(g.agents) for g in spec.groups]}. Use "
                "symmetric=False (one population per player)"
            )
        if game is not None and not game.is_symmetric():
            raise ValueError(f"symmetric=True but {game!r} is not symmetric; use symmetric=False")


class PSRO:
    """PSRO with populations of frozen policies, an empirical meta-game and a meta-solver.

    Args:
        env_fn: builds one PettingZoo env (a factory or a ``marljoint_envs`` module), as for
            :class:`~marljoint.PettingZooJointEnv`.
        config: the settings.
        game: the env's :class:`~marljoint.best_response.games.KnownGame` (Kuhn poker, a matrix game), which
            enables exact evaluation, the exact oracle and the ``exploitability`` metric.
        **policy_kwargs: passed to the best responses' networks (``JointMultiAgentTrainer.from_env``).

    Attributes:
        populations: per seat, its frozen policies (with ``symmetric``, both seats share one list).
        meta_game: the :class:`~marljoint.best_response.meta_game.MetaGame`.
        strategies: per seat, the current meta-strategy over its population.
        iteration: iterations completed (0 after construction).
        history: one metrics dict per iteration (see :data:`PSRO_METRICS`).
        strategy_history: the meta-strategies solved at each iteration (``strategy_history[k]`` after iteration
            ``k``), e.g. to measure each of them in the final meta-game with ``meta_game.nash_conv``.

    Raises:
        ValueError: an exact oracle or exact evaluation without a known game; a game whose number of players
            differs from the env's; ``symmetric`` with seats that are not interchangeable; a ``device`` this
            machine does not have.
    """

    def __init__(
        self,
        env_fn: Any,
        config: PsroConfig | None = None,
        game: KnownGame | None = None,
        *,
        start: bool = True,
        **policy_kwargs: Any,
    ) -> None:
        self._setup(env_fn, config or PsroConfig(), game, policy_kwargs)
        if start:
            self.start()

    # ------------------------------------------------------------------ setup
    def _setup(self, env_fn: Any, config: PsroConfig, game: KnownGame | None, policy_kwargs: dict[str, Any]) -> None:
        check_device_available(config.device)
        self.config = config
        self.trainer_config = run_trainer_config(config.device, config.trainer)
        """The best responses' PPO settings on the run's device (:attr:`PsroConfig.device`)."""
        self.game = game
        self.env_fn = env_fn
        self.env = PettingZooJointEnv(env_fn, num_envs=config.trainer.num_envs, seed=config.seed)
        spec = self.env.spec
        self.spec = spec
        self.num_players = spec.num_agents
        _check_game(config, spec, game)
        self.evaluation = config.evaluation if config.evaluation != "auto" else ("exact" if game else "simulation")
        self.solver = get_meta_solver(config.meta_solver)
        self.policy_kwargs = policy_kwargs
        if game is not None and config.oracle == "exact":
            self.oracle: Oracle = ExactOracle(game)
        else:
            self.oracle = PPOOracle(
                self.env,
                self.trainer_config,
                config.br_steps,
                warm_start=config.warm_start,
                policy_scale=config.warm_start_policy_scale,
                **policy_kwargs,
            )
        self._gain_env: PettingZooJointEnv | None = None
        self.meta_game = MetaGame(self.num_players, config.symmetric)
        self.populations: list[list[FrozenPolicy]] = []
        self._tables: list[list[np.ndarray]] = [[] for _ in range(self.num_players)]
        self._steps = psro_steps(self, self._tables)
        """Where the steps' work runs (in this process or as tasks), chosen once for the run."""
        self.strategies: list[np.ndarray] = []
        self.strategy_history: list[list[np.ndarray]] = []
        self.iteration = 0
        self.history: list[dict[str, Any]] = []
        self._elapsed_before = 0.0
        self._start = time.perf_counter()

    @property
    def started(self) -> bool:
        """Whether the initial population is in place (:meth:`start` has run, or a started run was loaded)."""
        return bool(self.strategies)

    def start(self) -> dict[str, Any]:
        """Iteration 0: the initial population (one member per seat), its meta-game and meta-strategies.

        The constructor calls it unless ``start=False`` (a run driver that counts it as its first iteration).

        Returns:
            The iteration's metrics (see :data:`PSRO_METRICS`).

        Raises:
            ValueError: if the run has started already.
        """
        if self.started:
            raise ValueError(f"{self!r} has started already; call step() for its next iteration")
        tick = time.perf_counter()
        if self.config.initial_policy == "uniform":
            initial = [UniformPolicy(self.spec.actions[seat]) for seat in range(self.num_players)]
        else:
            trainer_config = self.trainer_config.replace(
                seed=_derived_seed(self.config.seed, 0, 3), share_parameters=False, num_envs=self.env.num_envs
            )
            trainer = JointMultiAgentTrainer.from_env(self.env, trainer_config, **self.policy_kwargs)
            initial = [trainer.agent_policy(seat) for seat in range(self.num_players)]
        if self.config.symmetric:
            shared = [initial[0]]
            self.populations = [shared, shared]
        else:
            self.populations = [[policy] for policy in initial]
        self._tabulate_new()
        metrics = self.update_meta_game()
        metrics.update(self.solve_meta_game())
        return self._record(metrics, time.perf_counter() - tick)

    # ------------------------------------------------------------------ the three steps
    def add_best_responses(self) -> dict[str, float]:
        """Step 1: one new frozen policy per player (one in total with ``symmetric``), appended to the populations.

        Returns:
            The oracle's diagnostics, plus ``br_value``/``br_regret`` per learner with a known game.
        """
        learners = [0] if self.config.symmetric else list(range(self.num_players))
        seed = _derived_seed(self.config.seed, self.iteration + 1, 1)
        responses = self._steps.best_responses(learners, seed)
        metrics = dict(responses.metrics)
        metrics.update(self._regrets(responses.policies))
        for seat in learners:
            self.populations[seat].append(responses.policies[seat])
        self._tabulate_new()
        return metrics

    def update_meta_game(self) -> dict[str, float]:
        """Step 2: grows the meta-game to the population sizes and estimates only its missing entries.

        Returns:
            ``meta_game_entries`` and ``eval_episodes``.
        """
        self.meta_game.grow([len(population) for population in self.populations])
        missing = self.meta_game.missing_profiles()
        episodes = 0
        if len(missing):
            values, episodes = self._steps.meta_game_entries(missing)
            self.meta_game.fill(missing, values)
        return {"meta_game_entries": float(len(missing)), "eval_episodes": float(episodes)}

    def solve_meta_game(self) -> dict[str, float]:
        """Step 3: new meta-strategies from the meta-solver.

        Returns:
            ``meta_nash_conv`` (the new strategies' NashConv in the meta-game) and ``psro_gap`` (the previous
            strategies' NashConv in the grown meta-game; NaN at iteration 0).
        """
        gap = self.meta_game.nash_conv(self.strategies) if self.strategies else float("nan")
        self.strategies = self.meta_game.solve(self.solver)
        self.strategy_history.append([s.copy() for s in self.strategies])
        return {"meta_nash_conv": self.meta_game.nash_conv(self.strategies), "psro_gap": gap}

    def step(self) -> dict[str, Any]:
        """One PSRO iteration: the three steps in order; returns the iteration's metrics."""
        tick = time.perf_counter()
        metrics = self.add_best_responses()
        metrics.update(self.update_meta_game())
        metrics.update(self.solve_meta_game())
        self.iteration += 1
        return self._record(metrics, time.perf_counter() - tick)

    def run(
        self,
        iterations: int | None = None,
        max_seconds: float | None = None,
        callback: Callable[[dict[str, Any]], bool | None] | None = None,
    ) -> list[dict[str, Any]]:
        """Runs iterations until ``iterations`` are complete (counted from the start, so a resumed run finishes
        the same total) or ``max_seconds`` of wall time have passed (checked between iterations).

        Args:
            iterations: the total to reach; ``config.iterations`` when ``None``.
            max_seconds: wall-time budget (the run's whole ``wall_time``, resumed time included).
            callback: called with each iteration's metrics; returning ``False`` stops.

        Returns:
            The whole :attr:`history`.
        """
        target = self.config.iterations if iterations is None else int(iterations)
        while self.iteration < target:
            if max_seconds is not None and self.wall_time >= max_seconds:
                break
            metrics = self.step()
            if callback is not None and callback(metrics) is False:
                break
        return self.history

    # ------------------------------------------------------------------ results
    @property
    def wall_time(self) -> float:
        """Seconds of this run so far, resumed time included."""
        return self._elapsed_before + time.perf_counter() - self._start

    def meta_policy(self, seat: int) -> PolicyMixture:
        """Seat ``seat``'s meta-mixture: its population weighted by its meta-strategy."""
        return PolicyMixture(self.populations[seat], self.strategies[seat])

    def nash_conv(self) -> float:
        """Exact NashConv of the meta-mixtures.

        Raises:
            ValueError: without a known game (estimate it with ``best_response_gain``).
        """
        if self.game is None:
            raise ValueError(
                "exact NashConv needs a known game; pass game=... to PSRO, or estimate it with best_response_gain()"
            )
        tables = [
            self.game.mixture_table(self._tables[seat], self.strategies[seat], seat) for seat in range(self.num_players)
        ]
        return self.game.nash_conv(tables)

    def exploitability(self) -> float:
        """Exact exploitability (NashConv / P) of the meta-mixtures; see :meth:`nash_conv`."""
        return self.nash_conv() / self.num_players

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Populations (each member as plain values: :func:`~marljoint.best_response.members.member_to_plain`),
        meta-game, strategies, counters and history: tensors, arrays and plain values only."""
        populations = self.populations[:1] if self.config.symmetric else self.populations
        return {
            "config": self.config.to_dict(),
            "agents": list(self.spec.agents),
            "populations": [[member_to_plain(member) for member in population] for population in populations],
            "meta_game": self.meta_game.state_dict(),
            "strategies": [s.copy() for s in self.strategies],
            "strategy_history": [[s.copy() for s in row] for row in self.strategy_history],
            "iteration": self.iteration,
            "history": [dict(row) for row in self.history],
            "wall_time": self.wall_time,
        }

    def save(self, directory: str | Path) -> Path:
        """Writes :meth:`state_dict` to ``directory/psro.pt`` atomically; returns the file's path."""
        path = Path(directory) / CHECKPOINT_NAME
        atomic_torch_save(self.state_dict(), path)
        return path

    @classmethod
    def load(
        cls,
        directory: str | Path,
        env_fn: Any,
        game: KnownGame | None = None,
        config: PsroConfig | None = None,
        device: str | None = None,
        **policy_kwargs: Any,
    ) -> PSRO:
        """Resumes a run saved by :meth:`save` from ``directory/psro.pt``, as :meth:`from_state`.

        A checkpoint of an earlier format is read through :func:`marljoint.run.migrations.read_psro_checkpoint`
        (then :meth:`from_state`), which converts it.

        Raises:
            marljoint.checkpoint.CheckpointError: a missing or unreadable file, or one holding pickled Python
                objects (which could run code), refused unread.
            ValueError: as :meth:`from_state`.
        """
        state = load_checkpoint(Path(directory) / CHECKPOINT_NAME)
        return cls.from_state(state, env_fn, game, config, device, **policy_kwargs)

    @classmethod
    def from_state(
        cls,
        state: Mapping[str, Any],
        env_fn: Any,
        game: KnownGame | None = None,
        config: PsroConfig | None = None,
        device: str | None = None,
        **policy_kwargs: Any,
    ) -> PSRO:
        """Resumes a run from its :meth:`state_dict`, in the current format.

        Args:
            state: a saved :meth:`state_dict`.
            env_fn: the same env factory as the saved run.
            game: the same known game, if any.
            config: replaces the saved config (e.g. more ``iterations``); the saved one when ``None``.
            device: the device to continue on (:attr:`PsroConfig.device`), whichever the saved run used; the
                config's when ``None``.
            **policy_kwargs: as for the constructor.

        Raises:
            ValueError: a state of an earlier format (naming the reader that converts it), the env's agents differ
                from the saved run's, or a ``device`` this machine does not have.
        """
        check_current_format(state["config"], ("task_split",), "psro")
        config = config or PsroConfig.from_dict(state["config"])
        if device is not None:
            config = config.replace(device=device)
        psro = cls.__new__(cls)
        psro._setup(env_fn, config, game, policy_kwargs)
        if list(state["agents"]) != list(psro.spec.agents):
            raise ValueError(
                f"the checkpoint's agents {state['agents']} differ from this env's {list(psro.spec.agents)}"
            )
        place = psro.config.device
        populations = [[member_from_plain(member, place) for member in p] for p in state["populations"]]
        psro.populations = [populations[0], populations[0]] if psro.config.symmetric else populations
        psro.meta_game = MetaGame.from_state_dict(state["meta_game"])
        psro.strategies = [np.asarray(s, dtype=np.float64) for s in state["strategies"]]
        psro.strategy_history = [[np.asarray(s, dtype=np.float64) for s in row] for row in state["strategy_history"]]
        psro.iteration = int(state["iteration"])
        psro.history = [dict(row) for row in state["history"]]
        psro._elapsed_before = float(state["wall_time"])
        psro._start = time.perf_counter()
        psro._tabulate_new()
        return psro

    # ------------------------------------------------------------------ internals
    def _tabulate_new(self) -> None:
        """Tables of the members not tabulated yet (known games only)."""
        if self.game is None:
            return
        for seat, population in enumerate(self.populations):
            for member in population[len(self._tables[seat]) :]:
                self._tables[seat].append(self.game.table(member, seat))

    def _regrets(self, policies: Mapping[int, FrozenPolicy]) -> dict[str, float]:
        """Exact value and regret of each new policy against the meta-mixture it answered (known games only)."""
        game = self.game
        if game is None:
            return {}
        tables = [
            game.mixture_table(self._tables[seat], self.strategies[seat], seat) for seat in range(self.num_players)
        ]
        metrics = {}
        for seat, policy in policies.items():
            agent = self.spec.agents[seat]
            best_value, _ = game.best_response(tables, seat)
            played = list(tables)
            played[seat] = game.table(policy, seat)
            value = float(game.values(played)[seat])
            metrics[f"br_value/{agent}"] = value
            metrics[f"br_regret/{agent}"] = best_value - value
        return metrics

    def _record(self, metrics: dict[str, Any], seconds: float) -> dict[str, Any]:
        row: dict[str, Any] = {"iteration": self.iteration, "wall_time": self.wall_time}
        row["population"] = len(self.populations[0])
        if self.game is not None:
            nash_conv = self.nash_conv()
            row["exploitability"] = nash_conv / self.num_players
            row["nash_conv"] = nash_conv
        else:
            row["exploitability"] = math.nan
            row["nash_conv"] = math.nan
        row.update(metrics)
        every = self.config.gain_every
        if every and self.iteration % every == 0:
            row.update(self._gain())
        row["iteration_seconds"] = seconds
        self.history.append(row)
        return row

    def _gain(self) -> dict[str, float]:
        """The estimated exploitability of the meta-mixtures (see :attr:`PsroConfig.gain_every`), on an env of its
        own so that the run's envs are left as they are."""
        if self._gain_env is None:
            config = self.config.trainer
            self._gain_env = PettingZooJointEnv(
                self.env_fn, num_envs=config.num_envs, seed=_derived_seed(self.config.seed, 0, 7)
            )
        policies = [self.meta_policy(seat) for seat in range(self.num_players)]
        trainer = self.trainer_config.replace(share_parameters=False, collection=CollectionConfig())
        return gain_metrics(
            self._gain_env,
            policies,
            trainer,
            self.config.gain_steps,
            self.config.gain_episodes,
            _derived_seed(self.config.seed, self.iteration, 7),
        )

    def __repr__(self) -> str:
        sizes = [len(p) for p in self.populations]
        return f"PSRO(iteration={self.iteration}, populations={sizes}, meta_solver={self.config.meta_solver!r})"
