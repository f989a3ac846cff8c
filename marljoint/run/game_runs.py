"""PSRO and NFSP runs on the run driver: their settings in a run spec, and their trainers as the
:class:`~marljoint.run.algorithms.Algorithm` protocol has them.

A run of ``algorithm = "psro"`` (``"nfsp"``) holds its own settings in the ``[psro]`` (``[nfsp]``) table of
``config.toml``: every :class:`~marljoint.best_response.PsroConfig` (:class:`~marljoint.best_response.NfspConfig`)
field except those of the run itself, which come from the run's trainer settings: ``trainer`` (the best responses'
PPO settings are the run's), ``seed`` and ``device``. The spec holds the config, parsed from the table when it is
built (:func:`parse_game_table`).

One iteration of the run driver is one PSRO iteration (best responses, then the meta-game's update and solution;
the driver's first iteration is PSRO's iteration 0, the initial population) or one NFSP iteration
(``rollouts_per_iteration`` rollouts, PPO updates and supervised steps). The trainers measure their own
exploitability every iteration, so a run's ``exploitability_every`` is refused.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from marljoint.best_response.games import KnownGame
from marljoint.best_response.population import policy_device
from marljoint.env.base import JointObs
from marljoint.policies.joint import NoActingPolicy
from marljoint.run.errors import RunError

__all__ = [
    "GAME_ALGORITHMS",
    "UNBOUNDED_ITERATIONS",
    "GameRun",
    "NfspRun",
    "PsroRun",
    "build_game_trainer",
    "check_game_run",
    "game_config",
    "game_iterations",
    "parse_game_table",
    "settings_table",
]

GAME_ALGORITHMS = ("psro", "nfsp")
"""The algorithms that solve a game by best responses: each is a run setting table of the same name."""

# Settings of PsroConfig / NfspConfig that a run takes from its own trainer settings, not from its table.
_FROM_RUN = ("trainer", "seed", "device")
UNBOUNDED_ITERATIONS = 2**40
"""The iterations of an NFSP run given a time budget alone (``max_seconds``), in its ``total_steps``."""


def _config_type(algorithm: str) -> type:
    from marljoint.best_response.nfsp import NfspConfig
    from marljoint.best_response.psro import PsroConfig

    return PsroConfig if algorithm == "psro" else NfspConfig


def game_config(algorithm: str, trainer: Any, table: Mapping[str, Any]) -> Any:
    """The :class:`~marljoint.best_response.PsroConfig` or :class:`~marljoint.best_response.NfspConfig` of a run.

    Args:
        algorithm: ``"psro"`` or ``"nfsp"``.
        trainer: the run's :class:`~marljoint.JointTrainerConfig` (the best responses' settings, the seed, the
            device).
        table: the run's ``[psro]`` / ``[nfsp]`` settings.

    Raises:
        RunError: a run setting in the table, an unknown key (listing the valid ones) or an invalid value (naming
            ``<algorithm>.<key>``).
    """
    cls = _config_type(algorithm)
    names = [f.name for f in dataclasses.fields(cls)]
    misplaced = sorted(set(table) & set(_FROM_RUN))
    if misplaced:
        raise RunError(
            f"{algorithm}.{misplaced[0]} is a setting of the run itself; set it at the top level (seed, device and "
            "the PPO settings of the best responses) or with its command-line option instead"
        )
    unknown = sorted(set(table) - set(names))
    if unknown:
        valid = ", ".join(f"{algorithm}.{n}" for n in names if n not in _FROM_RUN)
        raise RunError(f"unknown setting {algorithm}.{unknown[0]}; valid keys: {valid}")
    try:
        return cls(trainer=trainer, seed=trainer.seed, device=trainer.device, **dict(table))
    except (TypeError, ValueError) as exc:
        text = " ".join(str(exc).split())
        field = next((n for n in names if n not in _FROM_RUN and text.startswith(n)), None)
        raise RunError(f"{algorithm}.{text}" if field else f"{algorithm}: {text}") from None


def parse_game_table(algorithm: str, trainer: Any, value: Any) -> Any:
    """The config of a psro or nfsp run from its ``psro`` / ``nfsp`` setting: a table (``None``: every default), or
    a config (built for the run before a change of its settings: its table is applied to the run's current ones).

    Raises:
        RunError: for a value that is no table, or as :func:`game_config`.
    """
    if isinstance(value, _config_type(algorithm)):
        value = settings_table(algorithm, value)
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise RunError(f"{algorithm} must be a table of settings, got {value!r}")
    return game_config(algorithm, trainer, value)


def settings_table(algorithm: str, config: Any) -> dict[str, Any]:
    """The ``[psro]`` / ``[nfsp]`` table of a resolved config: every field but the run's own, as plain values."""
    values = config.to_dict()
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in values.items() if k not in _FROM_RUN}


