"""The data-parallel ranks of a training run as a product: how many (``--ranks``), which runs may use them, how
``marljoint train --ranks K`` starts them (torch's elastic launcher, the engine behind ``torchrun``), what rank 0
decides for every rank, and the one line a job ends with when a rank dies or hangs.

``marljoint train --ranks K`` and ``torchrun --nproc-per-node K -m marljoint train ...`` are one code path: the
launcher starts K processes running the same ``marljoint train`` command line without ``--ranks``; each sees
torchrun's variables (``WORLD_SIZE`` > 1), joins the process group
(:meth:`~marljoint.distributed.ranks.RankGroup.from_environment`) and trains its share of the run. Rank 0 alone reads
the run's settings and checkpoint (and broadcasts them: other machines need no shared filesystem), takes the run
lock and writes; the other ranks write nothing and print only errors.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import signal
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from marljoint.checkpoint import list_checkpoints
from marljoint.run.algorithms import run_entry
from marljoint.run.errors import RunError

__all__ = [
    "LAUNCHED_RANKS",
    "PEER_LOST",
    "RankFailure",
    "RankLost",
    "RanksStopped",
    "SHUTDOWN_SECONDS",
    "agree",
    "check_ranks",
    "collective_failure",
    "collective_reason",
    "decide",
    "launch_ranks",
    "launched_ranks",
    "resolve_ranks",
    "restart_count",
    "torchrun_world_size",
    "without_ranks_option",
]

PEER_LOST = 75
"""The exit status of a rank that stopped because another rank was lost (died, hung, or stopped with an error it
reported itself): under ``marljoint train --ranks K`` such a rank prints nothing, and the launcher names the rank
that failed first."""

LAUNCHED_RANKS = "MARLJOINT_LAUNCHED_RANKS"
"""The environment variable ``marljoint train --ranks K`` sets to K in the ranks it starts (plain torchrun does
not): such a rank leaves the report of a lost peer to the launcher."""

SHUTDOWN_SECONDS = 60.0
"""How long the launcher of ``--ranks K`` waits for its ranks to end after it forwards SIGINT or SIGTERM (they
finish their iteration and checkpoint it) or after a rank failed, before it kills them with SIGKILL: a rank that
hangs ends at most the process group's timeout plus this after the others last heard of it."""

_CHECKPOINT_NAMES = "checkpoints"
T = TypeVar("T")


class RankLost(RunError):
    """This rank's collective failed: another rank died, hung past the process-group timeout, or stopped with an
    error of its own. The message names this rank, the iteration and the newest checkpoint it knows of."""


class RanksStopped(RunError):
    """An error every rank of a run meets at the same point (rank 0's refusal of the run directory, parameters
    that diverged between the ranks): rank 0 reports it, the other ranks stop without a line of their own."""


class RankFailure(RunError):
    """A rank of a ``marljoint train --ranks K`` job died or hung, which ended the job; the message names the rank,
    how it ended and the last good checkpoint."""


def torchrun_world_size() -> int:
    """The ranks torchrun (or ``marljoint train --ranks K``) started this process among: ``WORLD_SIZE``, 1 when
    absent.

    Raises:
        RunError: ``WORLD_SIZE`` is not a positive integer.
    """
    text = os.environ.get("WORLD_SIZE", "1").strip()
    if not text.isdigit() or int(text) < 1:
        raise RunError(f"environment variable WORLD_SIZE={text!r} must be a positive integer; launch with torchrun")
    return int(text)


def restart_count() -> int:
    """How often torchrun's elastic agent restarted this job (``TORCHELASTIC_RESTART_COUNT``; 0 when absent): a
    restarted job resumes from the run's newest checkpoint."""
    text = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0").strip()
    return int(text) if text.isdigit() else 0


def launched_ranks() -> int | None:
    """K when this process is a rank started by ``marljoint train --ranks K`` (``None`` under plain torchrun or
    without ranks)."""
    text = os.environ.get(LAUNCHED_RANKS, "").strip()
    return int(text) if text.isdigit() else None


def resolve_ranks(value: int | str, num_envs: int, cores: int | None = None) -> int:
    """The number of ranks ``--ranks VALUE`` asks for: an integer as given, ``"auto"`` the cores this process may
    use (:func:`~marljoint.threads.usable_cores`), at most one rank per env copy.

    Args:
        value: ``--ranks``: a positive integer or ``"auto"``.
        num_envs: the run's env copies.
        cores: the usable cores (default: read from the operating system).

    Raises:
        RunError: more ranks than env copies (each rank steps at least one), naming both and the fix.

    Example:
        >>> resolve_ranks("auto", num_envs=64, cores=2), resolve_ranks("auto", num_envs=3, cores=16)
        (2, 3)
    """
    from marljoint.threads import usable_cores

    if value == "auto":
        return max(1, min(usable_cores() if cores is None else cores, num_envs))
    ranks = int(value)
    if ranks > num_envs:
        raise RunError(
            f"--ranks {ranks} is more than the run's {num_envs} env copies (num_envs), and each rank steps its own "
            f"copies: give --ranks {num_envs} or fewer, or raise --num-envs to at least {ranks}"
        )
    return ranks


