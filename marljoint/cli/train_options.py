"""The options of ``marljoint train``, which ``marljoint tune`` takes as well, by concern: the env, the budget, the
trainer, the settings' files, the loss terms, the measurements, the collection and the run directory.

:func:`add_train_options` adds them all, in the order ``--help`` lists them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from marljoint.cli.args import (
    env_workers_count,
    integer,
    json_object,
    non_negative_float,
    out_path,
    positive_float,
    positive_int,
    seed,
    setting,
    sweep_axis,
    wandb_project,
    workers_or_auto,
    wrapper,
)
from marljoint.run.algorithms import train_choices, train_help
from marljoint.run.presets import PRESETS

__all__ = ["add_train_options"]


def add_train_options(p: argparse.ArgumentParser) -> None:
    """Adds every option of ``marljoint train`` to ``p`` (the ``train`` or the ``tune`` command's parser)."""
    for add in (
        _env_options,
        _budget_options,
        _trainer_options,
        _settings_files,
        _loss_options,
        _measurement_options,
        _collection_options,
        _rank_options,
        _run_dir_options,
    ):
        add(p)


def _env_options(p: argparse.ArgumentParser) -> None:
    """The env to train on: its name, its factory's arguments and SuperSuit wrappers."""
    from marljoint.run.defaults import DEFAULT_ENV, DEFAULT_ENV_KWARGS

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
        type=json_object,
        help=f"keyword arguments of the env factory, as a JSON object (default: none when --env is given, "
        f"else '{json.dumps(DEFAULT_ENV_KWARGS)}')",
    )
    p.add_argument(
        "--wrap",
        metavar="WRAPPER",
        action="append",
        type=wrapper,
        help="a SuperSuit wrapper applied to every env copy before training, repeatable and in order: "
        "--wrap resize_v1:x_size=84,y_size=84 --wrap color_reduction_v0:mode=full --wrap frame_stack_v1:stack_size=4",
    )


def _budget_options(p: argparse.ArgumentParser) -> None:
    """How much to train and how many runs: env steps, env copies, seeds, several runs side by side."""
    from marljoint.run.defaults import DEFAULT_TOTAL_STEPS
    from marljoint.run.defaults import product_default as default

    p.add_argument(
        "--total-steps",
        metavar="N",
        type=positive_int,
        help=f"env steps to train for, all env copies together, rounded up to whole iterations "
        f"(default {DEFAULT_TOTAL_STEPS:,}); with --resume, the new total",
    )
    p.add_argument(
        "--num-envs",
        metavar="E",
        type=integer,
        help=f"env copies stepped together (default {default('num_envs')})",
    )
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument(
        "--seed", metavar="S", type=seed, help=f"seed of every generator of the run (default {default('seed')})"
    )
    seeds.add_argument(
        "--seeds",
        metavar="S",
        type=seed,
        nargs="+",
        help="train one run per seed into OUT/seed_<S> (each with the same settings), several at a time (--jobs), "
        "each logging to its train.log; marljoint plot OUT draws their mean with a 95%% CI band",
    )
    _several_runs_options(p)


def _trainer_options(p: argparse.ArgumentParser) -> None:
    """The trainer: learning rate, rollout length, device, algorithm, recurrent cores and any setting."""
    from marljoint.run.defaults import product_default as default

    p.add_argument(
        "--learning-rate",
        metavar="LR",
        type=positive_float,
        help="Adam learning rate (default: derived from the action spaces, 1e-3 discrete, 3e-4 Box)",
    )
    p.add_argument(
        "--rollout-steps",
        metavar="T",
        type=positive_int,
        help=f"steps per rollout of every env copy (default {default('rollout_steps')})",
    )
    p.add_argument(
        "--device",
        metavar="DEV",
        help=f"torch device of the networks: {default('device')} (default), cuda, cuda:1, mps",
    )
    p.add_argument(
        "--algorithm",
        choices=train_choices(),
        help=f"{train_help()} (every algorithm: docs/algorithms.md)",
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
        type=setting,
        default=[],
        help="any setting a --config file holds, as a TOML value (repeatable): --set learning_rate=3e-4 "
        "--set hidden_sizes=[128,128] --set centralized_critic=true; a key of a table with dots: --set "
        "offpolicy.batch_size=64 --set offpolicy.sac.actor_lr=1e-3 --set mmd.alpha=0.2; applied after --config and "
        "--preset. A setting given here or by its option that the algorithm does not read is refused, whatever its "
        "value (a --config file's only where it is not the default)",
    )


