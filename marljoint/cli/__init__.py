"""The ``marljoint`` command: ``train``, ``eval``, ``plot``, and ``psro`` and ``nfsp`` from ``best_response``.

Bad input ends the command with one ``marljoint: error: ...`` line on standard error and exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from marljoint.cli.args import USAGE_ERROR
from marljoint.cli.args import positive_int as _positive_int
from marljoint.cli.args import seed as _seed
from marljoint.cli.ranks import (
    launch,
    quiet_rank_error,
    ranks_wanted,
    refuse_several_runs,
    resumed_on_ranks,
    train_rank,
)
from marljoint.cli.settings import command_line_settings, config_overrides
from marljoint.cli.sweep import several_runs
from marljoint.cli.train_options import add_train_options
from marljoint.collect.config import CollectionConfig
from marljoint.run.collection import with_auto_workers
from marljoint.run.lock import RunLock
from marljoint.run.presets import get_preset
from marljoint.run.ranks import torchrun_world_size
from marljoint.run.rundir import default_run_dir

__all__ = ["build_parser", "main"]

"""Exit status for bad input (the same as argparse's)."""


class _Parser(argparse.ArgumentParser):
    """argparse with our one-line error format."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")


def _add_train(subparsers: Any) -> None:
    from marljoint.run.defaults import DEFAULT_ENV, DEFAULT_ENV_KWARGS, DEFAULT_TOTAL_STEPS, DEFAULT_TRAINER

    p = subparsers.add_parser(
        "train",
        help="train agents (PPO, value decomposition, off-policy actor-critics, self-play); writes a run directory",
        description=(
            "Train every agent of a PettingZoo env with the algorithm --algorithm names: PPO with a joint update "
            "(mappo, ippo; the default), value decomposition (vdn, qmix) or an off-policy actor-critic (masac, "
            "maddpg); --self-play mmd trains both seats of a two-player zero-sum game by magnetic mirror descent. "
            "The run directory gets config.toml "
            "(the full resolved config), metrics.csv (one row per iteration), checkpoints/, learning_curve.png and, "
            "when tensorboard is installed, tensorboard/. Settings come from the defaults, then --config, then the "
            "options given here."
        ),
        epilog=(
            f"With no options: {DEFAULT_ENV} {json.dumps(DEFAULT_ENV_KWARGS)} for {DEFAULT_TOTAL_STEPS:,} env steps "
            f"with {', '.join(f'{k}={v}' for k, v in DEFAULT_TRAINER.items())}.  "
            "Examples:  marljoint train --env mpe2.simple_spread_v3 --total-steps 100000 --out runs/spread;  "
            "marljoint train --out runs/spread --resume --total-steps 200000"
        ),
    )
    add_train_options(p)
    p.set_defaults(handler=_train)


def _train(args: argparse.Namespace) -> int:
    from marljoint.run.errors import RunError

    options = command_line_settings(args)
    collection = CollectionConfig.from_options(**_collection_options(args))
    if collection is not None:
        options["collection"] = collection.to_dict()
    if args.trust_snapshot and not args.resume:
        raise RunError("--trust-snapshot only applies to --resume (a run written elsewhere); add --resume or drop it")
    if args.trust_run and not args.resume and args.config is None:
        raise RunError(
            "--trust-run only applies to a config file read: --resume (the run's config.toml) or --config FILE; add "
            "one or drop it"
        )
    if torchrun_world_size() > 1:  # this process is one rank of several (torchrun, or --ranks K's launcher)
        return train_rank(args, options, _new_spec)
    if several_runs(args):
        refuse_several_runs(args)
    if args.ray_address is not None:
        from marljoint.distributed import connect_ray

        connect_ray(args.ray_address)
    if args.resume:
        return _train_resumed(args, options)
    spec = _new_spec(args, options)
    if several_runs(args):
        return _train_seeds(args, spec, options)
    return _train_one(spec, args.out if args.out is not None else default_run_dir(spec), args)


def _collection_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options that choose how to collect, as :meth:`~marljoint.collect.CollectionConfig.from_options` takes
    them."""
    names = ("env_workers", "ray", "ray_address", "num_workers", "policy_lag", "balance")
    return {name: getattr(args, name) for name in names}


def _train_resumed(args: argparse.Namespace, options: dict[str, Any]) -> int:
    """``--resume``: the run in ``--out`` continued (or every run under it, with ``--seeds``)."""
    from marljoint.run.errors import RunError
    from marljoint.run.spec import resume_spec

    if args.out is None:
        raise RunError("--resume needs --out DIR, the run directory to continue")
    if args.config is not None:
        raise RunError("--resume takes the run's own config.toml; drop --config")
    if several_runs(args):
        return _train_seeds(args, None, options)
    # Locked before the run's config is read, so a second writer is refused before it looks at anything.
    with RunLock(args.out):
        spec = _with_auto_workers(resume_spec(args.out, options, trust_run=args.trust_run), args)
        ranks = ranks_wanted(args, resumed_on_ranks(spec, options) if args.ranks is not None else spec)
        if ranks == 1:
            return _train_one(spec, args.out, args)
    return launch(args, ranks, args.out)  # the lock is rank 0's, in its own process


def _new_spec(args: argparse.Namespace, options: dict[str, Any]) -> Any:
    """A new run's settings: the defaults, then ``--preset``, ``--config`` and the command line's ``options``."""
    from marljoint.run.errors import RunError
    from marljoint.run.spec import RunSpec, read_config

    values = get_preset(args.preset).run_values() if args.preset is not None else {}
    overrides = None
    if args.config is not None:
        file_values = read_config(args.config, args.trust_run, typed_env="env" in options)
        values.update(file_values)
        overrides = config_overrides(args.config, file_values, options)
    values.update(options)
    rule, reasons = _self_play_defaults(values, _collection_by_rule(args))
    values = {**rule, **values}
    if "env" in values and "env_kwargs" not in values:
        values["env_kwargs"] = {}
    spec = RunSpec.from_dict(values, given=options)
    if reasons:
        spec = dataclasses.replace(spec, reasons=reasons)
    spec = _with_auto_workers(spec, args)
    if spec.wandb_project is not None:  # a --config file's or a preset's: refused before anything is built
        from marljoint.run.wandb_names import check_project

        check_project(spec.wandb_project, "wandb_project")
    if spec.redundancy is None and args.redundancy_coef is not None:
        raise RunError("--redundancy-coef needs --redundancy KIND (xcorr, cka or hsic)")
    _say_overrides(args, overrides)
    return spec


def _self_play_defaults(values: dict[str, Any], machine: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """The settings ``self_play`` starts from on the run's env (under the preset, --config and options), and the
    reasons of those a rule chose from the game and, with ``machine``, the cores
    (:func:`~marljoint.run.recipes.self_play_rule`)."""
    from marljoint.run.defaults import DEFAULT_ENV
    from marljoint.run.recipes import self_play_rule
    from marljoint.threads import usable_cores

    return self_play_rule(values, DEFAULT_ENV, usable_cores() if machine else None)


def _collection_by_rule(args: argparse.Namespace) -> bool:
    """Whether a rule may choose the collection from this machine's cores: one run in one process, with no
    collection option given (several runs side by side and data-parallel ranks share the cores otherwise)."""
    given = [getattr(args, name, None) for name in ("env_workers", "ray", "ray_address", "num_workers")]
    chosen = any(value is not None and value is not False for value in given)  # --env-workers 0 included
    ranks = getattr(args, "ranks", None) is not None or torchrun_world_size() > 1
    return not (chosen or ranks or several_runs(args))


def _train_one(spec: Any, out: Path, args: argparse.Namespace) -> int:
    from marljoint.run.train import train_run

    ranks = ranks_wanted(args, spec)
    if ranks > 1:
        return launch(args, ranks, out)
    result = train_run(
        spec, out, resume=args.resume, force=args.force, progress=not args.quiet, trust_snapshot=args.trust_snapshot
    )
    if not args.quiet:
        print(f"{result.run_dir}  final mean episode return {result.final_return:.4g}  ({result.seconds:.1f} s)")
    return 0


def _say_overrides(args: argparse.Namespace, line: str | None) -> None:
    """The one line naming the --config values the command line changes (on standard error, as the run's notes)."""
    if line is not None and not args.quiet:
        sys.stderr.write(line + "\n")


def _with_auto_workers(spec: Any, args: argparse.Namespace, cores: int | None = None) -> Any:
    """``--env-workers auto``: ``spec`` with its collection chosen for this machine, or for ``cores`` of its cores
    (:func:`~marljoint.run.collection.with_auto_workers`); ``spec`` itself otherwise."""
    if args.env_workers != "auto":
        return spec
    return with_auto_workers(spec, args.policy_lag, args.balance, cores)


def _train_seeds(args: argparse.Namespace, spec: Any, options: dict[str, Any]) -> int:
    """``--seeds``, ``--sweep`` and ``marljoint tune``: several runs side by side (:mod:`marljoint.cli.sweep`)."""
    from marljoint.cli.sweep import train_many

    return train_many(args, spec, options)


def _add_eval(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "eval",
        help="evaluate a trained run: per-agent return, mean ± 95%% CI",
        description="Play episodes with a run's newest checkpoint and report each agent's mean episode return with "
        "a 95% confidence interval (Student t).",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="a run directory written by marljoint train")
    p.add_argument("--episodes", metavar="N", type=_positive_int, default=10, help="episodes to play (default 10)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--deterministic",
        dest="deterministic",
        action="store_true",
        default=True,
        help="take each policy's most likely action (the default)",
    )
    mode.add_argument("--sample", dest="deterministic", action="store_false", help="sample actions from the policies")
    p.add_argument(
        "--seed", metavar="S", type=_seed, default=12345, help="seed of the evaluation episodes (default 12345)"
    )
    p.add_argument("--num-envs", metavar="E", type=_positive_int, help="env copies (default min(episodes, 8))")
    p.add_argument("--checkpoint", metavar="FILE", type=Path, help="evaluate this checkpoint instead of the newest")
    _recording_options(p)
    p.add_argument(
        "--max-steps",
        metavar="N",
        type=_positive_int,
        default=1_000_000,
        help="give up after this many joint steps (default 1,000,000)",
    )
    p.add_argument(
        "--against",
        metavar="REF",
        action="append",
        help="also play each seat of a two-player game against this reference, the trained policy in one seat and "
        "the reference in the other: 'random' (uniform over the legal actions), a run directory of the same env "
        "(its newest checkpoint) or a checkpoint file; repeatable. Zero-sum games get 'random' by default",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--trust-run",
        action="store_true",
        help="read runs (RUN_DIR, --against runs) whose config.toml is not signed with your key (from another user, "
        "or an older marljoint) even if their env is a function to call (package.module:function), which is "
        "refused otherwise; only for runs you trust",
    )
    p.set_defaults(handler=_eval)


def _recording_options(p: argparse.ArgumentParser) -> None:
    """``marljoint eval``'s recording of the first episode: ``--gif``, ``--video`` and their ``--fps``."""
    p.add_argument(
        "--gif",
        metavar="FILE",
        type=Path,
        help="also record the first episode to this GIF (the env must render rgb_array; needs Pillow or imageio)",
    )
    p.add_argument(
        "--video",
        metavar="FILE",
        type=Path,
        help='also record the first episode to this video, e.g. run.mp4 (needs pip install "marljoint[video]")',
    )
    p.add_argument(
        "--fps", metavar="F", type=_positive_int, default=10, help="frames per second of the GIF or video (default 10)"
    )


def _eval(args: argparse.Namespace) -> int:
    from marljoint.run.episodes import check_step_budget
    from marljoint.run.errors import RunInterrupted
    from marljoint.run.evaluate import EvalInterrupted, evaluate_run, evaluation_copies
    from marljoint.run.seats import check_references, evaluate_seats

    copies = evaluation_copies(args.episodes, args.num_envs, args.gif is not None or args.video is not None)
    check_step_budget(args.episodes, copies, args.max_steps)
    check_references(args.run_dir, args.against or (), trust_run=args.trust_run)
    try:
        result = evaluate_run(
            args.run_dir,
            episodes=args.episodes,
            deterministic=args.deterministic,
            seed=args.seed,
            num_envs=args.num_envs,
            gif=args.gif,
            gif_fps=args.fps,
            checkpoint=args.checkpoint,
            max_steps=args.max_steps,
            video=args.video,
            progress=_eval_progress(args.episodes, copies, args.max_steps),
            trust_run=args.trust_run,
        )
    except EvalInterrupted as exc:
        if exc.result is not None:
            _print_eval(args, exc.result, None)
        raise
    try:
        seats = evaluate_seats(
            args.run_dir, args.against or (), args.episodes, args.seed, args.checkpoint, trust_run=args.trust_run
        )
    except KeyboardInterrupt:
        _print_eval(args, result, None)
        raise RunInterrupted(
            "interrupted while playing the seats (--against); the result printed is of the run's own episodes"
        ) from None
    _print_eval(args, result, seats)
    return 0


def _print_eval(args: argparse.Namespace, result: Any, seats: Any) -> None:
    """The evaluation's result (and the seats', if any) on standard output, as a table or as JSON (``--json``)."""
    if args.json:
        summary = {name: {"mean": m, "ci95": h} for name, (m, h) in result.summary().items()}
        payload = {
            "episodes": len(result.returns),
            "episodes_requested": args.episodes,
            "partial": result.partial,
            "deterministic": result.deterministic,
            "checkpoint": str(result.checkpoint),
            "returns": summary,
            "gif": None if result.gif is None else str(result.gif),
            "video": None if result.video is None else str(result.video),
        }
        if seats is not None:
            payload["seats"] = seats.summary()
        print(json.dumps(payload, indent=2, allow_nan=True))
    else:
        print(result.format())
        if seats is not None:
            print(seats.format())


def _eval_progress(episodes: int, copies: int, max_steps: int) -> Any:
    """What the evaluation will play, once the run is loaded, when an env copy plays several episodes (so that
    the count sets how long it takes); then a progress line every 10,000 joint steps of long evaluations. On standard
    error."""

    def show(steps: int, done: int) -> None:
        if steps == 0 and episodes <= copies:
            return
        if steps == 0:
            line = (
                f"eval: {episodes:,} episodes on {copies} env copies, at most {max_steps:,} joint steps "
                f"({max_steps * copies:,} env steps; --max-steps caps them); Ctrl-C stops with the episodes so far"
            )
        else:
            line = f"eval: {steps:,} of at most {max_steps:,} steps, {done:,}/{episodes:,} episodes ended"
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    return show


def _add_plot(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plot",
        help="compare runs' learning curves in one PNG",
        description="Plot a metrics.csv column of one or more runs against env steps (or another column) in one PNG.",
    )
    p.add_argument("run_dirs", metavar="RUN_DIR", type=Path, nargs="+", help="run directories to compare")
    p.add_argument(
        "--out",
        metavar="FILE",
        default="runs.png",
        help="the PNG to write (default runs.png); DIR/ writes DIR/<metric>.png, a name without a suffix gets .png",
    )
    p.add_argument(
        "--metric",
        default="episode_return_mean",
        help="the column to plot (default episode_return_mean; see docs/metrics.md)",
    )
    p.add_argument(
        "--x",
        default="env_steps",
        choices=("env_steps", "agent_steps", "wall_time", "iteration"),
        help="x axis (default env_steps)",
    )
    p.add_argument(
        "--window", metavar="K", type=_positive_int, default=10, help="moving-average window in iterations (default 10)"
    )
    p.add_argument("--labels", metavar="NAME", nargs="+", help="legend labels, one per run (default: directory names)")
    p.add_argument("--title", help="figure title")
    p.set_defaults(handler=_plot)


def _plot(args: argparse.Namespace) -> int:
    from marljoint.run.plotting import plot_runs

    out = plot_runs(
        args.run_dirs, args.out, metric=args.metric, x=args.x, window=args.window, labels=args.labels, title=args.title
    )
    print(out)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``marljoint`` argument parser with every subcommand."""
    from marljoint import __version__

    parser = _Parser(
        prog="marljoint",
        description="A multi-agent reinforcement learning toolkit for PettingZoo environments: MAPPO and IPPO (PPO "
        "with a joint update), VDN and QMIX (value decomposition), MASAC and MADDPG (off-policy actor-critics), and "
        "the game solvers PSRO, NFSP and MMD self-play.",
        epilog="Train: marljoint train --algorithm NAME.  Solve a game: marljoint psro, marljoint nfsp, marljoint "
        "train --self-play mmd.  Each command lists its options with marljoint COMMAND --help; docs/index.md names "
        "the reference page of each family.",
    )
    parser.add_argument("--version", action="version", version=f"marljoint {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on an error, print the full traceback (with an env worker's own) instead of the one-line message; "
        "give it before the command: marljoint --debug train ...",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_train(subparsers)
    _add_eval(subparsers)
    _add_plot(subparsers)
    from marljoint.cli.best_response import register  # PSRO and NFSP: `marljoint psro`, `marljoint nfsp`

    register(subparsers)
    from marljoint.cli.export import register as register_export  # `marljoint export`

    register_export(subparsers)
    from marljoint.cli.sweep import register as register_tune  # `marljoint tune`: train's options and Optuna

    register_tune(subparsers).set_defaults(handler=_train)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status (raises ``SystemExit`` for bad input).

    Example:
        >>> main(["plot", "--help"])  # doctest: +SKIP
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    from marljoint.threads import limit_threads

    # Every command computes on one thread unless it says otherwise: eval, plot, psro and nfsp collect in this
    # process, and a training run's learner takes the cores its env workers leave free (torch_threads = "auto").
    limit_threads(1)
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        sys.stderr.write(f"marljoint {args.command}: interrupted\n")
        return 130
    except _user_errors() as exc:
        from marljoint.run.errors import RunInterrupted

        quiet = quiet_rank_error(exc)
        if quiet is not None:  # another rank (or the launcher) reports it
            return quiet
        if isinstance(exc, RunInterrupted):
            sys.stderr.write(f"marljoint {args.command}: {_one_line(exc)}\n")
            return exc.exit_status
        if args.debug:
            _print_traceback(exc)
        parser.exit(USAGE_ERROR, f"marljoint {args.command}: error: {_one_line(exc)}\n")
    return 0


def _print_traceback(exc: BaseException) -> None:
    """``--debug``: the exception's traceback with its causes, and the traceback an env worker process sent."""
    import traceback

    traceback.print_exception(exc, file=sys.stderr)
    cause: BaseException | None = exc
    while cause is not None:
        remote = getattr(cause, "traceback", None)
        if isinstance(remote, str) and remote:
            sys.stderr.write(f"\nIn the env worker process:\n{remote}")
        cause = cause.__cause__


def _user_errors() -> tuple[type[BaseException], ...]:
    from marljoint.checkpoint import CheckpointError
    from marljoint.collect import WorkerLostError
    from marljoint.distributed import RayUnavailable
    from marljoint.env import EnvCopyError, EnvWorkerDied
    from marljoint.ppo.divergence import DivergenceError
    from marljoint.run.errors import RunError
    from marljoint.run.plotting import PlottingUnavailable
    from marljoint.run.registry import EnvSpecError

    errors = (
        RunError,
        CheckpointError,
        EnvSpecError,
        PlottingUnavailable,
        RayUnavailable,
        EnvCopyError,
        DivergenceError,
        WorkerLostError,
        EnvWorkerDied,  # before the first iteration, where no run loop turns it into a WorkerFailure
    )
    return (*errors, MemoryError, OSError, ValueError)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