def check_ranks(spec: Any, ranks: int) -> None:
    """Refuses a run that ``ranks`` > 1 processes cannot train: an algorithm whose row refuses ranks
    (:attr:`~marljoint.run.algorithms.AlgorithmEntry.ranks_refusal`), env workers or Ray collection, or fewer env
    copies than ranks.

    Raises:
        RunError: one line naming the setting, its value and the fix.
    """
    if ranks <= 1:
        return
    entry = run_entry(spec)
    if entry.ranks_refusal is not None:  # its row says why, and how it parallelises instead
        raise RunError(
            f"--ranks {ranks}: algorithm {entry.name!r} does not train on data-parallel ranks: {entry.ranks_refusal}; "
            "drop --ranks (docs/distributed.md)"
        )
    collection = spec.trainer.collection
    if collection.backend == "ray":
        raise RunError(
            f"--ranks {ranks} with Ray collection: each rank steps its own env copies in its process, and Ray's "
            "rollout actors would be a second scheduler of the same copies; drop --ray (and --ray-address, "
            "--num-workers), or drop --ranks to collect on a Ray cluster"
        )
    if collection.backend != "local":
        raise RunError(
            f"--ranks {ranks} with --env-workers {collection.workers}: each rank steps its own env copies in its "
            "process, so env worker processes would only compete with the ranks for the same cores; drop "
            "--env-workers (ranks use every core), or drop --ranks for one learner with env workers (a GPU learner)"
        )
    resolve_ranks(ranks, spec.trainer.num_envs)