def check_game_run(spec: Any) -> None:
    """Refuses run settings a PSRO or NFSP run cannot honour, and ``max_seconds`` for other runs.

    Raises:
        RunError: naming the setting, its value and the fix.
    """
    algorithm = spec.algorithm
    if algorithm not in GAME_ALGORITHMS:
        if spec.max_seconds is not None:
            raise RunError(
                f"max_seconds = {spec.max_seconds} is the time budget of psro and nfsp runs; other runs stop at "
                "total_steps, so drop it"
            )
        return
    refused = (
        ("exploitability_every", spec.exploitability_every, "it measures its own exploitability every iteration"),
        ("redundancy", spec.redundancy, "its best responses train one network per seat, with no auxiliary loss"),
        ("self_play", spec.self_play, "it is a self-play method of its own"),
        ("wrappers", list(spec.wrappers), "its populations play the env as it is built"),
    )
    for name, value, why in refused:
        if value not in (None, []):
            raise RunError(f"{name} = {value!r} does not apply to a {algorithm} run ({why}); drop it")
    collection = spec.trainer.collection
    if collection.multiprocess or collection.backend != "local":
        raise RunError(
            f"a {algorithm} run steps its env copies in this process (psro --task-split K splits PSRO's work into "
            "tasks); drop --env-workers, --ray and the other collection options"
        )
    budget = spec.max_seconds
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0):
        raise RunError(f"max_seconds must be a positive number of seconds, got {budget!r}")


def game_iterations(spec: Any) -> int:
    """The run driver's iterations of a PSRO run (its iterations plus iteration 0, the initial population) or of
    an NFSP run (``total_steps`` in iterations of ``rollouts_per_iteration`` rollouts; a run bounded by its
    ``max_seconds`` alone has :data:`UNBOUNDED_ITERATIONS` of them)."""
    config = getattr(spec, spec.algorithm)
    if spec.algorithm == "psro":
        return config.iterations + 1
    per_iteration = spec.trainer.rollout_steps * spec.trainer.num_envs * config.rollouts_per_iteration
    return math.ceil(spec.total_steps / per_iteration)


def nfsp_steps_per_iteration(spec: Any) -> int:
    """Env steps of one NFSP iteration of ``spec``: ``--iterations K`` is ``total_steps`` K times this."""
    config = spec.nfsp
    return spec.trainer.rollout_steps * spec.trainer.num_envs * config.rollouts_per_iteration


def _known_game(spec: Any) -> KnownGame | None:
    """The env's exact game, if any; ``None`` for an OpenSpiel game too large to tabulate (measured by estimates)."""
    from marljoint.env.openspiel import OPENSPIEL_PREFIX
    from marljoint.run.registry import known_game

    try:
        return known_game(spec.env, dict(spec.env_kwargs))
    except ValueError as exc:
        if spec.env.startswith(OPENSPIEL_PREFIX):
            return None
        raise RunError(str(exc)) from None


def build_game_trainer(spec: Any, env: Any) -> GameRun:
    """The trainer of a psro or nfsp run. It builds its env copies from the env's factory itself (its tasks and
    estimates build more of them): ``env`` gives the spaces its settings are derived from, and is closed by the
    caller.

    Raises:
        RunError: for an env with fewer than two agents, or settings the env cannot take (naming them).
    """
    from marljoint.ppo.derived import derive_settings
    from marljoint.run.registry import env_factory

    try:
        factory = env_factory(spec.env, dict(spec.env_kwargs))
    except ValueError as exc:
        raise RunError(str(exc)) from None
    game = _known_game(spec)
    kind = PsroRun if spec.algorithm == "psro" else NfspRun
    try:
        # The best responses' settings derived from the env are resolved once, here, and written to config.toml
        # with their reasons, so that a resume reads the very settings the run started with.
        trainer, derived = derive_settings(env.spec, spec.trainer)
        settings = game_config(spec.algorithm, trainer, settings_table(spec.algorithm, getattr(spec, spec.algorithm)))
        run = kind(factory, settings, game, trainer)
        run.derived, run.env_name = derived, spec.env
        return run
    except ValueError as exc:
        raise RunError(f"cannot build the {spec.algorithm} run for env {spec.env!r}: {exc}") from None


