"""Self-play of the joint trainer on an OpenSpiel game, scored by OpenSpiel's exploitability of its policy.

Used by ``benchmarks/leduc.py`` (methods ``mmd`` and ``ppo-selfplay``): both seats are trained together by
:class:`~marljoint.JointMultiAgentTrainer`, with the MMD term (``mmd``) or without (``ppo-selfplay``), for a
wall-time budget. Every ``eval_every`` seconds of training the current policy of each seat (its action
distribution, not the greedy action) is tabulated over every information state of the game and scored by
OpenSpiel's NashConv / 2; the scoring is not counted in the wall time.

MMD's no-regret guarantee bounds the exploitability of its *average* policy, so ``mmd`` also keeps the average as
``marljoint train --self-play mmd`` does (:class:`~marljoint.best_response.PolicyAverage`: after every iteration t the
current policies are tabulated and added with weight t, reach-weighted); each history row then also holds
``average_exploitability`` (NaN before the first iteration). The tabulation and the reach computation are not counted
in the wall time either. With an ``"ema"`` or ``"moving"`` magnet each scoring also scores the magnet itself
(``magnet_exploitability``).
"""

from __future__ import annotations

import math
import time
from typing import Any

SELF_PLAY_METHODS = ("mmd", "ppo-selfplay")


def self_play_trainer(
    game: str,
    method: str,
    seed: int,
    trainer_changes: dict[str, Any],
    mmd_changes: dict[str, Any],
    env_workers: int | str | None = None,
    policy_lag: int | None = None,
):
    """``(trainer, known game, regulariser or None)`` with ``marljoint train --self-play``'s defaults for
    ``game`` and the changes on top; ``env_workers`` and ``policy_lag`` as ``marljoint train --env-workers
    --policy-lag`` take them (``"auto"``: one worker process per core but the learner's, policy lag 1 unless
    given; a number: that many workers, policy lag 0 unless given; 0: collect in this process; ``None``: as
    ``marljoint train --self-play`` chooses on this machine, :func:`~marljoint.run.recipes.self_play_rule`)."""
    from marljoint import JointMultiAgentTrainer
    from marljoint.best_response.mmd import MmdConfig, mmd_regularizer
    from marljoint.collect import CollectionConfig
    from marljoint.run.build import make_env
    from marljoint.run.collection import with_auto_workers
    from marljoint.run.recipes import self_play_rule
    from marljoint.run.registry import known_game
    from marljoint.run.train import RunSpec
    from marljoint.threads import usable_cores

    kind = "mmd" if method == "mmd" else "ppo"
    values = {"env": game, "env_kwargs": {}, "self_play": kind, "seed": seed, **trainer_changes}
    cores = usable_cores() if env_workers is None else None  # marljoint train's collection for this machine
    values = {**self_play_rule(values, game, cores)[0], **values}  # and the game's magnet
    spec = RunSpec.from_dict(values)
    if env_workers == "auto":
        spec = with_auto_workers(spec, policy_lag)
    elif env_workers is not None and int(env_workers) > 0:
        collection = CollectionConfig("subprocess", workers=int(env_workers), policy_lag=policy_lag or 0)
        spec = RunSpec.from_dict({"collection": collection.to_dict()}, base=spec)
    env = make_env(spec)  # in this process, or in the worker processes of the collection
    factory = None
    if kind == "mmd":
        factory = mmd_regularizer(MmdConfig.from_dict({**spec.mmd_config().to_dict(), **mmd_changes}))
    trainer = JointMultiAgentTrainer.from_env(env, spec.trainer, regularizer=factory)
    return trainer, known_game(game), trainer.regularizer


def current_tables(trainer: Any, game: Any) -> list[Any]:
    """The tables of the trainer's current policies (their action distributions at every information state)."""
    return [game.table(trainer.agent_policy(seat), seat) for seat in range(game.num_players)]


