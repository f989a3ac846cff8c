"""Several runs from one command: ``marljoint train --seeds ...``, ``--sweep KEY=V1,V2,...`` and ``marljoint tune``.

The runs train side by side (:mod:`marljoint.run.sweep`); the terminal shows one line per finished run and a summary.
A failed run is reported in one line on standard error, the others finish, and the command exits with status 1.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from marljoint.cli.args import positive_int, sweep_axis
from marljoint.cli.train_options import add_train_options

__all__ = ["register", "several_runs", "sweep_axis", "train_many"]

FAILED = 1
"""Exit status when some runs failed (the others finished and are reported)."""

_OPTION_OF = {
    "env_kwargs": "--env-kwargs",
    "wrappers": "--wrap",
    "wandb_project": "--wandb",
    "collection": "--env-workers/--ray",
}


def several_runs(args: argparse.Namespace) -> bool:
    """Whether the command trains several runs (``--seeds``, ``--sweep`` or ``marljoint tune``).

    Raises:
        RunError: ``--jobs`` for a single run.
    """
    many = bool(args.seeds) or bool(getattr(args, "sweep", None)) or args.command == "tune"
    if not many and getattr(args, "jobs", None) is not None:
        from marljoint.run.errors import RunError

        raise RunError("--jobs N sets how many runs of --seeds or --sweep train at a time; add --seeds S [S ...]")
    return many


def train_many(args: argparse.Namespace, spec: Any, options: dict[str, Any]) -> int:
    """Trains the runs of ``--seeds`` / ``--sweep`` (or searches, for ``marljoint tune``) and reports them.

    Args:
        args: the parsed command line.
        spec: the run's settings (``None`` with ``--resume``: each run's own are read).
        options: the settings given on the command line (``--set`` and the options), which a sweep may not repeat.

    Returns:
        0, or :data:`FAILED` when some run failed.
    """
    from marljoint.run.errors import RunError

    seeds = list(args.seeds or [0 if args.seed is None else args.seed])
    if len(set(seeds)) != len(seeds):
        raise RunError(f"--seeds lists a seed twice: {args.seeds}")
    if args.command == "tune":
        return _tune(args, spec, options, seeds)
    from marljoint.run.sweep import check_before_start, point_dir, run_jobs, sweep_points

    axes = _checked_axes(args.sweep, options, args, "--sweep")
    out = _out(args, spec)
    points = sweep_points(axes)
    parallel, cores, engine = _sharing(args, len(points) * len(seeds))
    jobs = []
    for point in points:
        parent = out / point_dir(point) if point else out
        jobs += [_job(args, spec, options, point, parent / f"seed_{seed}", seed, cores, engine) for seed in seeds]
    check_before_start(jobs, args.resume, args.force)

    outcomes = run_jobs(jobs, parallel, on_done=lambda outcome: _report(outcome, args.quiet), engine=engine)
    if args.sweep:
        _sweep_summary(out, outcomes, args.quiet)
    else:
        _seeds_summary(out, outcomes, args.quiet)
    return _status(outcomes, args.command)


def _out(args: argparse.Namespace, spec: Any) -> Path:
    from marljoint.run.rundir import default_run_dir

    return Path(args.out) if args.out is not None else default_run_dir(spec)


def _checked_axes(
    axes: list[tuple[str, list[tuple[str, Any]]]], options: dict[str, Any], args: argparse.Namespace, flag: str
) -> list[Any]:
    """The ``--sweep`` (or ``--param``) axes, refused when they repeat a key, vary the seed, or vary a key that is
    set another way."""
    from marljoint.run.errors import RunError
    from marljoint.run.reads import setting_keys
    from marljoint.run.spec import RunSpec

    known = set(setting_keys(RunSpec.__dataclass_fields__))
    seen: set[str] = set()
    for key, _ in axes:
        if key == "seed":
            raise RunError(f"{flag} seed=...: give the seeds with --seeds S [S ...] (every setting runs each seed)")
        if key not in known:
            raise RunError(f"{flag} {key}=...: unknown setting {key!r}; valid settings: {sorted(known)}")
        if key in seen:
            raise RunError(f"{flag} {key} is given twice; list all its values in one {flag} {key}=...")
        if key in options:
            given = f"--set {key}=..." if key in dict(args.set) else _OPTION_OF.get(key, "--" + key.replace("_", "-"))
            raise RunError(f"{flag} {key}=... and {given} both set {key}; give it in one place")
        seen.add(key)
    return axes


def _sharing(args: argparse.Namespace, runs: int) -> tuple[int, int, str]:
    """``(runs at a time, cores per run, engine)``: Ray tasks with ``--ray``, else processes of this machine."""
    from marljoint.run.sweep import cores_per_run, parallel_runs

    if args.ray or args.ray_address is not None or args.num_workers is not None:
        # Ray schedules the tasks on its own CPUs; each run collects in its task's process on one core.
        return min(runs, args.jobs or runs), 1, "ray"
    parallel = parallel_runs(runs, args.jobs)
    return parallel, cores_per_run(parallel), "process"


def _job(
    args: argparse.Namespace,
    spec: Any,
    options: dict[str, Any],
    point: dict[str, Any],
    run_dir: Path,
    seed: int,
    cores: int,
    engine: str,
) -> Any:
    """The job of one seed at one point of the grid (:func:`marljoint.run.sweep.point_job`), from the options."""
    from marljoint.run.sweep import point_job

    auto = (args.policy_lag, args.balance) if args.env_workers == "auto" else None
    trust = bool(getattr(args, "trust_snapshot", False))
    trust_run = bool(getattr(args, "trust_run", False))
    return point_job(
        spec, options, point, run_dir, seed, cores, engine, args.resume, args.force, trust, auto, trust_run=trust_run
    )


def _report(outcome: Any, quiet: bool) -> None:
    from marljoint.run.sweep import LOG_FILE

    run_dir = outcome.job.run_dir
    if outcome.interrupted:
        sys.stderr.write(f"marljoint: {run_dir} {outcome.error}\n")
    elif not outcome.ok:
        sys.stderr.write(f"marljoint: {run_dir} failed: {outcome.error} (log: {run_dir / LOG_FILE})\n")
        sys.stderr.flush()
    elif not quiet:
        print(f"{run_dir}  final mean episode return {outcome.final_return:.4g}  ({outcome.seconds:.1f} s)", flush=True)


def _seeds_summary(out: Path, outcomes: list[Any], quiet: bool) -> None:
    from marljoint.run.stats import confidence_interval

    finals = [o.final_return for o in outcomes if o.ok]
    if quiet or not finals:
        return
    mean, half = confidence_interval(finals)
    print(f"{out}  {len(finals)} seeds: final mean episode return {mean:.4g} ± {half:.3g} (95% CI)")


def _sweep_summary(out: Path, outcomes: list[Any], quiet: bool) -> None:
    from marljoint.run.plotting import PlottingUnavailable
    from marljoint.run.sweep import SWEEP_CSV, SWEEP_PLOT, format_table, plot_sweep, summarize, write_sweep_csv

    rows = summarize(outcomes)
    files = [write_sweep_csv(out / SWEEP_CSV, rows)]
    try:
        files.append(plot_sweep(out / SWEEP_PLOT, rows, title=str(out)))
    except PlottingUnavailable:
        pass  # the CSV holds the same numbers
    if not quiet:
        print(format_table(rows))
        print("  ".join(str(path) for path in files))


def _status(outcomes: list[Any], command: str) -> int:
    stopped = [o.interrupted for o in outcomes if o.interrupted]
    if stopped:
        sys.stderr.write(
            f"marljoint {command}: interrupted; each stopped run is checkpointed and continues with marljoint train "
            "--out RUN_DIR --resume (or the same command with --resume, once every run has started)\n"
        )
        return max(stopped)
    failed = sum(not o.ok for o in outcomes)
    if failed:
        others = "; the others finished" if failed < len(outcomes) else ""
        sys.stderr.write(f"marljoint: {failed} of {len(outcomes)} runs failed{others}\n")
        return FAILED
    return 0


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``marljoint tune``: the options of ``marljoint train`` plus ``--param`` and ``--trials``.

    Returns:
        The ``tune`` parser, whose handler the command table sets (it trains as ``marljoint train`` does).
    """
    parser = subparsers.add_parser(
        "tune",
        help='search settings with Optuna for the best final return (pip install "marljoint[tune]")',
        description="Search settings with Optuna: each trial trains the seeds (--seeds, default 0) with the "
        "values it draws into OUT/trial_<k>/seed_<S> and scores their mean final return, which the search "
        "maximises. Takes every option of marljoint train. Prints one line per trial and the best, and writes "
        "OUT/tune.csv.",
    )
    add_train_options(parser)
    parser.add_argument(
        "--param",
        metavar="KEY=RANGE",
        action="append",
        type=_param_range,
        required=True,
        help="a setting to search (repeatable): KEY=LOW:HIGH (uniform), KEY=log:LOW:HIGH, KEY=int:LOW:HIGH, "
        "e.g. --param learning_rate=log:1e-4:1e-2 --param ent_coef=0:0.05 (a table's key with dots: "
        "--param offpolicy.learning_rate=log:1e-4:1e-2)",
    )
    parser.add_argument("--trials", metavar="N", type=positive_int, default=10, help="settings to try (default 10)")
    return parser


