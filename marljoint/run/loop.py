"""The training loop of a run: its iterations, metrics log, evaluations, checkpoints and progress, and how
SIGINT and SIGTERM stop it."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from marljoint.checkpoint import list_checkpoints
from marljoint.collect.ray_actors import WorkerLostError
from marljoint.distributed.ranks import RanksDiverged
from marljoint.env.base import EnvCopyError, NonFiniteEnvError
from marljoint.env.subprocess import EnvWorkerDied
from marljoint.ppo.config import JointTrainerConfig
from marljoint.ppo.divergence import DivergenceError
from marljoint.run import exploitability, plotting, runlog
from marljoint.run.algorithms import Algorithm, run_entry
from marljoint.run.build import make_env, say
from marljoint.run.episodes import play_episodes
from marljoint.run.errors import EnvFailure, RunError, RunInterrupted, WorkerFailure
from marljoint.run.lock import LOCK_FILE
from marljoint.run.ranks import RankLost, RanksStopped, collective_failure, collective_reason, decide
from marljoint.run.rundir import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    CURVE_FILE,
    clear_run,
    refuse_links,
    run_path,
    save_state,
    writing,
)
from marljoint.run.spec import RunSpec, iterations_for, write_config

__all__ = ["RunLoop", "StopRequested", "StopRequests", "idle_cores_hint", "resolved_spec", "write_curve"]

# What the env side of a run raises mid-run: the env itself, or a worker process stepping its copies.
_ENV_ERRORS = (EnvCopyError, NonFiniteEnvError)
_WORKER_ERRORS = (EnvWorkerDied, WorkerLostError)


class StopRequested(BaseException):
    """Raised by :class:`StopRequests` inside :meth:`~StopRequests.interruptible` when SIGINT or SIGTERM arrives:
    the work in progress there is abandoned at once. A ``BaseException``, so that no ``except Exception`` of the
    abandoned code swallows it."""


class StopRequests:
    """SIGINT and SIGTERM ask the training loop to stop after the iteration in progress, with a checkpoint.

    Work that may be abandoned (a measurement of the policies, which can take minutes where a scheduler grants
    seconds) runs inside :meth:`interruptible`, where a request raises :class:`StopRequested` at once. A second
    Ctrl-C stops at once (``KeyboardInterrupt``). Outside the main thread nothing is installed.
    """

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._previous: dict[int, Any] = {}
        self._interruptible = 0

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """Within: a stop request (or one already made) raises :class:`StopRequested`."""
        if self.signal_name is not None:
            raise StopRequested(self.signal_name)
        self._interruptible += 1
        try:
            yield
        finally:
            self._interruptible -= 1

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Within: a stop request is only noted, even inside :meth:`interruptible` (files being written are
        finished together); on leaving, a request made meanwhile raises :class:`StopRequested` if the section
        around is interruptible."""
        around, self._interruptible = self._interruptible, 0
        try:
            yield
        finally:
            self._interruptible = around
        if around and self.signal_name is not None:
            raise StopRequested(self.signal_name)

    def __enter__(self) -> StopRequests:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._request)
        return self

    def _request(self, signum: int, frame: Any) -> None:
        import signal

        if self.signal_name is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(signum).name
        if self._interruptible:
            raise StopRequested(self.signal_name)

    def __exit__(self, *exc: Any) -> None:
        import signal

        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