def exploitability_of(trainer: Any, game: Any, tables: list[Any] | None = None) -> float:
    """OpenSpiel's exploitability (NashConv / 2) of the trainer's current policies (or of ``tables``)."""
    tables = current_tables(trainer, game) if tables is None else tables
    return float(game.nash_conv(tables)) / game.num_players


def magnet_row(trainer: Any, game: Any, regularizer: Any) -> dict[str, float]:
    """``{"magnet_exploitability": ...}`` for an ``"ema"`` or ``"moving"`` magnet (the magnet scored as a policy of
    its own); nothing for a uniform magnet or plain self-play."""
    if regularizer is None or regularizer.magnet is None:
        return {}
    magnet = [game.table(regularizer.magnet_policy(seat), seat) for seat in range(game.num_players)]
    return {"magnet_exploitability": exploitability_of(trainer, game, magnet)}


def run_self_play(
    game: str,
    method: str,
    seed: int,
    seconds: float,
    eval_every: float = 10.0,
    trainer_changes: dict[str, Any] | None = None,
    mmd_changes: dict[str, Any] | None = None,
    callback: Any = None,
    env_workers: int | str | None = None,
    policy_lag: int | None = None,
) -> list[dict[str, Any]]:
    """Trains for ``seconds`` of wall time; one history row per scoring: iteration, wall_time (training only),
    exploitability, env_steps (and, for ``mmd``, average_exploitability, best_policy_exploitability, the least
    exploitable of the policies scored so far as ``marljoint train`` keeps it, and the MMD metrics).

    With ``env_workers`` and policy lag 1 (see :func:`self_play_trainer`) the workers collect the next rollout
    while this process updates and scores, so the clock then runs through everything, scoring included: the run
    gets no free collection time."""
    from marljoint.best_response import PolicyAverage

    trainer, known, regularizer = self_play_trainer(
        game, method, seed, trainer_changes or {}, mmd_changes or {}, env_workers, policy_lag
    )
    overlapped = trainer.config.collection.policy_lag > 0
    average = PolicyAverage(known) if method == "mmd" else None
    first = {"iteration": 0, "wall_time": 0.0, "exploitability": exploitability_of(trainer, known), "env_steps": 0}
    if average is not None:
        first["average_exploitability"] = math.nan
        first["best_policy_exploitability"] = math.nan
    first.update(magnet_row(trainer, known, regularizer))
    history = [first]
    trained, next_eval, done = 0.0, eval_every, False
    best = math.inf
    tick = time.perf_counter()
    while not done:
        if not overlapped:
            tick = time.perf_counter()
        trainer.iterate()
        last = time.perf_counter() - tick
        tick += last
        trained += last
        # The run stops before an iteration that would likely end past the budget: the last row falls within it.
        done = trained + 1.5 * last > seconds
        tables = None
        if average is not None:  # every iterate enters the average, outside the timed training
            tables = current_tables(trainer, known)
            average.add(tables, float(trainer.iteration))
        if trained >= next_eval or done:
            next_eval = trained + eval_every
            row = {
                "iteration": trainer.iteration,
                "wall_time": trained,
                "exploitability": exploitability_of(trainer, known, tables),
                "env_steps": trainer.env_steps,
            }
            if average is not None:
                row["average_exploitability"] = exploitability_of(trainer, known, average.tables())
            row.update(magnet_row(trainer, known, regularizer))
            if average is not None:  # the least exploitable policy measured so far (openspiel_best_policy.json)
                kinds = ("exploitability", "average_exploitability", "magnet_exploitability")
                scored = [row[k] for k in kinds if k in row]
                best = min(best, *scored)
                row["best_policy_exploitability"] = best
            if regularizer is not None:
                row.update(regularizer.metrics())
            history.append(row)
            if callback is not None:
                callback(history)
    trainer.close()
    trainer.env.close()  # the env this module built: its worker processes, when the copies are stepped in workers
    return history
