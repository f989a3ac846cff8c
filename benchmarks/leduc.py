"""PSRO and NFSP on Leduc poker (``openspiel:leduc_poker``), with OpenSpiel's exact exploitability against wall time.

Methods, each for ``--seconds`` of wall time per seed (the settings ``marljoint psro`` / ``marljoint nfsp`` use for
an OpenSpiel game, ``marljoint.run.recipes.recipe_for``):

* ``psro-sim``: PSRO with PPO best responses, meta-game payoffs simulated (as OpenSpiel's own PSRO anchor was run);
* ``psro-exact``: the same, with exact meta-game payoffs from OpenSpiel's game tree;
* ``nfsp``: NFSP with PPO best responses;
* ``mmd``: magnetic mirror descent self-play of the joint trainer (``marljoint train --self-play mmd``'s settings);
* ``ppo-selfplay``: plain PPO self-play with the same trainer settings (``--self-play ppo``).

The ``mmd`` runs also report their average policy (the reach-weighted average of the iterates, weight t at
iteration t; the policy MMD's guarantee is about) as a row of its own, ``mmd-average``: in the summary CSV, the
table and the figure (a dashed line in ``mmd``'s colour, from the ``average_exploitability`` column of ``mmd``'s
metrics); runs with an ``"ema"`` or ``"moving"`` magnet (``--set magnet=ema``) also report the magnet itself as
``mmd-magnet`` (its ``magnet_exploitability`` column). ``mmd-best`` is the least exploitable policy scored so
far (current, average or magnet; ``best_policy_exploitability``): what ``marljoint train --self-play mmd
--exploitability-every K`` writes to ``openspiel_best_policy.json``, chosen by the exact measure.

``--game`` runs them on another OpenSpiel game (``openspiel:kuhn_poker``, ``"openspiel:liars_dice(dice_sides=4)"``);
OpenSpiel's anchors are Leduc's and are drawn for Leduc only. Self-play is scored every 10 s of training, on the
action distributions of both seats (``benchmarks/selfplay.py``); ``--set`` items then are ``MmdConfig`` fields
(``alpha=0.5``) or ``trainer.X``.

The exploitability is OpenSpiel's (``pyspiel.nash_conv`` / 2) of the evaluated policy: PSRO's meta-mixture, NFSP's
average policies. Each run writes ``OUT/<method>/seed<k>/metrics.csv`` (one row per iteration); the summary CSV
``--csv`` gets, per run, the exploitability of the last iteration finished by each checkpoint (10, 60, 300 and
600 s by default). ``--report`` prints the table of a summary CSV (mean ± 95% CI over seeds). ``--anchor`` measures
OpenSpiel's CFR+ for one second, the exact-solver reference.

Usage::

    pip install -e ".[openspiel]"
    python benchmarks/leduc.py --methods psro-sim psro-exact nfsp --seeds 0 1 2 --seconds 600 \\
        --out runs/leduc --csv benchmarks/results/leduc/runs.csv
    python benchmarks/leduc.py --report --csv benchmarks/results/leduc/runs.csv --plot docs/img/leduc.png
    python benchmarks/leduc.py --methods psro-sim --seeds 0 --set warm_start=false --csv fresh.csv  # a variant
    python benchmarks/leduc.py --game openspiel:kuhn_poker --methods mmd ppo-selfplay --seconds 120 \\
        --checkpoints 10 60 120 --csv benchmarks/results/kuhn/runs.csv
    python benchmarks/leduc.py --methods mmd --env-workers 2 --csv two_workers.csv  # collect in 2 processes
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from selfplay import SELF_PLAY_METHODS, run_self_play

GAME = "openspiel:leduc_poker"
GOALS = {GAME: 0.2, "openspiel:kuhn_poker": 0.02}
"""The exploitability goal drawn into a game's figure (none for other games)."""
METHODS = ("psro-sim", "psro-exact", "nfsp", *SELF_PLAY_METHODS)
AVERAGE_OF = {
    "mmd-average": ("mmd", "average_exploitability"),
    "mmd-magnet": ("mmd", "magnet_exploitability"),
    "mmd-best": ("mmd", "best_policy_exploitability"),
}
"""Rows reported beside a method: the average policy of its runs (``average_exploitability`` of its metrics),
with an ``"ema"`` or ``"moving"`` magnet the magnet itself (``magnet_exploitability``), and the least exploitable
policy scored so far (``best_policy_exploitability``, what ``openspiel_best_policy.json`` of ``marljoint train``
holds): ``row: (method, column)``."""
REPORTED = ("psro-sim", "psro-exact", "nfsp", "mmd", "mmd-average", "mmd-magnet", "mmd-best", "ppo-selfplay")
"""The methods and reported averages, in the order of the table and the figure's legend."""
CHECKPOINTS = (10.0, 60.0, 300.0, 600.0)
FIELDS = ("method", "seed", "checkpoint_s", "exploitability", "iterations", "wall_s")