def _param_range(text: str) -> Any:
    from marljoint.run.tune import ParamRange

    try:
        return ParamRange.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _tune(args: argparse.Namespace, spec: Any, options: dict[str, Any], seeds: list[int]) -> int:
    """``marljoint tune``: an Optuna study over ``--param`` maximising the seeds' mean final return."""
    from marljoint.run.errors import RunError
    from marljoint.run.tune import OptunaUnavailable, check_search_space, require_optuna

    if args.resume or args.sweep:
        raise RunError("marljoint tune draws its own settings and starts fresh; drop --resume and --sweep")
    _checked_axes([(p.key, []) for p in args.param], options, args, "--param")
    check_search_space(args.param, spec)
    try:
        optuna = require_optuna()
    except OptunaUnavailable as exc:
        raise RunError(str(exc)) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = _out(args, spec)
    parallel, cores, engine = _sharing(args, len(seeds))
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seeds[0]))
    failures: list[Any] = []

    def objective(trial: Any) -> float:
        point = {p.key: (f"{value:.4g}", value) for p in args.param for value in [p.suggest(trial)]}
        parent = out / f"trial_{trial.number}"
        jobs = [_job(args, spec, options, point, parent / f"seed_{seed}", seed, cores, engine) for seed in seeds]
        from marljoint.run.sweep import run_jobs, summarize

        outcomes = run_jobs(jobs, parallel, on_done=lambda o: _report(o, True), engine=engine)
        failures.extend(o for o in outcomes if not o.ok)
        row = summarize(outcomes)[0]
        if not args.quiet:
            shown = ", ".join(f"{k}={label}" for k, (label, _) in point.items())
            print(
                f"trial {trial.number}: {shown}  final mean episode return {row.mean:.4g} ± {row.ci95:.3g} (n={row.n})",
                flush=True,
            )
        return row.mean if row.n else math.nan

    study.optimize(objective, n_trials=args.trials)
    _tune_summary(out, study, args)
    return FAILED if failures else 0


def _tune_summary(out: Path, study: Any, args: argparse.Namespace) -> None:
    import csv

    keys = [p.key for p in args.param]
    from marljoint.run.rundir import open_run_file

    out.mkdir(parents=True, exist_ok=True)
    with open_run_file(out / "tune.csv", append=False) as file:  # never through a link planted there
        writer = csv.writer(file)
        writer.writerow(["trial", *keys, "final_return_mean"])
        for trial in study.trials:
            value = trial.value if trial.value is not None else math.nan
            writer.writerow([trial.number, *(trial.params.get(k) for k in keys), value])
    finished = [t for t in study.trials if t.value is not None and math.isfinite(t.value)]
    if args.quiet or not finished:
        return
    best = max(finished, key=lambda t: t.value)
    shown = " ".join(f"--set {k}={best.params[k]:.4g}" for k in keys)
    print(f"best: trial {best.number}, final mean episode return {best.value:.4g}: {shown}")
    print(out / "tune.csv")