def collective_failure(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by a torch.distributed collective (a peer's connection closed, or the process
    group's timeout passed): the innermost Python frame of its traceback is torch.distributed's."""
    import torch.distributed

    if isinstance(exc, torch.distributed.DistError):
        return True
    if not isinstance(exc, RuntimeError):
        return False
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return f"torch{os.sep}distributed{os.sep}" in tb.tb_frame.f_code.co_filename


def collective_reason(exc: BaseException) -> str:
    """The first sentence of a failed collective's message, without the source location gloo puts first.

    Example:
        >>> collective_reason(RuntimeError("[gloo/pair.cc:537] Read error [127.0.0.1]:8091: Connection reset by "
        ...     "peer. This is typically caused by a remote worker hanging"))
        'Read error [127.0.0.1]:8091: Connection reset by peer'
    """
    text = " ".join(str(exc).split())
    text = re.sub(r"^\[[^\]]*\.(cc|cpp|h|hpp):\d+\]\s*", "", text)
    return text.split(". ")[0].rstrip(".")[:160] or type(exc).__name__


def agree(group: Any, decide_here: Callable[[], T]) -> T:
    """What rank 0 decides, on every rank: rank 0 calls ``decide_here`` and broadcasts its result, or the error it
    raised, which every rank then raises (the other ranks as :class:`RanksStopped`, without a line of their own:
    rank 0 reports the error). Without a group, ``decide_here()``.

    Raises:
        whatever ``decide_here`` raised on rank 0 (there); :class:`RanksStopped` on the other ranks.
    """
    if group is None:
        return decide_here()
    error: BaseException | None = None
    result: Any = None
    if group.is_writer:
        try:
            result = decide_here()
        except BaseException as exc:  # every rank must leave together: the others learn of it below
            error = exc
    outcome = group.broadcast_object(("error", _picklable(error)) if error is not None else ("ok", result))
    if error is not None:
        raise error
    if outcome[0] == "error":
        raise RanksStopped(f"rank {group.rank}: rank 0 stopped: {outcome[1]}")
    return outcome[1]


def _picklable(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def decide(group: Any, local: Mapping[str, Any]) -> dict[str, Any]:
    """The values of one iteration's decisions (``stop``: a stop request's signal name or ``None``; the others
    rank 0's) agreed by every rank in one small all-gather: rank 0 decides, and a stop requested on any rank stops
    every rank. Without a group, ``local``."""
    if group is None:
        return dict(local)
    values = group.all_gather_object(dict(local))
    decided = dict(values[0])
    decided["stop"] = next((v.get("stop") for v in values if v.get("stop") is not None), None)
    return decided


@dataclasses.dataclass(frozen=True)
class _Ended:
    """How one rank of a launched job ended (from torch elastic's failure record)."""

    rank: int
    pid: int
    exitcode: int
    timestamp: int

    @property
    def signal_name(self) -> str | None:
        if self.exitcode >= 0:
            return None
        try:
            return signal.Signals(-self.exitcode).name
        except ValueError:
            return f"signal {-self.exitcode}"


def launch_ranks(argv: Sequence[str], ranks: int, run_dir: Path, timeout_s: float) -> int:
    """Runs ``marljoint ARGV`` (a ``train`` command line without ``--ranks``) as ``ranks`` processes on this
    machine with torch's elastic launcher (a standalone rendezvous on 127.0.0.1 at a free port), as ``torchrun
    --standalone --nproc-per-node RANKS -m marljoint ARGV`` would; returns the job's exit status.

    Args:
        argv: the command line of every rank (``train ... --out RUN_DIR``).
        ranks: K, the processes to start.
        run_dir: the run directory (for the message naming the last good checkpoint).
        timeout_s: the process group's timeout (for the message only).

    Raises:
        RankFailure: a rank died (killed by a signal) or hung; naming it, how it ended and the last good
            checkpoint. A rank that stopped with an error reports the error itself, and the job's exit status is
            that rank's.
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)  # the job's own lines suffice
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=ranks,
        run_id=f"marljoint-{uuid.uuid4().hex[:12]}",
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:0",
        local_addr="127.0.0.1",
        max_restarts=0,
        monitor_interval=0.5,
        shutdown_timeout=int(SHUTDOWN_SECONDS),
    )
    previous = os.environ.get(LAUNCHED_RANKS)
    os.environ[LAUNCHED_RANKS] = str(ranks)
    try:
        elastic_launch(config, sys.executable)("-m", "marljoint", *argv)
    except ChildFailedError as exc:
        return _failed(exc.failures, ranks, run_dir, timeout_s)
    except SignalException as exc:  # forwarded to the ranks, which stopped after their iteration (rank 0 said so)
        return 143 if exc.sigval == signal.SIGTERM else 130
    except Exception as exc:  # the launcher itself (its rendezvous, starting the processes)
        raise RankFailure(f"could not run {ranks} ranks on this machine: {type(exc).__name__}: {exc}") from exc
    finally:
        if previous is None:
            os.environ.pop(LAUNCHED_RANKS, None)
        else:
            os.environ[LAUNCHED_RANKS] = previous
    return 0


def _failed(failures: Mapping[int, Any], ranks: int, run_dir: Path, timeout_s: float) -> int:
    """The exit status of a failed job, after one line naming the rank that failed first (:class:`RankFailure`)
    unless that rank reported its own error."""
    ended = sorted(
        (_Ended(rank, int(f.pid), int(f.exitcode), int(f.timestamp)) for rank, f in failures.items()),
        key=lambda e: (e.timestamp, e.rank),
    )
    reported = [e for e in ended if e.exitcode > 0 and e.exitcode != PEER_LOST]
    if reported:  # it printed its one line (an error, a stop): the job ends with its status
        return reported[0].exitcode
    raise RankFailure(_failure_line(ended, ranks, run_dir, timeout_s))


def _failure_line(ended: list[_Ended], ranks: int, run_dir: Path, timeout_s: float) -> str:
    lost = [e for e in ended if e.exitcode == PEER_LOST]
    killed = [e for e in ended if e.exitcode < 0]
    # The launcher ends a rank that outlives the others' timeout with SIGTERM, then SIGKILL: a rank that hung.
    hung = [e for e in killed if lost and _after(e, lost[0])]
    culprit = next((e for e in killed if e.signal_name not in ("SIGTERM",) and e not in hung), None)
    culprit = culprit or next((e for e in killed if e not in hung), None)
    if culprit is not None:
        what = f"rank {culprit.rank} (pid {culprit.pid}) was killed by {culprit.signal_name}"
    elif hung:
        what = (
            f"rank {hung[0].rank} (pid {hung[0].pid}) stopped responding: the other ranks waited the process "
            f"group's timeout ({timeout_s:g} s, --rank-timeout) for it"
        )
    else:
        what = f"ranks {[e.rank for e in ended]} lost contact with each other"
    return f"{what}, which ended the job of {ranks} ranks; {_last_good(run_dir, ranks)}"


def _after(ended: _Ended, lost: _Ended) -> bool:
    """Whether ``ended`` was ended by the launcher after ``lost`` gave up waiting for it (the records count whole
    seconds: a SIGKILL in the same second is a kill from outside)."""
    if ended.signal_name == "SIGTERM":
        return ended.timestamp >= lost.timestamp
    return ended.signal_name == "SIGKILL" and ended.timestamp > lost.timestamp


def _last_good(run_dir: Path, ranks: int) -> str:
    """The newest checkpoint of the run and how to continue from it."""
    paths = list_checkpoints(run_dir / _CHECKPOINT_NAMES)
    if not paths:
        return f"no checkpoint was written yet to {run_dir}: start the run again"
    return (
        f"the last good checkpoint is {paths[-1]}; continue with: marljoint train --out {run_dir} --resume "
        f"--ranks {ranks}"
    )


def without_ranks_option(argv: Sequence[str]) -> list[str]:
    """``argv`` without ``--ranks K`` / ``--ranks=K`` (what every launched rank runs)."""
    out: list[str] = []
    skip = False
    for token in argv:
        if skip:
            skip = False
            continue
        if token == "--ranks":
            skip = True
            continue
        if token.startswith("--ranks="):
            continue
        out.append(token)
    return out