def parse_changes(items: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``--set`` items (``FIELD=VALUE``, VALUE as JSON or a bare string) as ``(config changes, trainer changes)``:
    ``trainer.X=V`` goes to the PPO settings, anything else to ``PsroConfig`` / ``NfspConfig``."""
    config: dict[str, Any] = {}
    trainer: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set expects FIELD=VALUE, got {item!r}")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        value = tuple(value) if isinstance(value, list) else value
        if key.startswith("trainer."):
            trainer[key.removeprefix("trainer.")] = value
        else:
            config[key] = value
    return config, trainer


def build(
    method: str, seed: int, changes: tuple[dict[str, Any], dict[str, Any]] = ({}, {}), game_name: str = GAME
) -> Any:
    """The PSRO or NFSP run of ``method`` on ``game_name``, with the command line's settings for an OpenSpiel game and
    ``changes`` (from :func:`parse_changes`) on top."""
    from marljoint.best_response import NFSP, PSRO, NfspConfig, PsroConfig
    from marljoint.run.recipes import auto_meta_solver, env_factory, recipe_for
    from marljoint.run.registry import known_game

    recipe = recipe_for(game_name)
    factory = env_factory(game_name, {})
    game = known_game(game_name)
    config_changes, trainer_changes = changes
    if method == "nfsp":
        trainer = recipe.nfsp_trainer_config().replace(**trainer_changes)
        settings = {**recipe.nfsp, **config_changes}
        return NFSP(factory, NfspConfig(trainer=trainer, seed=seed, **settings), game)
    settings = {
        "iterations": 10_000,
        "meta_solver": auto_meta_solver(recipe, game.num_players),
        "evaluation": "simulation" if method == "psro-sim" else "exact",
        "episodes_per_entry": recipe.episodes_per_entry,
        "eval_num_envs": recipe.eval_num_envs,
        "br_steps": recipe.br_steps,
        "trainer": recipe.trainer.replace(**trainer_changes),
        "warm_start": recipe.warm_start,
        "warm_start_policy_scale": recipe.warm_start_policy_scale,
        "seed": seed,
        **config_changes,
    }
    return PSRO(factory, PsroConfig(**settings), game)


def at_checkpoints(
    history: list[dict[str, Any]], checkpoints: tuple[float, ...], key: str = "exploitability"
) -> list[tuple[float, float, int]]:
    """``(checkpoint, history[key] of the last iteration finished by then, its iteration)`` per checkpoint."""
    out = []
    for t in checkpoints:
        done = [row for row in history if row["wall_time"] <= t]
        out.append((t, float(done[-1][key]), int(done[-1]["iteration"])) if done else (t, math.nan, -1))
    return out


def run_one(
    method: str,
    seed: int,
    seconds: float,
    out: Path,
    checkpoints: tuple[float, ...],
    changes: tuple[dict[str, Any], dict[str, Any]] = ({}, {}),
    game_name: str = GAME,
    env_workers: int | str | None = None,
    policy_lag: int | None = None,
) -> list[dict[str, Any]]:
    """Runs one (method, seed) for ``seconds`` and returns its summary rows (``env_workers``, ``policy_lag``:
    self-play only)."""
    from marljoint.run.runlog import write_metrics_csv

    directory = out / method / f"seed{seed}"
    directory.mkdir(parents=True, exist_ok=True)
    if method in SELF_PLAY_METHODS:
        return _self_play_rows(
            method, seed, seconds, directory, checkpoints, changes, game_name, env_workers, policy_lag
        )
    run = build(method, seed, changes, game_name)

    def record(_: Any) -> None:
        write_metrics_csv(run.history, directory / "metrics.csv", ("iteration", "wall_time", "exploitability"))

    if method == "nfsp":
        run.run(max_seconds=seconds, callback=record)
    else:
        record({})
        run.run(max_seconds=seconds, callback=record)
    wall = run.history[-1]["wall_time"]
    return [
        {
            "method": method,
            "seed": seed,
            "checkpoint_s": t,
            "exploitability": value,
            "iterations": iteration,
            "wall_s": round(wall, 1),
        }
        for t, value, iteration in at_checkpoints(run.history, checkpoints)
    ]


def _self_play_rows(
    method: str,
    seed: int,
    seconds: float,
    directory: Path,
    checkpoints: tuple[float, ...],
    changes: tuple[dict[str, Any], dict[str, Any]],
    game_name: str,
    env_workers: int | str | None = None,
    policy_lag: int | None = None,
) -> list[dict[str, Any]]:
    """Self-play of the joint trainer (``benchmarks/selfplay.py``): ``--set`` items are MmdConfig fields, or
    ``trainer.X`` for the PPO settings; ``env_workers`` and ``policy_lag`` as ``marljoint train --env-workers
    --policy-lag`` take them."""
    from marljoint.run.runlog import write_metrics_csv

    first = ("iteration", "wall_time", "exploitability", "env_steps")

    def record(history: list[dict[str, Any]]) -> None:
        write_metrics_csv(history, directory / "metrics.csv", first)

    mmd_changes, trainer_changes = changes
    history = run_self_play(
        game_name,
        method,
        seed,
        seconds,
        trainer_changes=trainer_changes,
        mmd_changes=mmd_changes,
        callback=record,
        env_workers=env_workers,
        policy_lag=policy_lag,
    )
    record(history)
    wall = history[-1]["wall_time"]
    reported = [(method, "exploitability")]
    reported += [(name, key) for name, (of, key) in AVERAGE_OF.items() if of == method and key in history[-1]]
    return [
        {
            "method": name,
            "seed": seed,
            "checkpoint_s": t,
            "exploitability": value,
            "iterations": iteration,
            "wall_s": round(wall, 1),
        }
        for name, key in reported
        for t, value, iteration in at_checkpoints(history, checkpoints, key)
    ]


def cfr_plus_anchor(seconds: float = 1.0) -> tuple[float, int]:
    """OpenSpiel's CFR+ on Leduc for ``seconds``: (exploitability of its average policy, iterations)."""
    import pyspiel

    game = pyspiel.load_game("leduc_poker")
    solver = pyspiel.CFRPlusSolver(game)
    start, iterations = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        solver.evaluate_and_update_policy()
        iterations += 1
    return float(pyspiel.exploitability(game, solver.average_policy())), iterations


def anchor_rows(checkpoints: list[float]) -> list[str]:
    """OpenSpiel's anchors as table rows: each value in the column of the first checkpoint at or after its time
    (uniform play in every column)."""
    lines = []
    for label, seconds, value in ANCHORS:
        if seconds is None:
            cells = [f"{value:.3f}"] * len(checkpoints)
        else:
            column = next((k for k, t in enumerate(checkpoints) if t >= seconds), len(checkpoints) - 1)
            cells = [f"{value:.3f} (at {seconds:.0f} s)" if k == column else "" for k in range(len(checkpoints))]
        lines.append(f"| {label} | " + " | ".join(cells) + " | – |")
    return lines


def report(path: Path, anchors: bool = False) -> str:
    """The markdown table of a summary CSV: per method and checkpoint, the mean over seeds ± 95% CI (with
    ``anchors``, OpenSpiel's Leduc anchors below)."""
    from marljoint.run.stats import confidence_interval

    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    checkpoints = sorted({float(r["checkpoint_s"]) for r in rows})
    lines = [
        "| method | " + " | ".join(f"{t:.0f} s" for t in checkpoints) + " | seeds |",
        "|---|" + "---|" * len(checkpoints) + "---|",
    ]
    for method in REPORTED:
        mine = [r for r in rows if r["method"] == method]
        if not mine:
            continue
        cells = []
        for t in checkpoints:
            values = [float(r["exploitability"]) for r in mine if float(r["checkpoint_s"]) == t]
            values = [v for v in values if math.isfinite(v)]
            if not values:
                cells.append("–")
                continue
            mean, half = confidence_interval(values)
            cells.append(f"{mean:.3f}" + (f" ± {half:.3f}" if len(values) > 1 else ""))
        seeds = len({r["seed"] for r in mine})
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {seeds} |")
    return "\n".join(lines + (anchor_rows(checkpoints) if anchors else []))


ANCHORS = (
    # (label, seconds or None for a level, exploitability): OpenSpiel's implementations, measured on this machine
    ("uniform play", None, 2.374),
    ("OpenSpiel NFSP", 300.0, 2.05),
    ("OpenSpiel PSRO, exact best responses", 60.0, 0.63),
    ("OpenSpiel CFR+", 1.0, 0.013),
)


def metrics_files(directory: Path, method: str) -> list[Path]:
    """A method's per-run metrics in ``directory``: ``<method>_seed<k>_metrics.csv`` (the results folder's layout)
    or ``<method>/seed<k>/metrics.csv`` (what a run writes under ``--out``), in seed order."""
    flat = sorted(directory.glob(f"{method}_seed*_metrics.csv"))
    return flat or sorted(directory.glob(f"{method}/seed*/metrics.csv"))


def plot_curves(
    directory: Path, out: Path, goal: float | None = 0.2, title: str = "Leduc poker", anchors: bool = True
) -> int:
    """Exploitability against wall time, one line per run (colour: method), OpenSpiel's anchors as markers, uniform
    play and the goal as horizontal lines; log scales. Returns the number of runs drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {
        "psro-sim": "tab:blue",
        "psro-exact": "tab:green",
        "nfsp": "tab:orange",
        "mmd": "tab:red",
        "mmd-average": "tab:red",
        "mmd-magnet": "tab:brown",
        "mmd-best": "tab:pink",
        "ppo-selfplay": "tab:purple",
    }
    fig, ax = plt.subplots(figsize=(8.0, 4.0))
    drawn = 0
    for method in REPORTED:
        of, key = AVERAGE_OF.get(method, (method, "exploitability"))
        labelled = False
        for path in metrics_files(directory, of):
            with path.open(newline="") as f:
                rows = [r for r in csv.DictReader(f) if float(r["wall_time"]) > 0 and r.get(key) not in (None, "")]
            if not rows:  # metrics written before the average was kept, or a run without a magnet
                continue
            ax.plot(
                [float(r["wall_time"]) for r in rows],
                [float(r[key]) for r in rows],
                color=colours[method],
                linewidth=1,
                alpha=0.8,
                linestyle="--" if method in AVERAGE_OF else "-",
                label=None if labelled else method,
            )
            labelled = True
            drawn += 1
    for (label, seconds, value), marker in zip(ANCHORS if anchors else (), ("", "s", "^", "*")):
        if seconds is None:
            ax.axhline(value, color="grey", linestyle="--", linewidth=1, label=label)
        else:
            ax.plot([seconds], [value], marker=marker, color="black", linestyle="none", markersize=7, label=label)
    if goal is not None:
        ax.axhline(goal, color="red", linestyle=":", linewidth=1, label=f"goal {goal}")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="wall time (s)",
        ylabel="exploitability (OpenSpiel)",
        title=f"{title}:\nPSRO, NFSP and self-play with PPO",
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return drawn


def command_line() -> argparse.ArgumentParser:
    """The script's arguments (``--set`` may be given several times; its items add up)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--game", default=GAME, help=f"an openspiel: game string (default {GAME})")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--seconds", type=float, default=600.0, help="wall-time budget per run")
    parser.add_argument("--checkpoints", nargs="+", type=float, default=list(CHECKPOINTS))
    parser.add_argument("--out", type=Path, default=Path("runs/leduc"))
    parser.add_argument("--csv", type=Path, default=Path("benchmarks/results/leduc/runs.csv"))
    parser.add_argument("--report", action="store_true", help="print the table of --csv instead of running")
    parser.add_argument(
        "--plot",
        type=Path,
        help="with --report: also draw every run's exploitability against time into this PNG, from the metrics "
        "files beside --csv (<method>_seed<k>_metrics.csv) or under --out",
    )
    parser.add_argument("--anchor", action="store_true", help="measure OpenSpiel's CFR+ for one second and stop")
    parser.add_argument(
        "--env-workers",
        metavar="K",
        help="self-play methods: collect in K worker processes ('auto': one per core but the learner's; 0: in this "
        "process), as marljoint train --env-workers does. Default: as marljoint train --self-play chooses on this "
        "machine (one worker per core at policy lag 0 from two cores up)",
    )
    parser.add_argument(
        "--policy-lag",
        type=int,
        choices=(0, 1),
        help="with --env-workers, as marljoint train --policy-lag: 1 collects the next rollout during the update "
        "(the clock then also runs through the scoring); default 0 for a number of workers, 1 for 'auto'",
    )
    parser.add_argument(
        "--set",
        nargs="+",
        action="extend",
        default=[],
        metavar="FIELD=VALUE",
        help="change a PsroConfig / NfspConfig field (trainer.X for the PPO settings), e.g. warm_start=false "
        "trainer.learning_rate=3e-3; VALUE is JSON or a bare string",
    )
    return parser


def main() -> None:
    args = command_line().parse_args()
    if args.report:
        print(report(args.csv, anchors=args.game == GAME))
        if args.plot is not None:
            beside = any(metrics_files(args.csv.parent, method) for method in METHODS)
            leduc = args.game == GAME
            goal = GOALS.get(args.game)
            drawn = plot_curves(args.csv.parent if beside else args.out, args.plot, goal, args.game, anchors=leduc)
            print(f"{drawn} runs drawn into {args.plot}")
        return
    if args.anchor:
        value, iterations = cfr_plus_anchor()
        print(f"CFR+ (OpenSpiel, C++): exploitability {value:.4f} after {iterations} iterations in 1 s")
        return
    import torch

    torch.set_num_threads(1)
    if args.env_workers not in (None, "auto") and not args.env_workers.isdigit():
        raise SystemExit(
            f"--env-workers takes 'auto', 0 (collect in this process) or a number of workers, got {args.env_workers!r}"
        )
    changes = parse_changes(args.set)
    done = set()
    if args.csv.is_file():
        with args.csv.open(newline="") as f:
            done = {(r["method"], int(r["seed"])) for r in csv.DictReader(f)}
    for seed in args.seeds:
        for method in args.methods:
            if (method, seed) in done:
                continue
            rows = run_one(
                method,
                seed,
                args.seconds,
                args.out,
                tuple(args.checkpoints),
                changes,
                args.game,
                args.env_workers,
                args.policy_lag,
            )
            new = not args.csv.is_file()
            args.csv.parent.mkdir(parents=True, exist_ok=True)
            with args.csv.open("a", newline="") as f:
                writer = csv.DictWriter(f, FIELDS)
                if new:
                    writer.writeheader()
                writer.writerows(rows)
            finished = rows[-1]["iterations"] if rows else 0
            for name in dict.fromkeys(r["method"] for r in rows):  # the method, then any average it reports
                summary = ", ".join(
                    f"{r['checkpoint_s']:.0f} s: {r['exploitability']:.3f}" for r in rows if r["method"] == name
                )
                print(f"{name} seed {seed}: {summary} ({finished} iterations by the last checkpoint)", flush=True)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
