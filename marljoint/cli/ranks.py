"""``marljoint train`` on data-parallel ranks: ``--ranks K`` launches K processes running the same command line
without ``--ranks``, and a process that torchrun (or that launcher) started as one rank of several trains its share
of the run (:mod:`marljoint.run.ranks`).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from marljoint.run.ranks import (
    PEER_LOST,
    RankLost,
    RanksStopped,
    agree,
    check_ranks,
    launch_ranks,
    launched_ranks,
    resolve_ranks,
    restart_count,
    torchrun_world_size,
    without_ranks_option,
)

__all__ = ["launch", "quiet_rank_error", "ranks_wanted", "refuse_several_runs", "resumed_on_ranks", "train_rank"]


def ranks_wanted(args: argparse.Namespace, spec: Any) -> int:
    """The ranks ``--ranks`` asks for the run ``spec`` (1 without it).

    Raises:
        RunError: more ranks than env copies, or a run ranks cannot train (:func:`~marljoint.run.ranks.check_ranks`).
    """
    if args.ranks is None:
        return 1
    ranks = resolve_ranks(args.ranks, spec.trainer.num_envs)
    check_ranks(spec, ranks)
    return ranks


def resumed_on_ranks(spec: Any, options: dict[str, Any]) -> Any:
    """A resumed run's settings for ranks: a run collected by env workers or Ray collects in each rank's own
    process instead unless the command line names a collection (the collection changes no result, and a resume may
    change it); any other run as it is."""
    if "collection" in options or spec.trainer.collection.backend == "local":
        return spec
    from marljoint.collect.config import CollectionConfig

    return dataclasses.replace(spec, trainer=spec.trainer.replace(collection=CollectionConfig()))


def refuse_several_runs(args: argparse.Namespace) -> None:
    """Refuses ``--ranks`` with ``--seeds``, ``--sweep`` or ``marljoint tune``.

    Raises:
        RunError: naming both and the fix.
    """
    from marljoint.run.errors import RunError

    if args.ranks is not None:
        raise RunError(
            f"--ranks {args.ranks} shares one run among processes, and --seeds, --sweep and marljoint tune train "
            "several runs side by side (--jobs at a time): use one or the other"
        )


def launch(args: argparse.Namespace, ranks: int, out: Path) -> int:
    """Starts ``ranks`` processes running this command line without ``--ranks`` (with ``--out``, so every rank
    names the same run directory); returns the job's exit status."""
    from marljoint.distributed.ranks import DEFAULT_TIMEOUT_S

    argv = without_ranks_option(args.argv)
    if args.out is None:
        argv += ["--out", str(out)]
    timeout = args.rank_timeout if args.rank_timeout is not None else DEFAULT_TIMEOUT_S
    return launch_ranks(argv, ranks, Path(out), timeout)


def train_rank(args: argparse.Namespace, options: dict[str, Any], new_spec: Callable[..., Any]) -> int:
    """Trains this process's share of a run of ranks (torchrun's variables set, ``WORLD_SIZE`` > 1): joins the
    process group, takes the run's settings from rank 0 (the command line, or the run's ``config.toml`` for a
    resume or an elastic restart) and trains (:func:`~marljoint.run.train.train_run` with ``ranks``).

    Raises:
        RunError: ``--ranks`` or several runs under torchrun, a restart without ``--out``, or anything
            :func:`~marljoint.run.train.train_run` raises.
    """
    from marljoint.distributed.ranks import DEFAULT_TIMEOUT_S, RankGroup
    from marljoint.run.errors import RunError
    from marljoint.run.train import train_run

    world = torchrun_world_size()
    if args.ranks is not None:
        raise RunError(
            f"--ranks {args.ranks}: this process is already one of {world} ranks (WORLD_SIZE={world}, set by "
            "torchrun), whose --nproc-per-node and --nnodes choose the ranks: drop --ranks"
        )
    refuse_several_runs(args)
    restarted = restart_count() > 0
    if restarted and args.out is None:
        raise RunError(
            f"torchrun restarted the job (TORCHELASTIC_RESTART_COUNT={restart_count()}), but the command line names "
            "no --out, so the restart cannot find the run to continue: give --out DIR"
        )
    timeout = args.rank_timeout if args.rank_timeout is not None else DEFAULT_TIMEOUT_S
    device = _device(args, options, new_spec)
    if restarted:
        _join_restarted(device, timeout)
    group = RankGroup.from_environment(device=device, timeout_s=timeout)
    try:
        spec, out, resume, force = agree(group, lambda: _writer_spec(args, options, new_spec, restarted, world))
        result = train_run(
            spec,
            out,
            resume=resume,
            force=force,
            progress=not args.quiet,
            trust_snapshot=args.trust_snapshot,
            ranks=group,
        )
    finally:
        group.close()
    if group.is_writer and not args.quiet:
        print(f"{result.run_dir}  final mean episode return {result.final_return:.4g}  ({result.seconds:.1f} s)")
    return 0


