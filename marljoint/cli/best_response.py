"""The ``marljoint psro`` and ``marljoint nfsp`` subcommands.

:func:`register` adds both to an ``argparse`` subparsers object; each subcommand stores its handler in
``args.handler``, to be called as ``args.handler(args)``: it returns the exit status 0, and on bad input writes one line
``marljoint <command>: error: ...`` to standard error and raises :class:`CommandError` (a ``SystemExit`` with
status 2, whose text is that line). Both write ``DIR/metrics.csv`` (one row per
iteration, rewritten after every iteration; columns as in ``PSRO_METRICS`` / ``NFSP_METRICS``) and a checkpoint
(``DIR/psro.pt`` / ``DIR/nfsp.pt``) after every iteration; ``psro --resume`` continues a saved run.

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="marljoint")
    >>> register(parser.add_subparsers(dest="command"))
    >>> args = parser.parse_args(["psro", "--env", "kuhn_poker_v0", "--oracle", "exact", "--out", "/tmp/x"])
    >>> args.oracle, args.iterations
    ('exact', 10)
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from marljoint.best_response.games import KnownGame
from marljoint.best_response.meta_solvers import META_SOLVERS
from marljoint.cli.args import USAGE_ERROR, non_negative_int, out_path, positive_float, positive_int, seed
from marljoint.env.openspiel import OPENSPIEL_PREFIX
from marljoint.policies.recurrent import RECURRENT_KINDS
from marljoint.ppo.config import JointTrainerConfig
from marljoint.run import _toml
from marljoint.run.exploitability import OPENSPIEL_POLICY
from marljoint.run.lock import RunLock
from marljoint.run.loop import StopRequests
from marljoint.run.migrations import read_nfsp_checkpoint, read_psro_checkpoint
from marljoint.run.presets import Preset
from marljoint.run.recipes import BUNDLED_ENVS, auto_meta_solver, env_factory, recipe_for
from marljoint.run.registry import known_game
from marljoint.run.runlog import write_metrics_csv

__all__ = ["register", "CommandError"]

_FIRST_COLUMNS = ("iteration", "wall_time", "exploitability")


class _DeprecatedTaskSplit(argparse.Action):
    """``psro --num-workers K``: still sets ``--task-split K``, with one line saying to use that name."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None):
        sys.stderr.write(
            "marljoint psro: --num-workers is deprecated here (in marljoint train it means Ray rollout workers); "
            f"use --task-split {values}\n"
        )
        setattr(namespace, self.dest, values)


def register(subparsers: Any) -> None:
    """Adds the ``psro`` and ``nfsp`` subcommands to an ``argparse`` subparsers object.

    Each sets ``handler`` (call ``args.handler(args)``; returns 0).
    """
    _add_psro(subparsers)
    _add_nfsp(subparsers)


def _add_psro(subparsers: Any) -> None:
    psro = subparsers.add_parser(
        "psro",
        help="PSRO: populations of best responses and an empirical meta-game",
        description="Policy-Space Response Oracles on any PettingZoo env; writes OUT/metrics.csv and OUT/psro.pt.",
    )
    _add_common(psro)
    psro.add_argument("--oracle", choices=("exact", "ppo"), default="ppo", help="best-response oracle (default ppo)")
    psro.add_argument(
        "--meta-solver",
        default="auto",
        help=f"one of {sorted(META_SOLVERS)}; default: prd for OpenSpiel games with PPO best responses, otherwise "
        "nash for two players and regret_matching for more",
    )
    psro.add_argument("--iterations", type=positive_int, default=10, help="PSRO iterations (default 10)")
    psro.add_argument(
        "--evaluation", choices=("auto", "exact", "simulation"), default="auto", help="meta-game estimation"
    )
    psro.add_argument("--br-steps", type=positive_int, help="env steps of PPO training per best response iteration")
    psro.add_argument("--episodes-per-entry", type=positive_int, help="episodes per simulated meta-game entry")
    psro.add_argument("--symmetric", action="store_true", help="two interchangeable seats share one population")
    psro.add_argument(
        "--warm-start",
        nargs="?",
        const="1",
        type=_warm_start_arg,
        metavar="SCALE|off",
        help="PPO best responses start from their seat's newest member, its policy output layer multiplied by SCALE "
        "in [0, 1] (given alone: 1, the whole member; 0: its features and critic with a uniform policy); off: fresh "
        "networks. Default: the env's recipe (0.3 for OpenSpiel games, off otherwise)",
    )
    psro.add_argument(
        "--task-split",
        dest="task_split",
        metavar="K",
        type=non_negative_int,
        default=0,
        help="split each iteration into Ray tasks: one per best response and K meta-game chunks (default 0: one "
        'process; needs pip install "marljoint[ray]")',
    )
    psro.add_argument(  # `marljoint train --num-workers` means Ray rollout workers: one meaning per flag name
        "--num-workers",
        dest="task_split",
        metavar="K",
        type=non_negative_int,
        action=_DeprecatedTaskSplit,
        help="deprecated spelling of --task-split",
    )
    psro.add_argument("--ray-address", help="join this Ray cluster for the tasks (default: start a local one)")
    psro.set_defaults(handler=run_psro)