class RunLoop:
    """The iterations of :func:`train_run`: log, checkpoint, progress; the run directory is opened after the
    first iteration."""

    def __init__(
        self,
        spec: RunSpec,
        run_dir: Path,
        trainer: Algorithm,
        stream: TextIO,
        progress: bool,
        resume: bool,
        force: bool,
        ranks: Any = None,
    ) -> None:
        self.spec, self.run_dir, self.trainer = spec, run_dir, trainer
        self.ranks = ranks
        """The run's :class:`~marljoint.distributed.ranks.RankGroup`, or ``None`` (one process)."""
        self.writes = ranks is None or ranks.is_writer
        """Whether this process writes the run's files, measures and shows progress (rank 0, or the only one)."""
        self.stream, self.progress, self.resume, self.force = stream, progress, resume, force
        self.aux_fn = spec.penalty()
        self.entry = run_entry(spec)
        """The run's row of the table of algorithms."""
        self.clock_offset, self.agent_steps, self.env_state_saved = 0.0, 0, True
        self.recent: list[float] = []
        self.log: Any = None
        self.logged = 0
        """The last iteration whose metrics row is written."""
        self.best_eval = -math.inf
        from marljoint.collect.config import CollectionConfig

        local = dataclasses.replace(spec, trainer=spec.trainer.replace(collection=CollectionConfig()))
        self.tracker = exploitability.build_tracker(
            spec, trainer.spec.num_agents, lambda copies, seed: make_env(local, num_envs=copies, seed=seed)
        )
        self._eval_env: Any = None
        self._new_best = False
        self.stops = StopRequests()
        """The stop requests of the run in progress (:meth:`run`'s); measurements are interruptible by them."""
        self.created = False
        self._time_up = False
        if spec.wandb_project is not None and self.writes:  # before anything is written
            try:
                import wandb  # noqa: F401
            except ImportError:
                raise RunError('--wandb needs Weights & Biases: pip install "marljoint[wandb]"') from None

    def _open(self) -> None:
        """Replaces an old run (``force``), creates the directory and writes the config: the run has started."""
        if self.run_dir.is_dir():  # checked again as the run starts writing: a link planted since is refused too
            refuse_links(self.run_dir)
        if self.force and not self.resume:
            clear_run(self.run_dir)
        # The run's lock file may be there already: the directory counts as new while it holds nothing else.
        self.created = not self.run_dir.exists() or {p.name for p in self.run_dir.iterdir()} <= {LOCK_FILE}
        try:
            with writing(self.run_dir):
                self.run_dir.mkdir(parents=True, exist_ok=True)
            # The settings the trainer derived from the env are written as resolved, with their reasons (a trainer
            # with settings of its own keeps the run's trainer settings as given).
            self.spec = resolved_spec(self.spec, self.trainer)
            with writing(self.run_dir / CONFIG_FILE):
                write_config(self.spec, self.run_dir / CONFIG_FILE, {**self.spec.reasons, **self.trainer.derived})
            self._open_log()
        except BaseException:
            self.discard_if_empty()
            raise

    def discard_if_empty(self) -> None:
        """Empties the run directory this run created when it holds no checkpoint yet: a run that could not start
        (a full disk, say) leaves nothing behind (the lock, released last, removes the directory itself)."""
        if self.created and not list_checkpoints(self.run_dir / CHECKPOINT_DIR):
            for path in self.run_dir.iterdir():
                if path.name == LOCK_FILE:
                    continue
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)

    def _open_log(self) -> None:
        wandb = None
        if self.spec.wandb_project is not None:
            try:
                wandb = runlog.WandbLog(self.spec.wandb_project, self.run_dir, self.spec.to_dict())
            except ImportError as exc:
                raise RunError(str(exc)) from None
        keep_until = self.trainer.iteration - 1 if self.resume else None
        with writing(self.run_dir / runlog.METRICS_FILE):
            self.log = runlog.MetricsLog(self.run_dir, keep_until=keep_until, wandb=wandb)

    def run(self, stop_after: int | None, on_iteration: Any, stops: StopRequests) -> None:
        trainer, spec = self.trainer, self.spec
        total = iterations_for(spec)
        display = self._announce(total)
        clock = time.perf_counter()
        last_saved = self.logged = trainer.iteration
        self.stops = stops
        self._time_up = decide(self.ranks, {"out_of_time": self._out_of_time(clock)})["out_of_time"]
        try:
            while (
                not self._time_up
                and trainer.iteration < total
                and (stop_after is None or trainer.iteration < stop_after)
            ):
                row = self._iteration(total, clock)
                if on_iteration is not None:
                    on_iteration(row)
                stop = self._agree(clock)
                last = trainer.iteration >= total or self._time_up
                if last or trainer.iteration % spec.checkpoint_every == 0 or stop is not None:
                    self._save(clock)
                    last_saved = trainer.iteration
                if self._new_best:  # weights for eval and export: a resume continues from the newest ckpt_*.pt
                    self._save(clock, best=True, with_env=False)
                    self._new_best = False
                display.update(trainer.env_steps, row["sps"], row["episode_return_mean"], force=last)
                if stop is not None and not last:
                    raise RunInterrupted(
                        f"stopped by {stop} after iteration {trainer.iteration}, which is checkpointed. "
                        f"Continue with: {self.resume_command}",
                        143 if stop == "SIGTERM" else 130,
                    )
        except (*_ENV_ERRORS, *_WORKER_ERRORS) as exc:
            raise self._env_failure(exc, clock, last_saved) from exc
        except DivergenceError as exc:
            raise exc.with_note(self._kept(last_saved)) from None
        except StopRequested:  # an iteration abandoned at once (see _iteration): the last checkpoint is kept
            status = 143 if stops.signal_name == "SIGTERM" else 130
            raise RunInterrupted(self._abandoned(last_saved), status) from None
        except KeyboardInterrupt:
            raise RunInterrupted(
                f"interrupted at iteration {trainer.iteration}; the newest checkpoint is from iteration "
                f"{last_saved}. Continue with: {self.resume_command}"
            ) from None
        except RuntimeError as exc:  # with ranks: a collective that failed, or ranks that diverged
            failure = self._rank_failure(exc, last_saved)
            if failure is None:
                raise
            raise failure from exc
        finally:
            display.close()
            if self.log is not None:
                self.log.close()
            if self._eval_env is not None:
                self._eval_env.close()
            self.tracker.close()
            trainer.close()

    def _announce(self, total: int) -> Any:
        """Writes the run's first lines (what it trains, notes on its measurements and budget); returns its
        progress display."""
        trainer, spec = self.trainer, self.spec
        say(self.stream, self.progress, _banner(spec, self.run_dir, trainer, total, self.resume))
        if self.tracker.approximation_note is not None:
            say(self.stream, self.progress, self.tracker.approximation_note)
        if trainer.iteration >= total:
            say(self.stream, self.progress, f"the run already has {trainer.iteration} iterations; raise --total-steps")
        return runlog.Progress(
            total * spec.trainer.rollout_steps * spec.trainer.num_envs,
            start_steps=trainer.env_steps,
            stream=self.stream,
            enabled=self.progress,
        )

    @property
    def resume_command(self) -> str:
        """The command line that continues this run: its algorithm's command (``marljoint psro`` and ``nfsp`` runs
        are continued by their own commands), with ``--ranks K`` for a run of K ranks (any K resumes it)."""
        ranks = f" --ranks {self.ranks.world_size}" if self.ranks is not None else ""
        return f"marljoint {run_entry(self.spec).command[0]} --out {self.run_dir} --resume{ranks}"

    def _agree(self, clock: float) -> str | None:
        """After an iteration, what every rank does next, as rank 0 decides it (and a stop request on any rank):
        whether ``max_seconds`` is spent and the evaluation found a new best; returns the stop request's signal
        name, or ``None``. One small collective per iteration; without ranks, this process's own values."""
        local = {"stop": self.stops.signal_name, "out_of_time": self._out_of_time(clock), "new_best": self._new_best}
        decided = decide(self.ranks, local)
        self._time_up, self._new_best = bool(decided["out_of_time"]), bool(decided["new_best"])
        return decided["stop"]

    def _rank_failure(self, exc: RuntimeError, last_saved: int) -> RunError | None:
        """A collective that failed (another rank died or hung) as :class:`RankLost`, naming this rank, the
        iteration and the last good checkpoint; a divergence of the ranks' parameters as one line with it; ``None``
        for any other error."""
        if self.ranks is None:
            return None
        if isinstance(exc, RanksDiverged):
            return RanksStopped(f"{exc}; {self._kept(last_saved)}")
        if not collective_failure(exc):
            return None
        reason = collective_reason(exc)
        kept = (
            self._kept(last_saved) if self.writes else f"the checkpoint of iteration {last_saved} is the last good one"
        )
        return RankLost(
            f"rank {self.ranks.rank} of {self.ranks.world_size} lost contact with the other ranks in iteration "
            f"{self.trainer.iteration + 1} (another rank died, hung past the process group's timeout or stopped with "
            f"an error: {reason}); {kept}. Continue with: {self.resume_command}"
        )

    def _out_of_time(self, clock: float) -> bool:
        """Whether the run's ``max_seconds`` (resumed time included) is spent."""
        budget = self.spec.max_seconds
        return budget is not None and self.clock_offset + time.perf_counter() - clock >= budget

    def _abandoned(self, last_saved: int) -> str:
        """What a stop request that abandoned an iteration kept."""
        stopped = f"stopped by {self.stops.signal_name}"
        if self.log is None and not self.resume:
            return f"{stopped} before its first iteration ended; nothing was written"
        return (
            f"{stopped} during iteration {last_saved + 1}, which was abandoned; the checkpoint of iteration "
            f"{last_saved}, the last completed one, is kept. Continue with: {self.resume_command}"
        )

    def _kept(self, last_saved: int) -> str:
        """Which checkpoint holds the last good weights after a divergence (the diverged state is never saved)."""
        if self.log is None:
            return "nothing was written"
        paths = list_checkpoints(self.run_dir / CHECKPOINT_DIR)
        if not paths:
            return f"no checkpoint was written, {self.run_dir} keeps the metrics of the iterations before"
        return f"{paths[-1]} (iteration {last_saved}) holds the last good weights and was kept"

    def _iteration(self, total: int, clock: float) -> dict[str, Any]:
        trainer = self.trainer
        with self.stops.interruptible() if self.entry.abandons_iterations else contextlib.nullcontext():
            rollout, stats, seconds = trainer.iterate(total, aux_fn=self.aux_fn)
        metrics = trainer.iteration_metrics(rollout, stats, seconds)
        if not self.writes:  # rank 0 measures, logs and writes; the others only train
            self.agent_steps += metrics["agent_steps"]
            self.logged = trainer.iteration
            return _row(metrics, self.clock_offset + time.perf_counter() - clock, self.agent_steps)
        self.tracker.observe(trainer, trainer.iteration)  # the average policy of MMD self-play, where kept
        try:
            with self.stops.interruptible():
                self._measure(metrics, total)
        except StopRequested:  # abandoned: the row lacks the measurement, the loop checkpoints and stops
            pass
        self._new_best = self._new_best or self.tracker.take_new_best()
        if self.log is None:
            self._open()
        self.tracker.export(self.run_dir)
        if self.entry.writes_openspiel_policy:  # psro's and nfsp's scored policies
            path = run_path(self.run_dir, exploitability.OPENSPIEL_POLICY)
            with writing(path):
                trainer.write_openspiel_policy(path)
        self.agent_steps += metrics["agent_steps"]
        row = _row(metrics, self.clock_offset + time.perf_counter() - clock, self.agent_steps)
        with writing(self.log.path):
            self.log.log(row)
        self.logged = trainer.iteration
        if math.isfinite(row["episode_return_mean"]):
            self.recent = (self.recent + [row["episode_return_mean"]])[-10:]
        return row

    def _measure(self, metrics: dict[str, Any], total: int) -> None:
        """Adds the iteration's evaluation and exploitability columns to ``metrics``, each where due."""
        trainer, every = self.trainer, self.spec.eval_every
        evaluated = every is not None and (trainer.iteration % every == 0 or trainer.iteration >= total)
        if evaluated:
            metrics.update(self._evaluate())
        if self.tracker.due(trainer.iteration, total, evaluated):
            metrics.update(self.tracker.measure(trainer, trainer.iteration))

    def _evaluate(self) -> dict[str, float]:
        """Greedy returns on the same fresh episodes every time; the trainer's generator is left as it was."""
        from marljoint.collect.config import CollectionConfig

        trainer, spec = self.trainer, self.spec
        seed = (spec.trainer.seed + 1_000_003) % 2**63
        if self._eval_env is None:
            copies = min(spec.eval_episodes, 8)
            local = dataclasses.replace(spec, trainer=spec.trainer.replace(collection=CollectionConfig()))
            self._eval_env = make_env(local, num_envs=copies, seed=seed)
        generator = trainer.generator.get_state()
        try:
            returns, _ = play_episodes(trainer, self._eval_env, spec.eval_episodes, deterministic=True, seed=seed)
        finally:
            trainer.generator.set_state(generator)
        mean = float(returns.mean())
        if mean > self.best_eval:
            self.best_eval, self._new_best = mean, not self.tracker.decides_best
        out = {"eval/episode_return_mean": mean, "eval/best_episode_return_mean": self.best_eval}
        for agent, value in zip(trainer.spec.agents, returns.mean(axis=0)):
            out[f"eval/episode_return/{agent}"] = float(value)
        out.update(self.tracker.evaluate(trainer, self._eval_env, spec.eval_episodes, seed))
        return out

    def _save(self, clock: float, best: bool = False, with_env: bool = True) -> None:
        """Writes a checkpoint (rank 0; every rank of a run of ranks takes part in gathering the env copies' state).

        ``with_env=False`` leaves the env copies' state out: ``best.pt``, which serves eval and export (gathering
        the copies from env workers can cost as much as an iteration), and the last checkpoint after an env failed.
        """
        seconds = self.clock_offset + time.perf_counter() - clock
        run = {"best_eval_return": self.best_eval, **(self.tracker.state() if self.writes else {})}
        with writing(self.run_dir / CHECKPOINT_DIR):
            saved = save_state(
                self.trainer,
                self.run_dir,
                self.spec,
                seconds,
                self.agent_steps,
                self.env_state_saved and with_env,
                self.stream,
                run,
                best,
                write=self.writes,
            )
        if with_env:  # a checkpoint left without the copies' state on purpose says nothing of whether they pickle
            self.env_state_saved = saved

    def _env_failure(self, exc: Exception, clock: float, last_saved: int) -> RunError:
        """Checkpoints the last completed iteration, if no checkpoint holds it, and says what the user can do.

        The env (or a worker process stepping its copies) failed while collecting, before the update, so the
        trainer still holds the completed iteration exactly; the env copies, left mid-call or lost with their
        worker, are not saved, and the resume starts them on fresh episodes.
        """
        completed = self.logged
        # With ranks the other ranks are mid-collection, so no checkpoint can be gathered: the last one is kept.
        saves = self.ranks is None and self.log is not None
        if saves and completed == self.trainer.iteration and completed > last_saved:
            self._save(clock, with_env=False)
            last_saved = completed
        if isinstance(exc, _WORKER_ERRORS):
            what = f"{exc.who} {exc.how}" if isinstance(exc, EnvWorkerDied) else str(exc)
            failed, error = f"{what} in iteration {completed + 1}", WorkerFailure
            kept = f"the newest checkpoint, from iteration {last_saved}, is kept. Continue"
        else:
            failed, error = f"env {self.spec.env!r} failed in iteration {completed + 1}: {exc}", EnvFailure
            kept = f"the newest checkpoint is from iteration {last_saved}. Once the env is fixed, continue"
        if self.logged == 0 and not self.resume:  # no iteration completed: nothing written (by any rank)
            return error(f"{failed}; nothing was written to {self.run_dir}", 0)
        return error(f"{failed}; {kept} with: {self.resume_command}", last_saved)


