"""Several training runs at once: the seeds of ``marljoint train --seeds`` and the grid of ``--sweep``.

Each run trains in a process of its own (or a Ray task), up to a number of runs at a time, and writes its progress
to ``train.log`` in its run directory. A run's results depend only on its settings and seed, never on the runs
beside it: the runs of a default ``--seeds`` command are bit-identical to the same seeds trained one at a time.

The cores are shared out, not oversubscribed: with J runs at a time on C usable cores, each run computes on
``C // J`` cores (at least one; :func:`fit_to_cores`), the thread policy of :mod:`marljoint.threads` applied to that
share. A run that fails is reported with the others' results; it does not stop them.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import multiprocessing
import multiprocessing.connection
import os
import re
import signal
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marljoint.env.lifetime import bind_to_owner
from marljoint.run.collection import with_auto_workers
from marljoint.run.errors import RunError, RunInterrupted
from marljoint.run.lock import RunLock, RunLocked
from marljoint.run.plotting import PlottingUnavailable
from marljoint.run.registry import resolve_env
from marljoint.run.rundir import LOG_FILE, check_run_dir, holds_run, open_run_file, refuse_links, run_path
from marljoint.run.spec import RunSpec, resume_spec
from marljoint.run.stats import confidence_interval
from marljoint.run.train import train_run
from marljoint.threads import AUTO, learner_threads, limit_threads, usable_cores

__all__ = [
    "LOG_FILE",
    "SWEEP_CSV",
    "SWEEP_PLOT",
    "RunJob",
    "RunOutcome",
    "SweepRow",
    "cores_per_run",
    "fit_to_cores",
    "format_table",
    "check_before_start",
    "grid",
    "parallel_runs",
    "plot_sweep",
    "point_dir",
    "point_job",
    "run_job",
    "run_jobs",
    "summarize",
    "sweep_points",
    "write_sweep_csv",
]

SWEEP_CSV = "sweep.csv"
"""The table of a sweep, one row per setting, in its output directory."""
SWEEP_PLOT = "sweep.png"
"""The plot of a sweep (mean final return and its 95% CI per setting), when matplotlib is installed."""


@dataclass(frozen=True)
class RunJob:
    """One training run to do: its spec, its directory, and how to treat a run already there.

    Attributes:
        spec: the run (a :class:`marljoint.run.train.RunSpec`, with ``torch_threads`` resolved for its share of the
            cores).
        run_dir: its run directory.
        resume: continue the run in ``run_dir``.
        force: replace a run already in ``run_dir``.
        cores: the cores the run may compute on (its process's thread pools are sized to them).
        setting: the swept settings of the run (empty for plain seeds), as ``{key: label}``.
        trust_snapshot: on resume, restore an env snapshot signed under another user's key (a run you received
            and trust; see :func:`marljoint.run.train.train_run`).
    """

    spec: Any
    run_dir: Path
    resume: bool = False
    force: bool = False
    cores: int = 1
    setting: Mapping[str, str] = field(default_factory=dict)
    trust_snapshot: bool = False


@dataclass(frozen=True)
class RunOutcome:
    """What became of a :class:`RunJob`.

    Attributes:
        job: the job.
        final_return: the run's final mean episode return (``nan`` if it failed or finished no episode).
        seconds: wall time of the run.
        error: one line saying why the run failed or stopped, or ``None``.
        interrupted: the exit status of a run stopped after a checkpoint (130 by Ctrl-C, 143 by SIGTERM; ``--resume``
            continues it), 0 otherwise.
    """

    job: RunJob
    final_return: float
    seconds: float
    error: str | None = None
    interrupted: int = 0

    @property
    def ok(self) -> bool:
        """Whether the run finished."""
        return self.error is None


def parallel_runs(runs: int, jobs: int | None = None, cores: int | None = None) -> int:
    """Runs to train at a time: ``jobs``; by default every run at once while there are at most twice as many runs
    as usable cores (:func:`marljoint.threads.usable_cores`), else one run per core. Never more than the runs.

    Runs of one command are alike, so sharing the cores among all of them ends them together, at their total work
    divided by the cores; training them in rounds of one per core leaves a last round with idle cores (3 runs on 2
    cores: 2 run-lengths in rounds, 1.5 shared). Beyond twice the cores, the memory of that many processes outweighs
    the shorter tail, and rounds of one run per core keep it bounded.

    Raises:
        ValueError: for ``runs`` or ``jobs`` below 1.

    Example:
        >>> parallel_runs(3, cores=2), parallel_runs(5, cores=2), parallel_runs(3, jobs=1, cores=2)
        (3, 2, 1)
    """
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}")
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs}; give --jobs 1 to train one run at a time")
    if jobs is None:
        cores = usable_cores() if cores is None else cores
        jobs = runs if runs <= 2 * cores else cores
    return min(runs, jobs)


def cores_per_run(parallel: int, cores: int | None = None) -> int:
    """The cores each of ``parallel`` runs side by side may compute on: an equal share, at least one.

    Example:
        >>> cores_per_run(2, cores=16), cores_per_run(3, cores=2)
        (8, 1)
    """
    return max(1, (usable_cores() if cores is None else cores) // parallel)


def fit_to_cores(spec: Any, cores: int) -> Any:
    """``spec`` with ``torch_threads="auto"`` resolved for ``cores`` cores rather than the whole machine
    (:func:`marljoint.threads.learner_threads`): one thread when the run collects in its own process, the share
    its env workers leave free otherwise. An explicit number is kept.

    Args:
        spec: a :class:`marljoint.run.train.RunSpec`.
        cores: the cores the run may use.
    """
    if spec.trainer.torch_threads != AUTO:
        return spec
    collection = spec.trainer.collection
    workers = collection.workers if collection.multiprocess else 0
    threads, _ = learner_threads(workers, collects=not collection.multiprocess, cores=cores)
    return type(spec).from_dict({"torch_threads": threads}, base=spec)


def run_jobs(
    jobs: Sequence[RunJob],
    parallel: int = 1,
    on_done: Callable[[RunOutcome], None] | None = None,
    engine: str = "process",
) -> list[RunOutcome]:
    """Trains every job, ``parallel`` at a time, and returns their outcomes in the order of ``jobs``.

    Args:
        jobs: the runs.
        parallel: runs at a time; 1 trains them one after another in this process.
        on_done: called with each outcome as its run ends.
        engine: ``"process"`` (a process of this machine per run) or ``"ray"`` (a Ray task per run, holding its
            cores, on the Ray instance this process is connected to or a new local one).

    Raises:
        ValueError: for an unknown engine or ``parallel`` below 1.
        marljoint.run.train.RunInterrupted: when a run trained in this process is stopped by Ctrl-C or SIGTERM.
    """
    if engine not in ("process", "ray"):
        raise ValueError(f"engine={engine!r} is not one of ['process', 'ray']")
    if parallel < 1:
        raise ValueError(f"parallel must be a positive integer, got {parallel}")
    done = on_done if on_done is not None else (lambda outcome: None)
    if engine == "ray":
        return _run_on_ray(jobs, parallel, done)
    if parallel == 1:
        return [_reported(run_job(job), done) for job in jobs]
    return _run_in_processes(jobs, parallel, done)


def _reported(outcome: RunOutcome, done: Callable[[RunOutcome], None]) -> RunOutcome:
    done(outcome)
    return outcome


class _RunLog(io.TextIOBase):
    """The run's ``train.log``, created at the first message: a run refused before it starts writes nothing."""

    def __init__(self, path: Path, append: bool) -> None:
        self.path, self.append = path, append
        self._file: Any = None

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open_run_file(self.path, append=self.append)  # never through a link planted there
        return self._file.write(text)

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        super().close()
        if self._file is not None:
            self._file.close()