def _add_nfsp(subparsers: Any) -> None:
    nfsp = subparsers.add_parser(
        "nfsp",
        help="NFSP: PPO best responses and supervised average policies",
        description="Neural Fictitious Self-Play on any PettingZoo env; writes OUT/metrics.csv and OUT/nfsp.pt.",
    )
    _add_common(nfsp)
    nfsp.add_argument("--iterations", type=positive_int, help="stop after this many iterations")
    nfsp.add_argument("--anticipatory", type=float, help="η, the probability of playing the best response")
    nfsp.set_defaults(handler=run_nfsp)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env",
        required=True,
        help="any env marljoint train takes: a bundled name (tuned settings for "
        f"{', '.join(BUNDLED_ENVS)}), a PettingZoo module path such as mpe2.simple_push_v3, or package.module:factory",
    )
    parser.add_argument("--env-kwargs", default="{}", help='env keyword arguments as JSON, e.g. \'{"game": "rps"}\'')
    parser.add_argument("--out", required=True, type=out_path, help="output directory")
    parser.add_argument("--seed", type=seed, default=0, help="seed of everything (default 0)")
    parser.add_argument("--seconds", type=positive_float, help="wall-time budget, checked between iterations")
    parser.add_argument("--num-envs", type=positive_int, help="env copies of the PPO trainer")
    parser.add_argument("--learning-rate", type=positive_float, help="PPO learning rate")
    parser.add_argument(
        "--device",
        metavar="DEV",
        default="cpu",
        help="torch device of every network of the run: cpu (default), cuda, cuda:1, mps; --resume continues on "
        "the device given here, whichever the saved run used",
    )
    parser.add_argument(
        "--recurrent",
        choices=RECURRENT_KINDS,
        help="recurrent best responses (a GRU or LSTM core; the frozen members carry their state through episodes)",
    )
    parser.add_argument(
        "--gain-every",
        type=non_negative_int,
        metavar="K",
        help="every K iterations estimate the exploitability with fresh PPO best responses (best_response_gain); "
        "default: 1 for envs without a known game tree, 0 (never) for those with one",
    )
    parser.add_argument(
        "--gain-steps", type=positive_int, help="env steps of training per estimate (default: psro's --br-steps, 50000)"
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--resume", action="store_true", help="continue the run saved in OUT")
    group.add_argument("--force", action="store_true", help="overwrite the run already in OUT")
    parser.add_argument("--quiet", action="store_true", help="no progress lines or summary")


class CommandError(SystemExit):
    """Bad command-line input: exit status 2 (argparse's usage error), the message as the exception's text."""

    def __init__(self, message: str) -> None:
        super().__init__(USAGE_ERROR)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _fail(command: str, message: str) -> CommandError:
    """Writes ``marljoint COMMAND: error: MESSAGE`` (one line) to stderr and returns the exception to raise."""
    line = f"marljoint {command}: error: {' '.join(message.split())}"
    sys.stderr.write(line + "\n")
    return CommandError(line)


def _resolve(command: str, args: argparse.Namespace) -> tuple[Callable[[], Any], KnownGame | None, Preset, Path]:
    """Parses the options every command shares; raises the one-line error on bad input."""
    try:
        env_kwargs = _toml.loads_json(args.env_kwargs, "--env-kwargs")
    except _toml.NestingTooDeep as exc:
        raise _fail(command, str(exc)) from None
    except json.JSONDecodeError as exc:
        raise _fail(command, f"--env-kwargs is not valid JSON ({exc.msg}): {args.env_kwargs!r}") from None
    if not isinstance(env_kwargs, dict):
        example = '{"game": "rps"}'
        raise _fail(command, f"--env-kwargs must be a JSON object such as '{example}', got {args.env_kwargs!r}")
    if args.seconds is not None and not args.seconds > 0:
        raise _fail(command, f"--seconds must be positive, got {args.seconds}")
    try:
        factory = env_factory(args.env, env_kwargs)
    except ValueError as exc:
        raise _fail(command, str(exc)) from None
    game = _known_game(command, args, env_kwargs)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise _fail(command, f"--out {str(out)!r} exists and is not a directory")
    checkpoint = out / f"{command}.pt"
    if args.resume and not checkpoint.exists():
        raise _fail(command, f"--resume: no {checkpoint.name} in {str(out)!r}; run without --resume first")
    if not args.resume and not args.force and (checkpoint.exists() or (out / "metrics.csv").exists()):
        raise _fail(
            command,
            f"{str(out)!r} already holds a {command} run; pass --resume to continue it, --force to overwrite it, or "
            "choose another --out",
        )
    _check_out(command, out, args)
    return factory, game, recipe_for(args.env), out


def _check_out(command: str, out: Path, args: argparse.Namespace) -> None:
    """Refuses a symbolic link where the run writes (:func:`~marljoint.run.rundir.refuse_links`) and a ``--force``
    on a directory whose metrics.csv belongs to no run of ``command`` (no ``COMMAND.pt`` beside it)."""
    from marljoint.run.errors import RunError
    from marljoint.run.rundir import refuse_links

    if out.is_dir():
        try:
            refuse_links(out)
        except RunError as exc:
            raise _fail(command, str(exc)) from None
    if args.force and not args.resume and (out / "metrics.csv").exists() and not (out / f"{command}.pt").exists():
        raise _fail(
            command,
            f"--force: {str(out)!r} holds metrics.csv but no {command}.pt, so no {command} run; --force replaces "
            "only a run of the same command: move metrics.csv away or choose another --out",
        )


def _known_game(command: str, args: argparse.Namespace, env_kwargs: dict[str, Any]) -> KnownGame | None:
    """The env's exact game, if any. An OpenSpiel game too large to tabulate runs without one (its exploitability
    estimated, with a note saying so) unless something exact was asked for."""
    try:
        return known_game(args.env, env_kwargs)
    except ValueError as exc:
        wants_exact = getattr(args, "oracle", None) == "exact" or getattr(args, "evaluation", None) == "exact"
        if not args.env.startswith(OPENSPIEL_PREFIX) or wants_exact:
            raise _fail(command, str(exc)) from None
        if not args.quiet:
            sys.stderr.write(f"marljoint {command}: note: {exc}; exploitability is estimated (best_response_gain)\n")
        return None


def _recorder(
    command: str, run: Any, out: Path, args: argparse.Namespace, total: int | None, stops: StopRequests
) -> Any:
    """The per-iteration callback of a best-response run: metrics.csv, the checkpoint and a progress line, written
    together (a stop request waits for them: ``stops``).

    The directory is created (and with ``--force`` the old run's files replaced) at the first call, once the run
    is built: a run that fails to start changes nothing on disk.
    """
    started = {"done": False}

    def record(_: Mapping[str, Any]) -> None:
        with stops.deferred():
            _record()

    def _record() -> None:
        if not started["done"]:
            started["done"] = True
            if args.force and not args.resume:
                for name in ("metrics.csv", f"{command}.pt"):
                    (out / name).unlink(missing_ok=True)
            out.mkdir(parents=True, exist_ok=True)
        write_metrics_csv(run.history, out / "metrics.csv", _FIRST_COLUMNS)
        run.save(out)
        _export_policy(command, run, out)
        if not args.quiet and run.history:
            sys.stderr.write(_progress_line(command, run.history[-1], total) + "\n")
            sys.stderr.flush()

    return record


def _export_policy(command: str, run: Any, out: Path) -> None:
    """``OUT/openspiel_policy.json``: the evaluated policy (PSRO's meta-mixtures, NFSP's average policies) in
    OpenSpiel's tabular form, each time an OpenSpiel game's exploitability was computed."""
    from marljoint.best_response.openspiel_game import OpenSpielGame

    game = getattr(run, "game", None)
    if not isinstance(game, OpenSpielGame) or not run.history:
        return
    if command == "psro":
        policies = [run.meta_policy(seat) for seat in range(run.num_players)]
    else:
        policies = list(run.average_policies)
    game.export(game.tables(policies), out / OPENSPIEL_POLICY)


def _progress_line(command: str, row: Mapping[str, Any], total: int | None) -> str:
    """``psro iteration 3/10  exploitability 0.0123  12.3 s`` (the measures a row has)."""
    of = f"/{total}" if total else ""
    parts = [f"{command} iteration {int(row.get('iteration', 0))}{of}"]
    for key in ("exploitability", "best_response_gain", "meta_nash_conv"):
        value = row.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            parts.append(f"{key} {value:.4g}")
            break
    parts.append(f"{float(row.get('wall_time', 0.0)):.1f} s")
    return "  ".join(parts)


def _trainer_config(command: str, base: JointTrainerConfig, args: argparse.Namespace) -> JointTrainerConfig:
    changes: dict[str, Any] = {}
    if args.num_envs is not None:
        changes["num_envs"] = args.num_envs
    if args.learning_rate is not None:
        changes["learning_rate"] = args.learning_rate
    if getattr(args, "recurrent", None) is not None:
        changes["recurrent"] = args.recurrent
    try:
        return base.replace(**changes)
    except ValueError as exc:
        raise _fail(command, str(exc)) from None


def _gain_settings(args: argparse.Namespace, game: KnownGame | None, default_steps: int) -> dict[str, Any]:
    """``gain_every`` / ``gain_steps``: estimated every iteration where no exact exploitability exists."""
    every = args.gain_every if args.gain_every is not None else (0 if game is not None else 1)
    return {"gain_every": every, "gain_steps": args.gain_steps or default_steps}


def _warm_start_arg(value: str) -> float | bool:
    """``--warm-start``: ``off`` (False) or the policy scale, a number in [0, 1]."""
    if value.strip().lower() == "off":
        return False
    try:
        scale = float(value)
    except ValueError:
        scale = math.nan
    if not 0.0 <= scale <= 1.0:
        raise argparse.ArgumentTypeError(
            f"expected off or a policy scale in [0, 1] (1: copy the whole member, 0: restart its policy at uniform), "
            f"got {value!r}"
        )
    return scale


def _warm_start_settings(flag: float | bool | None, recipe: Preset) -> dict[str, Any]:
    """``warm_start`` / ``warm_start_policy_scale`` from ``--warm-start`` (None: not given, False: off, else the
    scale), the recipe's where the flag leaves them open."""
    if flag is None:
        return {"warm_start": recipe.warm_start, "warm_start_policy_scale": recipe.warm_start_policy_scale}
    if flag is False:
        return {"warm_start": False}
    return {"warm_start": True, "warm_start_policy_scale": flag}


def _writing(command: str, args: argparse.Namespace) -> RunLock:
    """The lock on ``--out``, held while the run lives: taken before anything there is read or written, so a second
    writer is refused (``RunLocked``: one line naming the process that writes there, exit 2)."""
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise _fail(command, f"--out {str(out)!r} exists and is not a directory")
    return RunLock(out)


def run_psro(args: argparse.Namespace) -> int:
    """The ``psro`` subcommand (see :func:`_writing` and :func:`_stoppable`)."""
    with _writing("psro", args):
        return _stoppable("psro", args, _run_psro)


def run_nfsp(args: argparse.Namespace) -> int:
    """The ``nfsp`` subcommand (see :func:`_writing` and :func:`_stoppable`)."""
    with _writing("nfsp", args):
        return _stoppable("nfsp", args, _run_nfsp)


def _stoppable(command: str, args: argparse.Namespace, body: Callable[[argparse.Namespace, StopRequests], int]) -> int:
    """Runs ``body`` so that SIGINT or SIGTERM stops it at once, whatever it is doing (an iteration's best
    responses and measurements can take minutes where a scheduler grants seconds): the checkpoint of the last
    completed iteration, written after every iteration (:func:`_recorder`, whose saving a signal never cuts short),
    is what a ``--resume`` continues from.

    Raises:
        RunInterrupted: exit status 130 after SIGINT, 143 after SIGTERM, saying what is kept.
    """
    from marljoint.run.errors import RunInterrupted
    from marljoint.run.loop import StopRequested

    with StopRequests() as stops:
        try:
            with stops.interruptible():
                return body(args, stops)
        except StopRequested:
            out = Path(args.out)
            if (out / f"{command}.pt").is_file():
                again = [f"marljoint {command} --env {shlex.quote(args.env)}"]
                if args.env_kwargs not in (None, "", "{}"):
                    again.append(f"--env-kwargs {shlex.quote(args.env_kwargs)}")
                again.append(f"--out {shlex.quote(str(out))} --resume")
                kept = f"; the checkpoint of its last completed iteration is kept. Continue with: {' '.join(again)}"
            else:
                kept = " before its first iteration ended; nothing was written"
            status = 143 if stops.signal_name == "SIGTERM" else 130
            raise RunInterrupted(f"stopped by {stops.signal_name}{kept}", status) from None


def _run_psro(args: argparse.Namespace, stops: StopRequests) -> int:
    from marljoint.best_response.psro import PSRO, PsroConfig
    from marljoint.checkpoint import CheckpointError

    factory, game, recipe, out = _resolve("psro", args)
    if args.oracle == "exact" and game is None:
        raise _fail("psro", f"--oracle exact needs a known game tree, which {args.env} lacks; use --oracle ppo")
    if args.evaluation == "exact" and game is None:
        raise _fail("psro", f"--evaluation exact needs a known game tree, which {args.env} lacks")
    meta_solver = args.meta_solver
    if meta_solver == "auto":
        players = game.num_players if game is not None else len(factory().possible_agents)
        meta_solver = auto_meta_solver(recipe, players, args.oracle)
    try:
        config = PsroConfig(
            iterations=args.iterations,
            oracle=args.oracle,
            meta_solver=meta_solver,
            evaluation=args.evaluation,
            episodes_per_entry=args.episodes_per_entry or recipe.episodes_per_entry,
            eval_num_envs=recipe.eval_num_envs,
            br_steps=args.br_steps or recipe.br_steps,
            trainer=_trainer_config("psro", recipe.trainer, args),
            symmetric=args.symmetric,
            **_warm_start_settings(args.warm_start, recipe),
            seed=args.seed,
            device=args.device,
            task_split=args.task_split,
            **_gain_settings(args, game, args.br_steps or recipe.br_steps),
        )
        if args.ray_address is not None:
            from marljoint.distributed import connect_ray

            connect_ray(args.ray_address)
        if args.resume:
            psro = PSRO.from_state(read_psro_checkpoint(out), factory, game, config)
        else:
            psro = PSRO(factory, config, game)
    except (ValueError, CheckpointError) as exc:
        raise _fail("psro", str(exc)) from None
    record = _recorder("psro", psro, out, args, config.iterations, stops)
    record({})
    psro.run(max_seconds=args.seconds, callback=record)
    _summary("psro", psro.history, out, args)
    return 0


def _summary(command: str, history: Sequence[Mapping[str, Any]], out: Path, args: argparse.Namespace) -> None:
    """The final line of a best-response run."""
    if args.quiet or not history:
        return
    print(f"{_progress_line(command, history[-1], None)}  -> {out}")


def _run_nfsp(args: argparse.Namespace, stops: StopRequests) -> int:
    from marljoint.best_response.nfsp import NFSP, NfspConfig
    from marljoint.checkpoint import CheckpointError

    factory, game, recipe, out = _resolve("nfsp", args)
    if args.seconds is None and args.iterations is None:
        raise _fail("nfsp", "pass --seconds S (wall-time budget) or --iterations K")
    if args.iterations is not None and args.iterations < 1:
        raise _fail("nfsp", f"--iterations must be a positive integer, got {args.iterations}")
    settings = dict(recipe.nfsp)
    if args.anticipatory is not None:
        settings["anticipatory"] = args.anticipatory
    try:
        trainer = _trainer_config("nfsp", recipe.nfsp_trainer_config(), args)
        config = NfspConfig(
            trainer=trainer, seed=args.seed, device=args.device, **settings, **_gain_settings(args, game, 50_000)
        )
        if args.resume:
            nfsp = NFSP.from_state(read_nfsp_checkpoint(out), factory, game, device=args.device)
        else:
            nfsp = NFSP(factory, config, game)
    except (ValueError, CheckpointError) as exc:
        raise _fail("nfsp", str(exc)) from None
    record = _recorder("nfsp", nfsp, out, args, args.iterations, stops)
    nfsp.run(iterations=args.iterations, max_seconds=args.seconds, callback=record)
    _summary("nfsp", nfsp.history, out, args)
    return 0
