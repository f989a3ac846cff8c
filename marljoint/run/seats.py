"""Per-seat evaluation of a two-player run against fixed references: ``marljoint eval RUN --against ...``.

In a zero-sum game the agents' returns in self-play sum to 0, so their mean says nothing about how good the policies
are. What does: each seat of the trained policies playing against a fixed opponent, a uniformly random one
(``random``) or the policies of a saved checkpoint (an earlier checkpoint of the run, or another run of the same
env), with both seat assignments: the trained policy plays seat ``i`` while the reference plays the other seat.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from marljoint.run.errors import ExportRefused, RunError
from marljoint.run.evaluate import TrainedRun, load_run
from marljoint.run.exploitability import game_facts, seat_returns, uniform_references
from marljoint.run.stats import confidence_interval
from marljoint.run.train import CONFIG_FILE, load_run_spec

__all__ = ["RANDOM", "SeatEvaluation", "check_references", "evaluate_seats"]

RANDOM = "random"
"""The reference that plays uniformly at random over the legal actions."""


@dataclass
class SeatEvaluation:
    """Returns of the trained policies, seat by seat, against each reference.

    Attributes:
        agents: the two agent names (seats) in ``possible_agents`` order.
        references: the label of each reference (``"random"``, or a checkpoint's path).
        returns: per reference, ``[2, episodes]``: the trained policy's return in each seat.
        checkpoint: the checkpoint evaluated.
    """

    agents: tuple[str, ...]
    references: list[str] = field(default_factory=list)
    returns: list[np.ndarray] = field(default_factory=list)
    checkpoint: Path | None = None

    def summary(self) -> list[dict[str, Any]]:
        """One row per (reference, seat): ``reference``, ``seat`` (the agent), ``mean`` and ``ci95`` (half-width)."""
        rows = []
        for reference, returns in zip(self.references, self.returns):
            for agent, values in zip(self.agents, returns):
                mean, half = confidence_interval(values)
                rows.append({"reference": reference, "seat": agent, "mean": mean, "ci95": half})
        return rows

    def format(self) -> str:
        """The summary as a small table: the trained policy's return per seat against each reference."""
        rows = self.summary()
        width = max(len("reference"), *(len(r["reference"]) for r in rows))
        seat_width = max(len("seat"), *(len(a) for a in self.agents))
        episodes = self.returns[0].shape[1] if self.returns else 0
        lines = [
            f"per seat against references ({episodes} episodes each, sampled actions): the trained policy plays the "
            "seat, the reference the other one",
            f"{'reference':<{width}}  {'seat':<{seat_width}}  return (mean ± 95% CI)",
        ]
        for row in rows:
            lines.append(
                f"{row['reference']:<{width}}  {row['seat']:<{seat_width}}  {row['mean']:.4g} ± {row['ci95']:.3g}"
            )
        return "\n".join(lines)


def _seat_policies(run: TrainedRun, asked: bool) -> list[Any] | None:
    """Each seat's policy, or ``None`` for a run without per-seat policies (it acts on its Q networks, say) when no
    reference was ``asked`` for: it plays no seats then.

    Raises:
        ExportRefused: references asked for a run without per-seat policies.
    """
    try:
        return [run.agent_policy(seat) for seat in range(2)]
    except ExportRefused:
        if asked:
            raise
        return None


def evaluate_seats(
    run_dir: str | os.PathLike[str],
    against: Sequence[str] = (),
    episodes: int = 10,
    seed: int = 12345,
    checkpoint: str | os.PathLike[str] | None = None,
    trust_run: bool = False,
) -> SeatEvaluation | None:
    """Plays each seat of a two-player run against each reference (see the module docstring).

    Example:
        >>> evaluate_seats("runs/kuhn", ["random", "runs/kuhn/checkpoints/ckpt_0000010.pt"])  # doctest: +SKIP

    Args:
        run_dir: a run directory written by ``marljoint train``.
        against: references: ``"random"``, a run directory of the same env (its newest checkpoint), or a checkpoint
            file (loaded into this run's networks). Empty: ``["random"]`` in a two-player zero-sum game, else none.
        episodes: episodes per seat and reference (>= 2 for a confidence interval).
        seed: seeds the episodes and the policies' sampling.
        checkpoint: the checkpoint evaluated (the run's newest when ``None``).
        trust_run: read runs (this one and those in ``against``) whose ``config.toml`` is not signed with your key
            even if they name a function as their env (:func:`~marljoint.run.evaluate.load_run`).

    Returns:
        A :class:`SeatEvaluation`, or ``None`` when there is nothing to evaluate (no reference given, and the game
        is not two-player zero-sum).

    Raises:
        RunError: a reference that is none of the above, a run of another env, or references for a game that does
            not have two players.
        ExportRefused: references given for a run without per-seat policies (an off-policy run); without
            references such a run plays no seats (``None``).
    """
    spec = load_run_spec(run_dir, trust_run)
    if not against and not game_facts(spec.env, spec.env_kwargs, spec.wrappers, 2).zero_sum:
        return None  # decided before the run's env and networks are built
    run = load_run(run_dir, checkpoint, num_envs=min(episodes, 8), seed=seed, trust_run=trust_run)
    try:
        agents = tuple(run.trainer.spec.agents)
        facts = game_facts(run.spec.env, run.spec.env_kwargs, run.spec.wrappers, len(agents))
        references = list(against) or ([RANDOM] if facts.two_player_zero_sum else [])
        if not references:
            return None
        if len(agents) != 2:
            raise RunError(
                f"--against {references[0]}: evaluation against a reference needs a two-player game, and env "
                f"{run.spec.env!r} has {len(agents)} agents {list(agents)}; drop --against"
            )
        policies = _seat_policies(run, bool(against))
        if policies is None:
            return None
        result = SeatEvaluation(agents, checkpoint=run.checkpoint)
        for reference in references:
            label, opponents = _reference(reference, run, run_dir, trust_run)
            returns = [seat_returns(run.env, policies, opponents, seat, episodes, seed) for seat in range(2)]
            result.references.append(label)
            result.returns.append(np.stack(returns))
        return result
    finally:
        run.close()


def _reference(value: str, run: TrainedRun, run_dir: str | os.PathLike[str], trust_run: bool) -> tuple[str, list[Any]]:
    """``(label, one frozen policy per seat)`` of a ``--against`` value."""
    if value == RANDOM:
        return RANDOM, uniform_references(run.env)
    path = Path(value)
    if path.is_dir() and (path / CONFIG_FILE).is_file():
        other = load_run(path, trust_run=trust_run)
        try:
            _check_same_env(run, other, path)
            return str(other.checkpoint), [other.agent_policy(seat) for seat in range(2)]
        finally:
            other.close()
    if path.is_file():
        # a checkpoint of another env is refused here, naming both envs
        other = load_run(run_dir, path, trust_run=trust_run)
        try:
            return str(path), [other.agent_policy(seat) for seat in range(2)]
        finally:
            other.close()
    raise _not_a_reference(value)


def check_references(run_dir: str | os.PathLike[str], against: Sequence[str], trust_run: bool = False) -> None:
    """Refuses, before anything is played, a ``--against`` value that is neither ``random``, a run directory nor a
    file, and a run directory of another env (read from the ``config.toml`` files alone).

    Raises:
        RunError: naming the reference and the fix, as :func:`evaluate_seats` would once the run's episodes are
            played.
    """
    if not against:
        return
    ours = _setup(load_run_spec(run_dir, trust_run))
    for value in against:
        path = Path(value)
        if value == RANDOM or path.is_file():
            continue
        if not (path.is_dir() and (path / CONFIG_FILE).is_file()):
            raise _not_a_reference(value)
        theirs = _setup(load_run_spec(path, trust_run))
        if theirs != ours:
            raise _other_env(path, theirs, ours)


def _not_a_reference(value: str) -> RunError:
    return RunError(
        f"--against {value!r} is neither 'random', a run directory (with {CONFIG_FILE}) nor a checkpoint file; give "
        "--against random, --against OTHER_RUN_DIR or --against RUN_DIR/checkpoints/ckpt_<N>.pt"
    )


def _setup(spec: Any) -> tuple[str, dict[str, Any], list[Any]]:
    """``(env, env_kwargs, wrappers)`` of a run's settings: what two runs must share to play each other."""
    return spec.env, dict(spec.env_kwargs), list(spec.wrappers)


def _other_env(path: Path, theirs: tuple[str, dict[str, Any], list[Any]], ours: tuple[Any, ...]) -> RunError:
    return RunError(
        f"--against {path}: that run trained on env {theirs[0]!r} {theirs[1]}, this one on {ours[0]!r} {ours[1]}; "
        "give a run (or checkpoint) of the same env"
    )


def _check_same_env(run: TrainedRun, other: TrainedRun, path: Path) -> None:
    ours, theirs = _setup(run.spec), _setup(other.spec)
    if ours != theirs:
        raise _other_env(path, theirs, ours)
