"""OpenSpiel's CFR+ on a game: the tabular floor beside the sampled solvers of ``benchmarks/leduc.py``.

CFR+ (Tammelin 2014) walks the whole game tree every iteration and needs no samples, so on games small enough to
walk it is far ahead of every sampled method; the tables of ``docs/best_response.md`` put its time to the sampled
methods' exploitability beside them. The clock runs through the iterations only (each scoring of the average policy
is left out), one thread.

Usage::

    python benchmarks/cfr_plus.py --game liars_dice --seconds 60 --targets 0.2 0.1 0.05
    python benchmarks/cfr_plus.py --game "goofspiel(num_cards=5,imp_info=True,points_order=descending)" --seconds 60

Games of simultaneous moves are solved in their turn-based form (``turn_based_simultaneous_game``), which has the
same exploitability for the same policy.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any


def cfr_plus_curve(game_string: str, seconds: float, score_every: float = 1.0) -> list[tuple[float, int, float]]:
    """Runs CFR+ for ``seconds`` of its own time; ``[(seconds, iterations, exploitability)]`` at every scoring
    (after iterations 1, 2, 4, 8, ..., about every ``score_every`` seconds, and at the end)."""
    import pyspiel

    game = pyspiel.load_game(game_string)
    if game.get_type().dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS:
        game = pyspiel.convert_to_turn_based(game)
    solver = pyspiel.CFRPlusSolver(game)
    curve: list[tuple[float, int, float]] = []
    spent, iterations, next_score = 0.0, 0, 0.0
    while spent < seconds:
        tick = time.perf_counter()
        solver.evaluate_and_update_policy()
        spent += time.perf_counter() - tick
        iterations += 1
        if iterations & (iterations - 1) == 0 or spent >= next_score or spent >= seconds:  # 1, 2, 4, ... and timed
            curve.append((spent, iterations, float(pyspiel.exploitability(game, solver.average_policy()))))
            next_score = spent + score_every
    return curve


def time_to(curve: list[tuple[float, int, float]], target: float) -> tuple[float, int] | None:
    """``(seconds, iterations)`` of the first scoring at or below ``target``; ``None`` when none is."""
    return next(((t, n) for t, n, value in curve if value <= target), None)


def report(game: str, curve: list[tuple[float, int, float]], targets: list[float]) -> str:
    """Lines: the exploitability at the end, and the time to each target."""
    t, n, value = curve[-1]
    lines = [f"CFR+ on {game}: {value:.4f} after {t:.1f} s ({n} iterations)"]
    for target in targets:
        reached: Any = time_to(curve, target)
        where = "not within the budget" if reached is None else f"{reached[0]:.2f} s ({reached[1]} iterations)"
        lines.append(f"  to {target:g}: {where}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="leduc_poker", help="an OpenSpiel game string (no 'openspiel:' prefix)")
    parser.add_argument("--seconds", type=float, default=60.0, help="CFR+'s own time budget")
    parser.add_argument("--targets", type=float, nargs="*", default=[0.2, 0.1, 0.05, 0.02])
    parser.add_argument("--score-every", type=float, default=1.0)
    args = parser.parse_args()
    curve = cfr_plus_curve(args.game.removeprefix("openspiel:"), args.seconds, args.score_every)
    if not curve or not math.isfinite(curve[-1][2]):
        raise SystemExit(f"CFR+ did not finish one iteration on {args.game} within {args.seconds} s")
    print(report(args.game, curve, args.targets))


if __name__ == "__main__":
    main()