class GameRun:
    """What PSRO and NFSP runs share as :class:`~marljoint.run.algorithms.Algorithm`: counters, the sampling
    generator, the metrics row, acting seat by seat, and the refusal of export.

    Attributes:
        spec: the env's agents, groups and spaces.
        config: the run's trainer settings (the best responses' PPO settings), those derived from the env
            resolved, as ``config.toml`` holds them.
        derived: the settings derived from the env, each with the reason.
        env_steps: env steps of training (best responses, NFSP's rollouts) completed.
    """

    name = ""
    _acting = ""
    """What the run acts with, for the refusal of export."""

    def __init__(self, factory: Any, settings: Any, game: KnownGame | None, run_config: Any) -> None:
        self.factory, self.settings, self.game = factory, settings, game
        self.config = run_config
        self.derived: dict[str, str] = {}
        self.env_steps = 0
        self._generator = torch.Generator().manual_seed(int(run_config.seed))
        self.spec: Any = None
        self.env_name = "?"
        """The env's name, for messages (:func:`build_game_trainer` sets it)."""

    @property
    def generator(self) -> torch.Generator:
        """The generator of :meth:`act`'s sampling."""
        return self._generator

    def scored_policies(self) -> list[Any]:
        """The policies the run scores, one per seat (written to ``openspiel_policy.json``)."""
        raise NotImplementedError

    def iteration_metrics(self, played: Any, stats: Mapping[str, Any], seconds: float) -> dict[str, Any]:
        """The protocol's columns, then the trainer's own (its ``wall_time`` is the run's, written by the driver).

        ``episode_return_mean`` and the returns per agent are NaN: the populations' episodes are not one policy's.
        """
        row = {k: v for k, v in stats.items() if k != "wall_time"}
        steps = int(played)
        out: dict[str, Any] = {
            "iteration": row.pop("iteration"),
            "env_steps": self.env_steps,
            "agent_steps": steps * self.spec.num_agents,
            "sps": steps / seconds if seconds > 0 else 0.0,
            "episodes": int(row.pop("episodes", 0)),
            "episode_return_mean": math.nan,
            "episode_length_mean": math.nan,
        }
        out.update({f"episode_return/{agent}": math.nan for agent in self.spec.agents})
        out.update(row)
        return out

    def _seat_policy(self, seat: int, deterministic: bool) -> Any:
        raise NotImplementedError

    @torch.no_grad()
    def act(self, obs: JointObs, deterministic: bool = True) -> list[np.ndarray]:
        """Per group, ``[E, n_g, *action_shape]`` actions of each seat's policy (:meth:`_seat_policy`)."""
        out = []
        for g, group in enumerate(self.spec.groups):
            slots = []
            for slot, agent in enumerate(group.agents):
                seat = self.spec.agents.index(agent)
                policy = self._seat_policy(seat, deterministic)
                place = policy_device(policy)
                seen = torch.as_tensor(obs.obs[g][:, slot]).float().to(place)
                masks = obs.action_masks[g]
                mask = None if masks is None else torch.as_tensor(masks[:, slot]).to(place)
                slots.append(policy.act(seen, self._generator, mask, deterministic).cpu().numpy())
            out.append(np.stack(slots, axis=1))
        return out

    def acting_policy(self) -> Any:
        """Refused: the run acts with a population or average policies of its own, not PPO's policy networks.

        Raises:
            NoActingPolicy: saying what it acts with (the run layer adds what to use instead).
        """
        raise NoActingPolicy(
            f"a {self.name} run acts with {self._acting} (an OpenSpiel game's run writes them to openspiel_policy.json)"
        )

    def write_openspiel_policy(self, path: Path) -> None:
        """Writes the scored policies to ``path`` in OpenSpiel's tabular form, where the env is an OpenSpiel game
        that could be tabulated (the run driver calls it after every iteration: ``openspiel_policy.json``)."""
        from marljoint.best_response.openspiel_game import OpenSpielGame

        game = self.game
        if isinstance(game, OpenSpielGame):
            game.export(game.tables(self.scored_policies()), path)

    def load_env_state(self, state: Mapping[str, Any] | None, trust_snapshot: bool = False) -> None:
        """Nothing to restore: see :meth:`env_state`."""