def _settings_files(p: argparse.ArgumentParser) -> None:
    """Where the run is written and where its settings start: --out, --preset, --config."""
    p.add_argument(
        "--out",
        metavar="DIR",
        type=out_path,
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


def _loss_options(p: argparse.ArgumentParser) -> None:
    """Terms added to the joint loss: the redundancy penalty and self-play's regulariser."""
    from marljoint.redundancy.functional import REDUNDANCY_KINDS
    from marljoint.run.defaults import product_default as default

    p.add_argument(
        "--redundancy",
        metavar="KIND",
        choices=REDUNDANCY_KINDS,
        help=f"add the cross-agent redundancy penalty of this kind ({', '.join(REDUNDANCY_KINDS)}) to the joint loss",
    )
    p.add_argument(
        "--redundancy-coef",
        metavar="LAMBDA",
        type=non_negative_float,
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


def _measurement_options(p: argparse.ArgumentParser) -> None:
    """Checkpoints, evaluations, exploitability and logging during the run."""
    from marljoint.run.defaults import product_default as default

    p.add_argument(
        "--checkpoint-every",
        metavar="K",
        type=integer,
        help=f"iterations between checkpoints (default {default('checkpoint_every')}; the last is always saved)",
    )
    p.add_argument(
        "--keep-checkpoints",
        metavar="K",
        type=integer,
        help=f"newest checkpoints to keep (default {default('keep_checkpoints')})",
    )
    p.add_argument(
        "--eval-every",
        metavar="K",
        type=positive_int,
        help="evaluate the greedy policies every K iterations on the same fresh episodes (eval/... columns) and keep "
        "the best as checkpoints/best.pt",
    )
    p.add_argument(
        "--eval-episodes",
        metavar="M",
        type=positive_int,
        help=f"episodes of each evaluation (default {default('eval_episodes')})",
    )
    p.add_argument(
        "--exploitability-every",
        metavar="K",
        type=positive_int,
        help="measure the current policies' exploitability every K iterations (exploit/... columns): exactly for "
        "Kuhn poker, matrix games and small OpenSpiel games (also writing openspiel_policy.json where the game has "
        "an OpenSpiel form), else approximately with PPO best responses in two-player envs; the least exploitable "
        "checkpoint is kept as checkpoints/best.pt; with --self-play mmd the average policy is scored too, and the "
        "least exploitable policy so far is written to openspiel_best_policy.json",
    )
    p.add_argument(
        "--wandb",
        metavar="PROJECT",
        type=wandb_project,
        help='also log to this Weights & Biases project (pip install "marljoint[wandb]"; WANDB_MODE=offline '
        "without network)",
    )


def _collection_options(p: argparse.ArgumentParser) -> None:
    """Where the rollouts are collected: Ray workers, env worker processes, policy lag, balancing."""
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
        type=positive_int,
        help="Ray rollout workers, each stepping a slice of the env copies (default 2 with --ray); implies --ray",
    )
    p.add_argument(
        "--env-workers",
        metavar="K",
        type=env_workers_count,
        help="step the env copies in K worker processes that also run the policies for their copies "
        "(collection backend 'subprocess'); same results as in-process, faster on several cores. 'auto': one "
        "worker per core this process may use but the learner's (at most one per env copy), with --policy-lag 1 "
        "unless the policies are recurrent or --policy-lag 0 is given. 0: collect in this process (the default, "
        "but for --self-play on a game, which collects in one worker per core at policy lag 0)",
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


def _rank_options(p: argparse.ArgumentParser) -> None:
    """The data-parallel ranks that share the run."""
    from marljoint.distributed.ranks import DEFAULT_TIMEOUT_S

    p.add_argument(
        "--ranks",
        metavar="K",
        type=workers_or_auto,
        help="train with K data-parallel processes on this machine (torch.distributed, as torchrun --nproc-per-node "
        "K would start them): each steps its share of the env copies and computes the gradient of its share of "
        "every minibatch; the result equals one process's to float rounding, and rank 0 writes the run. 'auto': "
        "one per core this process may use (at most one per env copy). For several machines run torchrun "
        "-m marljoint train ... on each (docs/distributed.md); not with --env-workers or --ray",
    )
    p.add_argument(
        "--rank-timeout",
        metavar="S",
        type=positive_float,
        help="with ranks (--ranks or torchrun): seconds a rank waits for the others before the job ends, the bound "
        f"on how long a rank that hangs holds up the job (default {DEFAULT_TIMEOUT_S:g})",
    )


def _run_dir_options(p: argparse.ArgumentParser) -> None:
    """What happens to a run directory already there, and what of it is trusted."""
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


def _several_runs_options(p: argparse.ArgumentParser) -> None:
    """Several runs from one command: ``--jobs`` and ``--sweep`` (``--seeds`` is among the budget's options)."""
    p.add_argument(
        "--jobs",
        metavar="N",
        type=positive_int,
        help="with --seeds or --sweep: runs trained at a time, each in its own process with an equal share of the "
        "cores (default: the cores this process may use, at most the number of runs); 1: one after another",
    )
    p.add_argument(
        "--sweep",
        metavar="KEY=V1,V2,...",
        action="append",
        type=sweep_axis,
        default=[],
        help="train every combination of these values (repeatable; KEY any --set setting, values as --set reads "
        "them) for each seed into OUT/<key=value,...>/seed_<S>; prints one table of the final returns and writes "
        "OUT/sweep.csv and OUT/sweep.png",
    )