_FIRST_COLUMNS = ("iteration", "wall_time", "env_steps", "agent_steps", "sps", "episodes", "episode_return_mean")


def _row(metrics: Mapping[str, Any], wall_time: float, agent_steps: int) -> dict[str, Any]:
    """A metrics.csv row: the trainer's metrics with run-wide counters and a fixed column order."""
    values = dict(metrics)
    values["wall_time"] = wall_time
    values["agent_steps"] = agent_steps
    head = {k: values[k] for k in _FIRST_COLUMNS}
    return {**head, **{k: v for k, v in values.items() if k not in head}}


def resolved_spec(spec: RunSpec, trainer: Algorithm) -> RunSpec:
    """``spec`` with the trainer's resolved :class:`~marljoint.JointTrainerConfig` where its config is one (PPO:
    the settings it derived from the env and the machine filled in); else ``spec`` as it is."""
    if isinstance(trainer.config, JointTrainerConfig):
        return dataclasses.replace(spec, trainer=trainer.config)
    return spec


def _banner(spec: RunSpec, run_dir: Path, trainer: Algorithm, iterations: int, resume: bool) -> str:
    agents = ", ".join(trainer.spec.agents)
    verb = f"resuming at iteration {trainer.iteration} of" if resume else "training"
    kwargs = f" {json.dumps(dict(spec.env_kwargs))}" if spec.env_kwargs else ""
    hint = idle_cores_hint(resolved_spec(spec, trainer).trainer)
    return (
        f"{verb} {spec.env}{kwargs} ({agents}) for {iterations} iterations "
        f"({iterations * spec.trainer.rollout_steps * spec.trainer.num_envs:,} env steps) -> {run_dir}"
    ) + (f"\n{hint}" if hint else "")


