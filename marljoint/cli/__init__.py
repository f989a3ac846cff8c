"""The ``marljoint`` command: ``train``, ``eval``, ``plot``, and ``psro`` and ``nfsp`` from ``best_response``.

Bad input ends the command with one ``marljoint: error: ...`` line on standard error and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from marljoint.cli.args import USAGE_ERROR
from marljoint.cli.args import integer as _int
from marljoint.cli.args import json_object as _json_object
from marljoint.cli.args import non_negative_float as _non_negative_float
from marljoint.cli.args import out_path as _out_path
from marljoint.cli.args import positive_float as _positive_float
from marljoint.cli.args import positive_int as _positive_int
from marljoint.cli.args import seed as _seed
from marljoint.cli.args import setting as _setting
from marljoint.cli.args import wandb_project as _wandb_project
from marljoint.cli.args import workers_or_auto as _workers_or_auto
from marljoint.cli.args import wrapper as _wrapper
from marljoint.cli.settings import command_line_settings, config_overrides
from marljoint.cli.sweep import add_options as add_several_runs_options
from marljoint.cli.sweep import several_runs
from marljoint.collect.config import CollectionConfig
from marljoint.run.collection import with_auto_workers
from marljoint.run.lock import RunLock
from marljoint.run.presets import PRESETS, get_preset
from marljoint.run.rundir import default_run_dir

__all__ = ["build_parser", "main"]

"""Exit status for bad input (the same as argparse's)."""


class _Parser(argparse.ArgumentParser):
    """argparse with our one-line error format."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")


def _add_train(subparsers: Any) -> None:
    from marljoint.redundancy.functional import REDUNDANCY_KINDS
    from marljoint.run.defaults import DEFAULT_ENV, DEFAULT_ENV_KWARGS, DEFAULT_TOTAL_STEPS, DEFAULT_TRAINER
    from marljoint.run.defaults import product_default as default

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
    p.add_argument(
        "--env",
        metavar="NAME",
        help=(
            f"a bundled env ({DEFAULT_ENV}, kuhn_poker_v0, ...), a PettingZoo module path (mpe2.simple_spread_v3, "
            f"pettingzoo.sisl.multiwalker_v9) or a factory 'package.module:function' (default: {DEFAULT_ENV})"
        ),
    )
    p.add_argument(
        "--env-kwargs",
        metavar="JSON",
        type=_json_object,
        help=f"keyword arguments of the env factory, as a JSON object (default: none when --env is given, "
        f"else '{json.dumps(DEFAULT_ENV_KWARGS)}')",
    )
    p.add_argument(
        "--wrap",
        metavar="WRAPPER",
        action="append",
        type=_wrapper,
        help="a SuperSuit wrapper applied to every env copy before training, repeatable and in order: "
        "--wrap resize_v1:x_size=84,y_size=84 --wrap color_reduction_v0:mode=full --wrap frame_stack_v1:stack_size=4",
    )
    p.add_argument(
        "--total-steps",
        metavar="N",
        type=_positive_int,
        help=f"env steps to train for, all env copies together, rounded up to whole iterations "
        f"(default {DEFAULT_TOTAL_STEPS:,}); with --resume, the new total",
    )
    p.add_argument(
        "--num-envs",
        metavar="E",
        type=_int,
        help=f"env copies stepped together (default {default('num_envs')})",
    )
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument(
        "--seed", metavar="S", type=_seed, help=f"seed of every generator of the run (default {default('seed')})"
    )
    seeds.add_argument(
        "--seeds",
        metavar="S",
        type=_seed,
        nargs="+",
        help="train one run per seed into OUT/seed_<S> (each with the same settings), several at a time (--jobs), "
        "each logging to its train.log; marljoint plot OUT draws their mean with a 95%% CI band",
    )
    add_several_runs_options(p)
    p.add_argument(
        "--learning-rate",
        metavar="LR",
        type=_positive_float,
        help="Adam learning rate (default: derived from the action spaces, 1e-3 discrete, 3e-4 Box)",
    )
    p.add_argument(
        "--rollout-steps",
        metavar="T",
        type=_positive_int,
        help=f"steps per rollout of every env copy (default {default('rollout_steps')})",
    )
    p.add_argument(
        "--device",
        metavar="DEV",
        help=f"torch device of the networks: {default('device')} (default), cuda, cuda:1, mps",
    )
    p.add_argument(
        "--algorithm",
        choices=["mappo", "ippo", "vdn", "qmix", "masac", "maddpg"],
        help="mappo/ippo: PPO with/without the centralised critic; vdn/qmix: value decomposition trained off-policy "
        "(Discrete actions; --set offpolicy={...} tunes it; see docs/value_decomposition.md); masac/maddpg: "
        "off-policy actor-critics with centralised critics (one Discrete or Box space; --set "
        "offpolicy={sac={...}}; see docs/masac.md). Default: PPO as centralized_critic says",
    )
    p.add_argument(
        "--recurrent",
        choices=["gru", "lstm"],
        help="give every network a recurrent core (hidden states per agent and env copy, truncated BPTT); "
        "--set rnn_hidden_size=... and --set bptt_length=... tune it",
    )
    p.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        type=_setting,
        default=[],
        help="any setting a --config file holds, as a TOML value (repeatable): --set learning_rate=3e-4 "
        "--set hidden_sizes=[128,128] --set centralized_critic=true; applied after --config and --preset",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        type=_out_path,
        help="run directory (default runs/<env>-<date>-<time>); refused if it holds another run, unless --resume or "
        "--force, and while another marljoint process writes there",
    )
    p.add_argument(
        "--preset",
        metavar="NAME",
        choices=sorted(PRESETS),
        help=f"start from a tuned preset ({', '.join(sorted(PRESETS))}): its env, budget and trainer settings; "
        "--config and the options here override it",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        type=Path,
        help="TOML file of settings: any JointTrainerConfig field under its own name (learning_rate, n_epochs, "
        "...) and env, env_kwargs, total_steps, redundancy, redundancy_coef, self_play, mmd, checkpoint_every, "
        "keep_checkpoints; "
        "a run's config.toml works as is",
    )
    p.add_argument(
        "--redundancy",
        metavar="KIND",
        choices=REDUNDANCY_KINDS,
        help=f"add the cross-agent redundancy penalty of this kind ({', '.join(REDUNDANCY_KINDS)}) to the joint loss",
    )
    p.add_argument(
        "--redundancy-coef",
        metavar="LAMBDA",
        type=_non_negative_float,
        help=f"weight λ of the redundancy penalty (default {default('redundancy_coef')}; needs --redundancy)",
    )
    p.add_argument(
        "--self-play",
        metavar="KIND",
        choices=("ppo", "mmd"),
        help="self-play of a two-player zero-sum game: mmd adds each seat's α·KL(π ‖ magnet) to its PPO loss "
        "(magnetic mirror descent; its settings are the mmd table of config.toml) and, on an OpenSpiel game or "
        "kuhn_poker_v0, starts from the self-play trainer settings; ppo (or leaving it out): plain PPO",
    )
    p.add_argument(
        "--checkpoint-every",
        metavar="K",
        type=_int,
        help=f"iterations between checkpoints (default {default('checkpoint_every')}; the last is always saved)",
    )
    p.add_argument(
        "--keep-checkpoints",
        metavar="K",
        type=_int,
        help=f"newest checkpoints to keep (default {default('keep_checkpoints')})",
    )
    p.add_argument(
        "--eval-every",
        metavar="K",
        type=_positive_int,
        help="evaluate the greedy policies every K iterations on the same fresh episodes (eval/... columns) and keep "
        "the best as checkpoints/best.pt",
    )
    p.add_argument(
        "--eval-episodes",
        metavar="M",
        type=_positive_int,
        help=f"episodes of each evaluation (default {default('eval_episodes')})",
    )
    p.add_argument(
        "--exploitability-every",
        metavar="K",
        type=_positive_int,
        help="measure the current policies' exploitability every K iterations (exploit/... columns): exactly for "
        "Kuhn poker, matrix games and small OpenSpiel games (also writing openspiel_policy.json where the game has "
        "an OpenSpiel form), else approximately with PPO best responses in two-player envs; the least exploitable "
        "checkpoint is kept as checkpoints/best.pt; with --self-play mmd the average policy is scored too, and the "
        "least exploitable policy so far is written to openspiel_best_policy.json",
    )
    p.add_argument(
        "--wandb",
        metavar="PROJECT",
        type=_wandb_project,
        help='also log to this Weights & Biases project (pip install "marljoint[wandb]"; WANDB_MODE=offline '
        "without network)",
    )
    p.add_argument(
        "--ray",
        action="store_true",
        help='collect rollouts on Ray worker actors (pip install "marljoint[ray]"); same results as in-process for '
        "the same seed and --num-envs. Starts a local Ray instance unless --ray-address is given",
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="connect to this Ray cluster (e.g. 'auto' or 'ray://head:10001'); implies --ray",
    )
    p.add_argument(
        "--num-workers",
        metavar="K",
        type=_positive_int,
        help="Ray rollout workers, each stepping a slice of the env copies (default 2 with --ray); implies --ray",
    )
    p.add_argument(
        "--env-workers",
        metavar="K",
        type=_workers_or_auto,
        help="step the env copies in K worker processes that also run the policies for their copies "
        "(collection backend 'subprocess'); same results as in-process, faster on several cores. 'auto': one "
        "worker per core this process may use but the learner's (at most one per env copy), with --policy-lag 1 "
        "unless the policies are recurrent or --policy-lag 0 is given",
    )
    p.add_argument(
        "--policy-lag",
        type=int,
        choices=(0, 1),
        help="1: the workers (--env-workers or --ray) collect the next rollout with the weights before the "
        "update while the learner updates (overlapped, policy lag 1); 0 (default): collect, then update",
    )
    p.add_argument(
        "--balance",
        action="store_true",
        help="hand env copies from slow workers (--env-workers or --ray) to fast ones by their measured speed; the "
        "results are the same bits",
    )
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out from its newest checkpoint (its config.toml is used; only --total-steps, "
        "--checkpoint-every and --keep-checkpoints may change)",
    )
    group.add_argument("--force", action="store_true", help="overwrite the run already in --out")
    p.add_argument(
        "--trust-snapshot",
        action="store_true",
        help="with --resume: restore the env snapshot of a run written by another user or machine, which is refused "
        "otherwise (unpickling it runs whatever code it names: only for runs you trust)",
    )
    p.add_argument(
        "--trust-run",
        action="store_true",
        help="with --resume or --config: read a config.toml or --config file that is not signed with your key (from "
        "another user, written by hand, or by an older marljoint) even if its env is a function to call "
        "(package.module:function), which is refused otherwise; only for files you trust. The resumed run signs "
        "its config.toml with your key",
    )
    p.add_argument("--quiet", action="store_true", help="no progress display or messages")
    p.set_defaults(handler=_train)


def _train(args: argparse.Namespace) -> int:
    from marljoint.run.errors import RunError

    options = command_line_settings(args)
    collection = CollectionConfig.from_options(**_collection_options(args))
    if collection is not None:
        options["collection"] = collection.to_dict()
    if args.ray_address is not None:
        from marljoint.distributed import connect_ray

        connect_ray(args.ray_address)
    if args.trust_snapshot and not args.resume:
        raise RunError("--trust-snapshot only applies to --resume (a run written elsewhere); add --resume or drop it")
    if args.trust_run and not args.resume and args.config is None:
        raise RunError(
            "--trust-run only applies to a config file read: --resume (the run's config.toml) or --config FILE; add "
            "one or drop it"
        )
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
        return _train_one(spec, args.out, args)


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
    values = {**_self_play_defaults(values), **values}
    if "env" in values and "env_kwargs" not in values:
        values["env_kwargs"] = {}
    spec = _with_auto_workers(RunSpec.from_dict(values), args)
    if spec.wandb_project is not None:  # a --config file's or a preset's: refused before anything is built
        from marljoint.run.wandb_names import check_project

        check_project(spec.wandb_project, "wandb_project")
    if spec.redundancy is None and args.redundancy_coef is not None:
        raise RunError("--redundancy-coef needs --redundancy KIND (xcorr, cka or hsic)")
    _say_overrides(args, overrides)
    return spec


def _self_play_defaults(values: dict[str, Any]) -> dict[str, Any]:
    """The settings ``self_play`` starts from on the run's env (under the preset, --config and options)."""
    from marljoint.run.defaults import DEFAULT_ENV
    from marljoint.run.recipes import self_play_settings

    return self_play_settings(values.get("env", DEFAULT_ENV), values.get("self_play"))


def _train_one(spec: Any, out: Path, args: argparse.Namespace) -> int:
    from marljoint.run.train import train_run

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

    register_tune(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status (raises ``SystemExit`` for bad input).

    Example:
        >>> main(["plot", "--help"])  # doctest: +SKIP
    """
    parser = build_parser()
    args = parser.parse_args(argv)
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
