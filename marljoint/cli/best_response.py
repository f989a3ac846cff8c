"""The ``marljoint psro`` and ``marljoint nfsp`` subcommands.

:func:`register` adds both to an ``argparse`` subparsers object; each subcommand stores its handler in
``args.handler``, to be called as ``args.handler(args)``: it returns the exit status 0, and on bad input writes one line
``marljoint <command>: error: ...`` to standard error and raises :class:`CommandError` (a ``SystemExit`` with
status 2, whose text is that line). The options become a :class:`~marljoint.run.spec.RunSpec` (``algorithm =
"psro"`` / ``"nfsp"``, its own settings in the ``[psro]`` / ``[nfsp]`` table) that the run driver
(:func:`~marljoint.run.train.train_run`) trains, as ``marljoint train`` does: ``OUT/config.toml``,
``OUT/metrics.csv`` (one row per iteration; the driver's columns, then those of ``PSRO_METRICS`` /
``NFSP_METRICS``), ``OUT/checkpoints/ckpt_N.pt`` after every iteration, ``--resume`` and ``--force``.

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
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from marljoint.best_response.games import KnownGame
from marljoint.best_response.meta_solvers import META_SOLVERS
from marljoint.cli.args import USAGE_ERROR, non_negative_int, out_path, positive_float, positive_int, seed, setting
from marljoint.env.openspiel import OPENSPIEL_PREFIX
from marljoint.policies.recurrent import RECURRENT_KINDS
from marljoint.ppo.config import JointTrainerConfig
from marljoint.run import _toml
from marljoint.run.errors import RunError
from marljoint.run.presets import Preset
from marljoint.run.recipes import BUNDLED_ENVS, auto_meta_solver, env_factory, recipe_for
from marljoint.run.registry import known_game
from marljoint.run.rundir import CONFIG_FILE
from marljoint.run.spec import RunSpec, resume_spec

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
        description="Policy-Space Response Oracles on any PettingZoo env; writes OUT/config.toml, OUT/metrics.csv "
        "and OUT/checkpoints/.",
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
        description="Neural Fictitious Self-Play on any PettingZoo env; writes OUT/config.toml, OUT/metrics.csv and "
        "OUT/checkpoints/.",
    )
    _add_common(nfsp)
    nfsp.add_argument("--iterations", type=positive_int, help="stop after this many iterations")
    nfsp.add_argument("--anticipatory", type=float, help="η, the probability of playing the best response")
    nfsp.set_defaults(handler=run_nfsp)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env",
        help="any env marljoint train takes: a bundled name (tuned settings for "
        f"{', '.join(BUNDLED_ENVS)}), a PettingZoo module path such as mpe2.simple_push_v3, or package.module:factory; "
        "required unless --resume continues the run in --out",
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
    parser.add_argument(
        "--eval-every",
        type=positive_int,
        metavar="K",
        help="every K iterations (and after the last) play the run's policies (psro: the meta-mixtures, nfsp: the "
        "average policies) greedily on fresh episodes: the eval/... columns, and checkpoints/best.pt",
    )
    parser.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        type=setting,
        default=[],
        help="any setting of the run's config.toml, as a TOML value (repeatable), applied after the options: "
        "--set rollout_steps=64, --set psro={meta_solver=\"prd\"} (a table's keys are merged into it)",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--resume",
        action="store_true",
        help="continue the run saved in OUT with its own settings (--iterations, --seconds and --device may change)",
    )
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


def _env_kwargs(command: str, args: argparse.Namespace) -> dict[str, Any]:
    """``--env-kwargs`` as a dict; raises the one-line error on bad input."""
    try:
        env_kwargs = _toml.loads_json(args.env_kwargs, "--env-kwargs")
    except _toml.NestingTooDeep as exc:
        raise _fail(command, str(exc)) from None
    except json.JSONDecodeError as exc:
        raise _fail(command, f"--env-kwargs is not valid JSON ({exc.msg}): {args.env_kwargs!r}") from None
    if not isinstance(env_kwargs, dict):
        example = '{"game": "rps"}'
        raise _fail(command, f"--env-kwargs must be a JSON object such as '{example}', got {args.env_kwargs!r}")
    return env_kwargs


def _new_run(command: str, args: argparse.Namespace) -> tuple[dict[str, Any], KnownGame | None, Preset, int]:
    """What a new run's settings are resolved from: its env's keyword arguments, known game, recipe and number
    of players; raises the one-line error for an env that cannot be built or played."""
    if args.env is None:
        raise _fail(command, "the following arguments are required: --env (unless --resume continues a saved run)")
    env_kwargs = _env_kwargs(command, args)
    try:
        factory = env_factory(args.env, env_kwargs)
    except ValueError as exc:
        raise _fail(command, str(exc)) from None
    game = _known_game(command, args, env_kwargs)
    players = game.num_players if game is not None else len(factory().possible_agents)
    return env_kwargs, game, recipe_for(args.env), players


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


def _run_trainer(command: str, base: JointTrainerConfig, args: argparse.Namespace) -> JointTrainerConfig:
    """The run's trainer settings (the best responses' PPO settings): the recipe's, with the options given."""
    return _trainer_config(command, base, args).replace(seed=args.seed, device=args.device)