def idle_cores_hint(config: JointTrainerConfig, cores: int | None = None) -> str | None:
    """One line on how to use the cores a run leaves idle, or ``None`` unless it leaves most of them idle.

    A run uses one core per env worker plus the learner's threads, or one core when it collects in-process.

    Args:
        config: the trainer's resolved config (``torch_threads`` a number).
        cores: the cores this process may use (default :func:`marljoint.threads.usable_cores`).
    """
    from marljoint.threads import auto_workers, usable_cores

    cores = usable_cores() if cores is None else cores
    collection = config.collection
    threads = config.torch_threads if isinstance(config.torch_threads, int) else 1
    used = collection.workers + threads if collection.multiprocess else 1
    if 2 * used >= cores:
        return None
    if not collection.multiprocess:
        workers = auto_workers(config.num_envs, cores)
        more = f"--env-workers auto steps the {config.num_envs} env copies in {workers} worker processes"
        if workers < cores - 1:
            more += f" (at most one per copy: --num-envs {cores - 1} would use every core)"
        return f"this run collects on 1 of the {cores} cores this process may use; {more}"
    return (
        f"this run uses {used} of the {cores} cores this process may use ({collection.workers} env workers, "
        f"{threads} learner thread{'s' if threads != 1 else ''}); --env-workers auto uses them all"
    )


def write_curve(run_dir: Path, stream: TextIO, verbose: bool) -> None:
    """Draws ``learning_curve.png`` (a note instead when matplotlib is missing)."""
    try:
        plotting.plot_learning_curve(run_dir, run_dir / CURVE_FILE)
    except plotting.PlottingUnavailable as exc:
        say(stream, verbose, f"note: {exc}; {CURVE_FILE} not written")