def run_job(job: RunJob) -> RunOutcome:
    """Trains one job in this process, its messages, warnings and progress going to its ``train.log``.

    Returns:
        The outcome; a run that raises is a failed outcome (the traceback is in the log), except an interrupted one.

    Raises:
        marljoint.run.train.RunInterrupted: the run was stopped by Ctrl-C or SIGTERM (it is checkpointed).
    """
    started = time.perf_counter()
    # The lock comes first: a second writer is refused before this run's log touches the directory.
    try:
        lock = RunLock(job.run_dir, "marljoint train").acquire()
    except RunLocked as exc:
        return RunOutcome(job, math.nan, 0.0, " ".join(str(exc).split()))
    try:
        return _run_locked(job, started)
    finally:
        lock.release()


def _run_locked(job: RunJob, started: float) -> RunOutcome:
    """:func:`run_job` once the run directory is locked."""

    try:
        log = _RunLog(run_path(job.run_dir, LOG_FILE), append=job.resume)
    except RunError as exc:
        return RunOutcome(job, math.nan, 0.0, " ".join(str(exc).split()))
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            try:
                result = train_run(
                    job.spec,
                    job.run_dir,
                    resume=job.resume,
                    force=job.force,
                    stream=log,
                    trust_snapshot=job.trust_snapshot,
                )
            except RunInterrupted:
                raise
            except Exception as exc:  # a failed run is reported beside the others, whatever it raised
                traceback.print_exc(file=log)
                message = " ".join(str(exc).split()) or type(exc).__name__
                return RunOutcome(job, math.nan, time.perf_counter() - started, message)
    finally:
        log.close()
    return RunOutcome(job, result.final_return, result.seconds)