def _writer_spec(
    args: argparse.Namespace, options: dict[str, Any], new_spec: Callable[..., Any], restarted: bool, world: int
) -> tuple[Any, Path, bool, bool]:
    """Rank 0's run: its settings, directory, and whether it resumes (``--resume``, or an elastic restart of a
    run with a checkpoint) or starts over (``--force``, or a restart before the first checkpoint)."""
    from marljoint.checkpoint import list_checkpoints
    from marljoint.run.lock import RunLock
    from marljoint.run.rundir import CHECKPOINT_DIR, default_run_dir
    from marljoint.run.spec import resume_spec

    resume, force = args.resume, args.force
    if restarted:
        resume = bool(list_checkpoints(Path(args.out) / CHECKPOINT_DIR))
        force = not resume
    if resume:
        if args.out is None:
            from marljoint.run.errors import RunError

            raise RunError("--resume needs --out DIR, the run directory to continue")
        with RunLock(args.out):  # refused at once while another process writes there
            spec = resumed_on_ranks(resume_spec(args.out, options, trust_run=args.trust_run), options)
        out = Path(args.out)
    else:
        # Under --ranks K the launcher has printed the settings' notes already.
        spec = new_spec(_quiet(args) if launched_ranks() is not None else args, options)
        out = Path(args.out) if args.out is not None else default_run_dir(spec)
    check_ranks(spec, world)
    return spec, out, resume, force and not resume


def _device(args: argparse.Namespace, options: dict[str, Any], new_spec: Callable[..., Any]) -> str:
    """The run's device, known to every rank before the process group is joined (it chooses gloo or NCCL): the
    command line's, else this rank's reading of the run's settings; ``"cpu"`` where this rank cannot read them (a
    resume on a machine without the run directory: give ``--device`` there)."""
    if "device" in options:
        return str(options["device"])
    try:
        if args.resume or restart_count() > 0:
            from marljoint.run.spec import resume_spec

            return str(resume_spec(args.out, options, trust_run=args.trust_run).trainer.device)
        return str(new_spec(_quiet(args), options).trainer.device)  # the run's notes are rank 0's to print, once
    except Exception:  # rank 0 reads the settings again and reports what is wrong with them
        return "cpu"


def _join_restarted(device: str, timeout_s: float) -> None:
    """Joins the process group of an elastic restart under a key prefix of its own: torchrun's agent keeps one
    store for every attempt, where gloo would read the addresses the previous attempt's ranks left
    (pytorch/pytorch#167288: "Connection refused" from a rank that no longer exists).
    :meth:`~marljoint.distributed.ranks.RankGroup.from_environment` then finds the group joined."""
    import datetime

    import torch
    import torch.distributed as dist

    from marljoint.distributed.ranks import prepare_to_join

    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or dist.is_initialized():
        return
    prepare_to_join()
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=timeout)
    prefixed = dist.PrefixStore(f"/marljoint/attempt_{restart_count()}", store)
    on_cuda = torch.device(device).type == "cuda"
    if on_cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("nccl" if on_cuda else "gloo", store=prefixed, rank=rank, world_size=world, timeout=timeout)


def _quiet(args: argparse.Namespace) -> argparse.Namespace:
    quiet = copy.copy(args)
    quiet.quiet = True
    return quiet


def quiet_rank_error(exc: BaseException) -> int | None:
    """The exit status of a rank that stops without a line of its own, or ``None`` where it reports ``exc``.

    Rank 0 reports what every rank meets (a stop, a refusal, a divergence); a rank that lost its peers leaves the
    report to the launcher of ``marljoint train --ranks K``, which names the rank that failed first.
    """
    from marljoint.ppo.divergence import DivergenceError
    from marljoint.run.errors import RunInterrupted

    try:
        if torchrun_world_size() <= 1:
            return None
    except ValueError:
        return None
    if isinstance(exc, RankLost):
        return PEER_LOST if launched_ranks() is not None else None
    if os.environ.get("RANK", "0").strip() == "0":
        return None
    if isinstance(exc, RunInterrupted):
        return exc.exit_status
    if isinstance(exc, (RanksStopped, DivergenceError)):
        return PEER_LOST
    return None