def _psro_spec(args: argparse.Namespace) -> RunSpec:
    """The :class:`~marljoint.run.spec.RunSpec` of a new ``marljoint psro`` run."""
    env_kwargs, game, recipe, players = _new_run("psro", args)
    if args.oracle == "exact" and game is None:
        raise _fail("psro", f"--oracle exact needs a known game tree, which {args.env} lacks; use --oracle ppo")
    if args.evaluation == "exact" and game is None:
        raise _fail("psro", f"--evaluation exact needs a known game tree, which {args.env} lacks")
    meta_solver = args.meta_solver
    if meta_solver == "auto":
        meta_solver = auto_meta_solver(recipe, players, args.oracle)
    table = {
        "iterations": args.iterations,
        "oracle": args.oracle,
        "meta_solver": meta_solver,
        "evaluation": args.evaluation,
        "episodes_per_entry": args.episodes_per_entry or recipe.episodes_per_entry,
        "eval_num_envs": recipe.eval_num_envs,
        "br_steps": args.br_steps or recipe.br_steps,
        "symmetric": args.symmetric,
        **_warm_start_settings(args.warm_start, recipe),
        "task_split": args.task_split,
        **_gain_settings(args, game, args.br_steps or recipe.br_steps),
    }
    trainer = _run_trainer("psro", recipe.trainer, args)
    spec = _spec("psro", env=args.env, env_kwargs=env_kwargs, psro=table, trainer=trainer, **_budget(args))
    return _with_settings("psro", spec, args)


def _nfsp_spec(args: argparse.Namespace) -> RunSpec:
    """The :class:`~marljoint.run.spec.RunSpec` of a new ``marljoint nfsp`` run: ``--iterations`` in its
    ``total_steps``."""
    env_kwargs, game, recipe, _ = _new_run("nfsp", args)
    if args.seconds is None and args.iterations is None:
        raise _fail("nfsp", "pass --seconds S (wall-time budget) or --iterations K")
    table = {**recipe.nfsp, **_gain_settings(args, game, 50_000)}
    if args.anticipatory is not None:
        table["anticipatory"] = args.anticipatory
    trainer = _run_trainer("nfsp", recipe.nfsp_trainer_config(), args)
    spec = _spec("nfsp", env=args.env, env_kwargs=env_kwargs, nfsp=table, trainer=trainer, **_budget(args))
    spec = _with_settings("nfsp", spec, args)
    return dataclasses.replace(spec, total_steps=_nfsp_total_steps(spec, args.iterations))


def _with_settings(command: str, spec: RunSpec, args: argparse.Namespace) -> RunSpec:
    """``spec`` with the ``--set`` settings applied (a ``psro`` / ``nfsp`` table's keys merged into the run's); the
    recipe's minibatch is cut to the rows of an update where ``--num-envs`` or ``rollout_steps`` make an update
    smaller (a ``minibatch_size`` given is kept, and checked)."""
    values = dict(args.set)
    if isinstance(values.get(command), Mapping):
        values[command] = {**spec.tables()[command], **values[command]}
    try:
        spec = RunSpec.from_dict(values, base=spec)
    except RunError as exc:
        raise _fail(command, f"--set: {exc}") from None
    trainer = spec.trainer
    too_large = trainer.num_minibatches is None and trainer.minibatch_size > trainer.batch_rows
    if too_large and "minibatch_size" not in values:
        return dataclasses.replace(spec, trainer=trainer.replace(minibatch_size=trainer.batch_rows))
    return spec


def _nfsp_total_steps(spec: RunSpec, iterations: int | None) -> int:
    from marljoint.run.game_runs import UNBOUNDED_ITERATIONS, nfsp_steps_per_iteration

    return nfsp_steps_per_iteration(spec) * (UNBOUNDED_ITERATIONS if iterations is None else iterations)