class PsroRun(GameRun):
    """A PSRO run (:class:`~marljoint.best_response.PSRO`) as the run driver drives it.

    Its best responses' env copies start afresh every iteration (seeded by the iteration), so the state of a
    completed iteration is the whole state: :meth:`env_state` is ``None`` and a resume is exact.
    """

    name = "psro"
    _acting = "meta-mixtures of its populations, one member drawn per step by its meta-strategy weight"

    def __init__(self, factory: Any, settings: Any, game: KnownGame | None, run_config: Any) -> None:
        from marljoint.best_response.psro import PSRO

        super().__init__(factory, settings, game, run_config)
        self.psro = PSRO(factory, settings, game, start=False)
        self.spec = self.psro.spec

    @property
    def iteration(self) -> int:
        """Driver iterations completed: PSRO's iteration 0 (the initial population) is the first."""
        return self.psro.iteration + 1 if self.psro.started else 0

    def iterate(self, total: int | None = None, aux_fn: Any = None) -> tuple[int, dict[str, Any], float]:
        """Iteration 0 (the initial population) first, then one PSRO iteration per call; ``(env steps of best
        response training, PSRO's metrics row, seconds)``."""
        tick = time.perf_counter()
        try:
            row = self.psro.step() if self.psro.started else self.psro.start()
        except ValueError as exc:  # the env or settings (an env whose episodes never end), found as it plays
            raise RunError(f"psro on env {self.env_name!r}, iteration {self.psro.iteration}: {exc}") from None
        steps = int(row.get("br_env_steps", 0) or 0)
        self.env_steps += steps
        row = dict(row)
        row["episodes"] = int(row.get("eval_episodes", 0) or 0)
        return steps, row, time.perf_counter() - tick

    def scored_policies(self) -> list[Any]:
        """Each seat's meta-mixture."""
        return [self.psro.meta_policy(seat) for seat in range(self.psro.num_players)]

    def _seat_policy(self, seat: int, deterministic: bool) -> Any:
        return _MixtureActor(self.psro.meta_policy(seat))

    def state_dict(self) -> dict[str, Any]:
        """What ``psro.pt`` held (:meth:`PSRO.state_dict <marljoint.best_response.PSRO.state_dict>`) but its
        metrics rows and clock, with the population members under ``policies`` (where the driver looks for
        non-finite weights), and the counters."""
        state = _untimed(self.psro.state_dict())
        state["policies"] = state.pop("populations")
        return {**state, "env_steps": self.env_steps, "generator": self._generator.get_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` output (a run built for the same env and settings)."""
        from marljoint.best_response.psro import PSRO

        saved = {k: v for k, v in state.items() if k not in ("policies", "env_steps", "generator")}
        saved.update(populations=state["policies"], **_UNTIMED)
        settings = self.settings
        old = self.psro
        self.psro = PSRO.from_state(saved, self.factory, self.game, settings, **old.policy_kwargs)
        old.env.close()
        self.env_steps = int(state["env_steps"])
        self._generator.set_state(state["generator"])

    def env_state(self) -> dict[str, Any] | None:
        """``None``: every iteration starts its env copies afresh."""
        return None

    def close(self) -> None:
        """Closes PSRO's env copies."""
        self.psro.env.close()


class NfspRun(GameRun):
    """An NFSP run (:class:`~marljoint.best_response.NFSP`) as the run driver drives it; it acts with the average
    policies. Its checkpoints hold the episodes in progress (:meth:`env_state`), so a resume is exact."""

    name = "nfsp"
    _acting = "the average policies of its seats (small networks trained on its best responses' moves)"

    def __init__(self, factory: Any, settings: Any, game: KnownGame | None, run_config: Any) -> None:
        from marljoint.best_response.nfsp import NFSP

        super().__init__(factory, settings, game, run_config)
        self.nfsp = NFSP(factory, settings, game)
        self.spec = self.nfsp.spec

    @property
    def iteration(self) -> int:
        """NFSP iterations completed."""
        return self.nfsp.iteration

    def iterate(self, total: int | None = None, aux_fn: Any = None) -> tuple[int, dict[str, Any], float]:
        """One NFSP iteration: ``(env steps, NFSP's metrics row, seconds)``."""
        tick = time.perf_counter()
        before = self.nfsp.trainer.env_steps
        row = dict(self.nfsp.step())
        self.env_steps = self.nfsp.trainer.env_steps
        row.pop("env_steps", None)
        return self.env_steps - before, row, time.perf_counter() - tick

    def scored_policies(self) -> list[Any]:
        """Each seat's average policy."""
        return list(self.nfsp.average_policies)

    def _seat_policy(self, seat: int, deterministic: bool) -> Any:
        return self.nfsp.average_policies[seat]

    def state_dict(self) -> dict[str, Any]:
        """What ``nfsp.pt`` held (:meth:`NFSP.state_dict <marljoint.best_response.NFSP.state_dict>`) but its
        metrics rows and clock, with the average policies under ``policies`` (where the driver looks for non-finite
        weights)."""
        state = _untimed(self.nfsp.state_dict())
        state["policies"] = state.pop("average_policies")
        return {**state, "generator": self._generator.get_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` output (a run built for the same env and settings)."""
        from marljoint.best_response.nfsp import NFSP

        saved = {k: v for k, v in state.items() if k not in ("policies", "generator")}
        saved.update(average_policies=state["policies"], **_UNTIMED)
        old = self.nfsp
        self.nfsp = NFSP.from_state(saved, self.factory, self.game, device=self.settings.device)
        old.env.close()
        self.env_steps = self.nfsp.trainer.env_steps
        self._generator.set_state(state["generator"])

    def env_state(self) -> dict[str, Any] | None:
        """The best responses' env copies mid-episode, with who controls each seat (the population env's state),
        so that a resume is exact; ``None`` before the first rollout.

        Raises:
            TypeError: if the env copies cannot be pickled.
        """
        return self.nfsp.trainer.env_state()

    def load_env_state(self, state: Mapping[str, Any] | None, trust_snapshot: bool = False) -> None:
        """Restores :meth:`env_state` output (``None``: the copies start afresh at the next rollout)."""
        self.nfsp.trainer.load_env_state(state, trust_snapshot=trust_snapshot)

    def close(self) -> None:
        """Closes NFSP's env copies."""
        self.nfsp.env.close()