def _child(job: RunJob, pipe: Any, owner: tuple[int, bool, bool]) -> None:
    """A run's own process: its thread pools sized to its cores, its outcome sent back through ``pipe``; it ends
    with the command that started it, however that ends (:func:`~marljoint.env.lifetime.bind_to_owner`)."""
    bind_to_owner(*owner)
    pipe.send(_run_stoppable(job))
    pipe.close()


def _run_stoppable(job: RunJob) -> RunOutcome:
    """:func:`run_job` in a process of its own, an interrupted run being an outcome too."""

    limit_threads(job.cores)
    try:
        return run_job(job)
    except RunInterrupted as exc:
        return RunOutcome(job, math.nan, 0.0, " ".join(str(exc).split()), interrupted=exc.exit_status)


class _WaitForRuns:
    """While runs train in processes of their own: Ctrl-C reaches them from the terminal and each stops after its
    iteration with a checkpoint, so this process waits for their outcomes rather than stopping first; SIGTERM,
    which reaches this process alone, is passed on to them. Outside the main thread nothing is installed."""

    def __init__(self, running: dict[Any, tuple[int, Any, Any]]) -> None:
        self.running = running
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _WaitForRuns:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._received)
        return self

    def _received(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGTERM:
            for _, process, _ in self.running.values():
                if process.pid is not None:
                    os.kill(process.pid, signal.SIGTERM)

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def _run_in_processes(jobs: Sequence[RunJob], parallel: int, done: Callable[[RunOutcome], None]) -> list[RunOutcome]:
    context = _process_context()
    waiting = list(enumerate(jobs))
    running: dict[Any, tuple[int, Any, Any]] = {}
    outcomes: list[RunOutcome | None] = [None] * len(jobs)
    forkserver = context.get_start_method() == "forkserver"
    owner = (os.getpid(), not forkserver, forkserver or threading.current_thread() is threading.main_thread())
    with _WaitForRuns(running):
        while waiting or running:
            while waiting and len(running) < parallel:
                index, job = waiting.pop(0)
                receive, send = context.Pipe(duplex=False)
                process = context.Process(target=_child, args=(job, send, owner), name=f"marljoint-run-{index}")
                process.start()
                send.close()
                running[process.sentinel] = (index, process, receive)
            for sentinel in multiprocessing.connection.wait(list(running)):
                index, process, receive = running.pop(sentinel)
                outcomes[index] = _reported(_collected(jobs[index], process, receive), done)
                if outcomes[index].interrupted:
                    waiting.clear()  # a stopped command starts no more runs
    return [o for o in outcomes if o is not None]


def _process_context() -> Any:
    """Fresh processes that share no state with this one (no torch threads, no other run's generators): forked
    from a server process that imported torch and the trainer once, so a run does not pay the imports again, or
    spawned where the operating system has no fork."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "marljoint.run.train", "marljoint.run.sweep"])
    return context


def _collected(job: RunJob, process: Any, receive: Any) -> RunOutcome:
    outcome = receive.recv() if receive.poll() else None
    process.join()
    receive.close()
    if outcome is None:
        return RunOutcome(job, math.nan, 0.0, f"its process ended with exit code {process.exitcode} (see {LOG_FILE})")
    return outcome


def _run_on_ray(jobs: Sequence[RunJob], parallel: int, done: Callable[[RunOutcome], None]) -> list[RunOutcome]:
    from marljoint.distributed import connect_ray

    ray = connect_ray()
    remote = ray.remote(max_retries=0)(_ray_task)
    waiting = list(enumerate(jobs))
    running: dict[Any, int] = {}
    outcomes: list[RunOutcome | None] = [None] * len(jobs)
    while waiting or running:
        while waiting and len(running) < parallel:
            index, job = waiting.pop(0)
            running[remote.options(num_cpus=job.cores).remote(job)] = index
        ready, _ = ray.wait(list(running), num_returns=1)
        index = running.pop(ready[0])
        try:
            outcome = ray.get(ready[0])
        except Exception as exc:  # the task's worker died: report the run, keep the others
            outcome = RunOutcome(jobs[index], math.nan, 0.0, " ".join(str(exc).split())[:300])
        outcomes[index] = _reported(outcome, done)
    return [o for o in outcomes if o is not None]


def _ray_task(job: RunJob) -> RunOutcome:
    return _run_stoppable(job)


def grid(axes: Sequence[tuple[str, Sequence[tuple[str, Any]]]]) -> list[dict[str, tuple[str, Any]]]:
    """Every combination of the swept values, the first axis varying slowest.

    Args:
        axes: ``(key, [(label, value), ...])`` per swept setting.

    Returns:
        One ``{key: (label, value)}`` per point of the grid.

    Example:
        >>> [{k: v[0] for k, v in p.items()} for p in grid([("a", [("1", 1), ("2", 2)]), ("b", [("x", "x")])])]
        [{'a': '1', 'b': 'x'}, {'a': '2', 'b': 'x'}]
    """
    points: list[dict[str, tuple[str, Any]]] = [{}]
    for key, values in axes:
        points = [{**point, key: value} for point in points for value in values]
    return points


def sweep_points(axes: Sequence[tuple[str, Sequence[tuple[str, Any]]]]) -> list[dict[str, tuple[str, Any]]]:
    """The points of :func:`grid`, refused when two of them would share a directory (:func:`point_dir`).

    Raises:
        RunError: naming the directories.
    """
    points = grid(axes)
    names = [point_dir(point) for point in points]
    if len(set(names)) != len(names):
        raise RunError(f"two --sweep values name the same directory after quoting: {sorted(names)}")
    return points


_UNSAFE = re.compile(r"[^A-Za-z0-9._=+,\-\[\]{}]")


def point_dir(point: Mapping[str, tuple[str, Any]]) -> str:
    """``key=label,key=label``, with characters that are unsafe in file names replaced by ``_``.

    Example:
        >>> point_dir({"hidden_sizes": ("[64, 64]", [64, 64]), "env": ("a/b", "a/b")})
        'hidden_sizes=[64,_64],env=a_b'
    """
    return _UNSAFE.sub("_", ",".join(f"{key}={label}" for key, (label, _) in point.items()))


def point_job(
    spec: Any,
    options: Mapping[str, Any],
    point: Mapping[str, tuple[str, Any]],
    run_dir: Path,
    seed: int,
    cores: int,
    engine: str,
    resume: bool = False,
    force: bool = False,
    trust_snapshot: bool = False,
    auto_workers: tuple[int | None, bool] | None = None,
    trust_run: bool = False,
) -> RunJob:
    """The job of one seed at one point of the grid, in ``run_dir``, its threads sized to its share of the cores.

    Args:
        spec: the settings the points change (``None`` on a resume: the run's own are read).
        options: the settings given on the command line (checked against a resumed run's).
        point: ``{key: (label, value)}`` of the swept settings (given on the command line, like ``options``: one
            the run's algorithm does not read is refused whatever its value).
        run_dir: the run's directory.
        seed: the run's seed.
        cores: the cores the run may use.
        engine: ``"process"`` or ``"ray"`` (Ray tasks collect in their own process).
        resume: continue the run in ``run_dir``.
        force: replace a run already in ``run_dir``.
        trust_snapshot: on resume, restore an env snapshot signed under another user's key.
        auto_workers: ``(policy_lag, balance)`` for ``--env-workers auto``, or ``None``.
        trust_run: on resume, read a ``config.toml`` that is not signed with this user's key even if it names a
            function as its env (:func:`~marljoint.run.spec.load_run_spec`).

    Raises:
        RunError: the point's settings are invalid, or contradict a resumed run, naming the run directory.
    """
    values = {key: value for key, (_, value) in point.items()}
    try:
        if resume:
            run_spec = resume_spec(run_dir, {**options, **values}, trust_run)
        else:
            run_spec = RunSpec.from_dict({**values, "seed": seed}, base=spec, given=values)
    except RunError as exc:
        raise RunError(f"{run_dir}: {exc}") from None
    if engine == "ray":
        run_spec = RunSpec.from_dict({"collection": {"backend": "local"}}, base=run_spec)
    elif auto_workers is not None:
        run_spec = with_auto_workers(run_spec, *auto_workers, cores=cores)
    setting = {key: label for key, (label, _) in point.items()}
    return RunJob(fit_to_cores(run_spec, cores), run_dir, resume, force, cores, setting, trust_snapshot)


def check_before_start(jobs: Sequence[RunJob], resume: bool, force: bool) -> None:
    """Refuses an env that cannot be found, a directory that another process is writing and a directory that holds
    a run before any run starts (one line, as for a single run), rather than as the same failure of every run.

    Raises:
        RunLocked: a run directory is being written.
        RunError: a directory holds a run (without ``resume`` or ``force``), holds files named like a run's that
            are no run (with ``force``), or holds a symbolic link where a run writes.
        EnvSpecError: an env that does not resolve.
    """
    for job in jobs:  # a directory being written is refused as a single run's would be (RunLocked)
        with RunLock(job.run_dir, "marljoint train"):
            pass

    for job in jobs:  # train.log is written before the run's own checks
        if Path(job.run_dir).is_dir():
            refuse_links(job.run_dir)
    taken = [job.run_dir for job in jobs if holds_run(job.run_dir)]
    if taken and not (resume or force):
        raise RunError(
            f"{taken[0]} already holds a run ({len(taken)} of the {len(jobs)} run directories do); pass --resume "
            "to continue them, --force to overwrite them, or choose another --out"
        )
    for run_dir in taken if not resume else []:  # --force replaces only runs: refused before any run starts
        check_run_dir(Path(run_dir), resume=False, force=True)

    checked = set()
    for job in jobs:
        if (job.spec.env, repr(dict(job.spec.env_kwargs))) not in checked:
            checked.add((job.spec.env, repr(dict(job.spec.env_kwargs))))
            resolve_env(job.spec.env, dict(job.spec.env_kwargs))


@dataclass(frozen=True)
class SweepRow:
    """One setting of a sweep over its seeds.

    Attributes:
        setting: ``{key: label}`` of the swept values.
        mean: mean final return over the runs that finished.
        ci95: half-width of its 95% Student-t confidence interval (``nan`` for fewer than 2 runs).
        n: runs that finished.
        failed: runs that failed.
    """

    setting: Mapping[str, str]
    mean: float
    ci95: float
    n: int
    failed: int


def summarize(outcomes: Sequence[RunOutcome]) -> list[SweepRow]:
    """One row per setting (in the order of first appearance): mean ± 95% CI of the final return over its runs."""

    groups: dict[tuple[tuple[str, str], ...], list[RunOutcome]] = {}
    for outcome in outcomes:
        groups.setdefault(tuple(outcome.job.setting.items()), []).append(outcome)
    rows = []
    for setting, members in groups.items():
        finals = [o.final_return for o in members if o.ok and math.isfinite(o.final_return)]
        mean, half = confidence_interval(finals)
        rows.append(SweepRow(dict(setting), mean, half, len(finals), sum(not o.ok for o in members)))
    return rows


def format_table(rows: Sequence[SweepRow]) -> str:
    """The rows as a plain-text table: one column per swept key, the final return (mean ± 95% CI) and n.

    Example:
        >>> print(format_table([SweepRow({"lr": "1e-3"}, -1.5, 0.25, 3, 0)]))
        lr    final return (mean ± 95% CI)  n
        1e-3  -1.5 ± 0.25                   3
    """
    keys = list(rows[0].setting) if rows else []
    header = [*keys, "final return (mean ± 95% CI)", "n"]
    lines = [header]
    for row in rows:
        failed = f" ({row.failed} failed)" if row.failed else ""
        lines.append([*(row.setting[k] for k in keys), f"{row.mean:.4g} ± {row.ci95:.3g}", f"{row.n}{failed}"])
    widths = [max(len(line[k]) for line in lines) for k in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)


def write_sweep_csv(path: str | Path, rows: Sequence[SweepRow]) -> Path:
    """Writes the rows as CSV: the swept keys, ``final_return_mean``, ``final_return_ci95``, ``n``, ``failed``.

    Raises:
        RunError: ``path`` is a symbolic link or not a regular file (:func:`~marljoint.run.rundir.open_run_file`).
    """
    path = Path(path)
    keys = list(rows[0].setting) if rows else []
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_run_file(path, append=False) as file:  # never through a link planted there
        writer = csv.writer(file)
        writer.writerow([*keys, "final_return_mean", "final_return_ci95", "n", "failed"])
        for row in rows:
            writer.writerow([*(row.setting[k] for k in keys), row.mean, row.ci95, row.n, row.failed])
    return path


def plot_sweep(path: str | Path, rows: Sequence[SweepRow], title: str | None = None) -> Path:
    """Draws each setting's mean final return with its 95% CI as an error bar, one setting per tick.

    Raises:
        marljoint.run.plotting.PlottingUnavailable: without matplotlib.
        RunError: ``path`` is a symbolic link (matplotlib would write through it).
    """
    path = run_path(Path(path).parent, Path(path).name)
    try:
        import matplotlib
    except ImportError:
        raise PlottingUnavailable("matplotlib is not installed (pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [",".join(f"{k}={v}" for k, v in row.setting.items()) for row in rows]
    errors = [0.0 if math.isnan(row.ci95) else row.ci95 for row in rows]
    figure, axes = plt.subplots(figsize=(max(4.0, 1.2 * len(rows) + 2), 4))
    axes.errorbar(range(len(rows)), [row.mean for row in rows], yerr=errors, fmt="o", capsize=4)
    tilted = len(rows) > 3
    axes.set_xticks(range(len(rows)), labels, rotation=30 if tilted else 0, ha="right" if tilted else "center")
    axes.set_ylabel("final mean episode return (95% CI)")
    if title:
        axes.set_title(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