def _budget(args: argparse.Namespace) -> dict[str, Any]:
    """The settings every new best-response run takes from the command line besides its own."""
    return {"max_seconds": args.seconds, "checkpoint_every": 1, "eval_every": args.eval_every}


def _spec(command: str, **values: Any) -> RunSpec:
    try:
        return RunSpec(algorithm=command, **values)
    except RunError as exc:
        raise _fail(command, str(exc)) from None


def _resumed_spec(command: str, args: argparse.Namespace) -> RunSpec:
    """The saved run's spec, with the budget (``--iterations``, ``--seconds``) and ``--device`` given; ``--env``
    and ``--env-kwargs``, when given, must be the run's."""
    out = Path(args.out)
    _refuse_older_run(command, out)
    overrides: dict[str, Any] = {**dict(args.set), "max_seconds": args.seconds, "device": args.device}
    if args.env is not None:
        overrides.update(env=args.env, env_kwargs=_env_kwargs(command, args))
    if not (out / CONFIG_FILE).is_file():
        raise _fail(command, f"--resume: {str(out)!r} holds no {command} run to resume (no {CONFIG_FILE})")
    try:
        spec = resume_spec(out, overrides)
        if spec.algorithm != command:
            raise RunError(
                f"--resume: {out} holds a {spec.algorithm or 'train'} run, not a {command} run; continue it with "
                f"marljoint {spec.algorithm if spec.algorithm in ('psro', 'nfsp') else 'train'} --out {out} --resume"
            )
        if args.iterations is None:
            return spec
        if command == "psro":
            return dataclasses.replace(spec, psro=dataclasses.replace(spec.psro, iterations=args.iterations))
        return dataclasses.replace(spec, total_steps=_nfsp_total_steps(spec, args.iterations))
    except RunError as exc:
        raise _fail(command, str(exc)) from None


def _refuse_older_run(command: str, out: Path) -> None:
    """A run directory of an earlier version (``psro.pt`` / ``nfsp.pt``, no ``config.toml``) is refused in one
    line."""
    if (out / f"{command}.pt").is_file() and not (out / CONFIG_FILE).is_file():
        raise _fail(
            command,
            f"{str(out)!r} holds a {command} run written by an earlier marljoint ({command}.pt), which this version "
            f"does not continue; start a new run in another --out (PSRO.from_state / NFSP.from_state with "
            f"marljoint.run.migrations.read_{command}_checkpoint load its state from Python)",
        )


def run_psro(args: argparse.Namespace) -> int:
    """The ``psro`` subcommand: parses the options into a run and trains it with the run driver."""
    return _run("psro", args, _psro_spec)


def run_nfsp(args: argparse.Namespace) -> int:
    """The ``nfsp`` subcommand: parses the options into a run and trains it with the run driver."""
    return _run("nfsp", args, _nfsp_spec)


def _run(command: str, args: argparse.Namespace, new_spec: Callable[[argparse.Namespace], RunSpec]) -> int:
    """Trains the run of ``command`` with :func:`~marljoint.run.train.train_run` (its lock, ``config.toml``,
    ``metrics.csv``, ``checkpoints/``, resume, stop requests); a progress line per iteration unless ``--quiet``.

    Raises:
        CommandError: bad input, or a run the driver refuses (one line).
        RunInterrupted: after SIGINT or SIGTERM (exit status 130 or 143), saying what is kept.
    """
    from marljoint.run.errors import RunInterrupted
    from marljoint.run.train import train_run

    if args.resume:
        spec = _resumed_spec(command, args)
    else:
        _refuse_older_run(command, Path(args.out))
        spec = new_spec(args)
    if command == "psro" and args.ray_address is not None:
        from marljoint.distributed import connect_ray

        connect_ray(args.ray_address)
    rows: list[dict[str, Any]] = []
    total = spec.psro.iterations if command == "psro" else args.iterations
    try:
        train_run(spec, args.out, args.resume, args.force, False, on_iteration=_progress(command, args, total, rows))
    except RunInterrupted:
        raise
    except RunError as exc:
        raise _fail(command, str(exc)) from None
    if rows and not args.quiet:
        print(f"{_progress_line(command, rows[-1], None)}  -> {args.out}")
    return 0


def _progress(
    command: str, args: argparse.Namespace, total: int | None, rows: list[dict[str, Any]]
) -> Callable[[dict[str, Any]], None]:
    """The per-iteration callback: keeps the row and writes a progress line (unless ``--quiet``)."""

    def show(row: dict[str, Any]) -> None:
        rows.append(row)
        if not args.quiet:
            sys.stderr.write(_progress_line(command, row, total) + "\n")
            sys.stderr.flush()

    return show