_UNTIMED = {"history": [], "wall_time": 0.0}
"""What a PSRO or NFSP state holds that a run's checkpoint leaves out: its metrics rows (in metrics.csv) and its
clock (the run's is the driver's). A resumed run is then the same, bit for bit, as an uninterrupted one."""


def _untimed(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k not in _UNTIMED}


class _MixtureActor:
    """A seat's meta-mixture acting step by step: each row draws a member by its weight (the heaviest member,
    greedily, when deterministic) and that member acts."""

    def __init__(self, mixture: Any) -> None:
        self.mixture = mixture

    def act(self, obs: torch.Tensor, generator: torch.Generator, mask: Any, deterministic: bool) -> torch.Tensor:
        weights = torch.as_tensor(self.mixture.weights, dtype=torch.float64)
        rows = obs.shape[0]
        if deterministic:
            chosen = torch.full((rows,), int(weights.argmax()), dtype=torch.int64)
        else:
            chosen = torch.multinomial(weights, rows, replacement=True, generator=generator)
        parts = []
        for k in torch.unique(chosen).tolist():
            member = self.mixture.members[k]
            place = policy_device(member)
            picked = (chosen == k).nonzero().squeeze(-1)
            part = member.act(
                obs[picked].to(place), generator, None if mask is None else mask[picked].to(place), deterministic
            )
            parts.append((picked, part.cpu()))
        actions = torch.zeros((rows, *parts[0][1].shape[1:]), dtype=parts[0][1].dtype)
        for picked, part in parts:
            actions[picked] = part
        return actions
