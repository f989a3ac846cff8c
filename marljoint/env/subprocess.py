"""Env copies stepped in worker processes, exchanging arrays through shared memory."""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import pickle
import signal
import threading
import traceback
from collections.abc import Callable, Sequence
from multiprocessing import shared_memory
from typing import Any, TypeVar

import numpy as np

from marljoint.env.base import EnvCopyError, JointObs, JointStep, NonFiniteEnvError, split_copies
from marljoint.env.lifetime import bind_to_owner, ignore_stop_signals
from marljoint.env.pettingzoo import PettingZooJointEnv
from marljoint.env.spaces import JointSpec
from marljoint.threads import limit_threads
from marljoint.trust import SnapshotTrustError, TrustKeyError, sign, verify

__all__ = [
    "EnvWorker",
    "EnvWorkerDied",
    "SubprocessJointEnv",
    "action_arrays",
    "make_joint_env",
    "sliced_snapshot",
    "sliced_snapshot_entries",
]


class _SharedArrays:
    """Named numpy arrays living in one shared-memory block, re-openable by name in another process."""

    def __init__(self, layout: dict[str, tuple[tuple[int, ...], str]], name: str | None = None) -> None:
        self.layout = layout
        offsets, total = {}, 0
        for key, (shape, dtype) in layout.items():
            total = -(-total // 16) * 16
            offsets[key] = total
            total += int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        self._owner = name is None
        self.shm = shared_memory.SharedMemory(create=name is None, size=max(total, 1), name=name)
        self.arrays = {
            key: np.ndarray(shape, dtype=np.dtype(dtype), buffer=self.shm.buf, offset=offsets[key])
            for key, (shape, dtype) in layout.items()
        }

    def close(self) -> None:
        self.arrays = {}
        self.shm.close()
        if self._owner:
            self.shm.unlink()


def _layout(env: PettingZooJointEnv) -> dict[str, tuple[tuple[int, ...], str]]:
    E, N = env.num_envs, env.spec.num_agents
    layout: dict[str, tuple[tuple[int, ...], str]] = {}
    for g, group in enumerate(env.spec.groups):
        obs_shape = (E, group.size, *group.observation.shape)
        layout[f"obs{g}"] = (obs_shape, group.observation.dtype.str)
        layout[f"final{g}"] = (obs_shape, group.observation.dtype.str)
        layout[f"act{g}"] = ((E, group.size, *group.action.shape), group.action.dtype.str)
        if group.action.kind != "box":
            layout[f"mask{g}"] = ((E, group.size, group.action.mask_size), "|b1")
    for key in ("alive", "acting", "terminated", "truncated", "final_waiting"):
        layout[key] = ((E, N), "|b1")
    layout["rewards"] = ((E, N), "<f4")
    layout["reset_envs"] = ((E,), "|b1")
    return layout


class EnvWorker:
    """What a function run inside a worker process (:meth:`SubprocessJointEnv.run_in_workers`) is handed: the
    worker's copies and where they stand. The worker only steps envs; what a caller's functions keep between calls
    is the caller's to hold.

    Attributes:
        index: the worker's position in :attr:`SubprocessJointEnv.slices`.
        env: the worker's copies ``[start, stop)``, a :class:`PettingZooJointEnv` with ``first_copy=start``.
        start: global index of the worker's first copy.
        stop: one past its last copy.
        total: E, the copies of all workers together.
        state: the copies' current :class:`JointObs` (``None`` before the first reset). A function that steps
            ``env`` sets it to the state it leaves the copies in; it is published to the main process after the call.
    """

    def __init__(self, index: int, env: PettingZooJointEnv, start: int, stop: int, total: int) -> None:
        self.index = index
        self.env = env
        self.start = start
        self.stop = stop
        self.total = total
        self.state: JointObs | None = None


class EnvWorkerDied(RuntimeError):
    """An env worker process ended without being asked to (killed by a signal, by the out-of-memory killer, or
    by a crash of the interpreter): the env copies it held are lost, so the env is closed.

    Attributes:
        worker: the worker's index in :attr:`SubprocessJointEnv.slices`.
        pid: its process id.
        copies: ``(start, stop)``, the global indices of the copies it held.
        exitcode: its exit status, ``-N`` when signal N killed it (as :attr:`multiprocessing.Process.exitcode`);
            ``None`` when unknown.

    Example:
        >>> str(EnvWorkerDied(1, 4242, (2, 4), -9))
        'env worker 1 (pid 4242, env copies 2..3) was killed by SIGKILL; its env copies are lost and the env is closed'
    """

    def __init__(self, worker: int, pid: int | None, copies: tuple[int, int], exitcode: int | None) -> None:
        super().__init__(worker, pid, copies, exitcode)  # every field, so that the error pickles intact
        self.worker, self.pid, self.copies, self.exitcode = worker, pid, tuple(copies), exitcode

    @property
    def who(self) -> str:
        """``env worker 1 (pid 4242, env copies 2..3)`` (``env copy 2`` for one copy)."""
        a, b = self.copies
        held = f"env copy {a}" if b - a == 1 else f"env copies {a}..{b - 1}"
        return f"env worker {self.worker} (pid {self.pid}, {held})"

    @property
    def how(self) -> str:
        """``was killed by SIGKILL``, ``exited with status 3``, or ``died`` when the status is unknown."""
        if self.exitcode is None:
            return "died"
        if self.exitcode < 0:
            try:
                return f"was killed by {signal.Signals(-self.exitcode).name}"
            except ValueError:
                return f"was killed by signal {-self.exitcode}"
        return f"exited with status {self.exitcode}"

    def __str__(self) -> str:
        return f"{self.who} {self.how}; its env copies are lost and the env is closed"


class _Server:
    """The loop of one worker process: receives commands over its pipe, steps its copies, publishes their arrays
    into the shared block and replies."""

    def __init__(self, conn: Any, worker: EnvWorker, env_fn: Callable[[], Any], arrays: dict[str, np.ndarray]) -> None:
        self.conn = conn
        self.worker = worker
        self.env_fn = env_fn
        self.arrays = arrays
        self.groups = range(len(worker.env.spec.groups))

    def serve(self) -> None:
        """Answers commands until ``close``."""
        handlers = {
            "reset": self.reset,
            "get_state": lambda payload: self.worker.env.get_state(),
            "set_state": self.set_state,
            "reslice": self.reslice,
            "call": self.call,
            "step": self.step,
        }
        while True:
            command, payload = self.conn.recv()
            if command == "close":
                self.worker.env.close()
                self.conn.send(("ok", None))
                return
            self.conn.send(("ok", handlers[command](payload)))

    def publish(self, state: JointObs) -> None:
        """Writes what the agents see (observations, masks, alive and acting flags) into the shared arrays."""
        a, b, arrays = self.worker.start, self.worker.stop, self.arrays
        for g in self.groups:
            arrays[f"obs{g}"][a:b] = state.obs[g]
            if state.action_masks[g] is not None:
                arrays[f"mask{g}"][a:b] = state.action_masks[g]
        arrays["alive"][a:b] = state.alive
        arrays["acting"][a:b] = state.acting

    def reset(self, seed: int | None) -> None:
        self.worker.state = self.worker.env.reset(seed=seed)
        self.publish(self.worker.state)

    def set_state(self, snapshot: bytes) -> None:
        self.worker.state = self.worker.env.set_state(snapshot)
        self.publish(self.worker.state)

    def reslice(self, piece: tuple[int, int]) -> None:
        """Fresh copies of the new slice; the caller restores their state (set_state, a collector's)."""
        a, b = piece
        worker = self.worker
        worker.env.close()
        worker.env = PettingZooJointEnv(self.env_fn, num_envs=b - a, first_copy=a)
        worker.start, worker.stop = a, b
        worker.state = None

    def call(self, payload: tuple[Callable[..., Any], tuple[Any, ...]]) -> tuple[Any, bool]:
        function, args = payload
        result = function(self.worker, *args)
        if self.worker.state is not None:
            self.publish(self.worker.state)
        return result, self.worker.state is not None

    def step(self, payload: None) -> tuple[np.ndarray, np.ndarray]:
        worker, arrays = self.worker, self.arrays
        a, b = worker.start, worker.stop
        out = worker.env.step([arrays[f"act{g}"][a:b] for g in self.groups])
        worker.state = JointObs(out.obs, out.alive, out.acting, out.action_masks)
        self.publish(out)
        for g in self.groups:
            arrays[f"final{g}"][a:b] = out.final_obs[g]
        for key in ("rewards", "terminated", "truncated", "reset_envs"):
            arrays[key][a:b] = getattr(out, key)
        arrays["final_waiting"][a:b] = False if out.final_waiting is None else out.final_waiting
        return out.episode_returns.copy(), out.episode_lengths.copy()


def _worker(
    conn: Any,
    index: int,
    env_fn: Callable[[], Any],
    start: int,
    stop: int,
    total: int,
    shm_name: str,
    layout: dict[str, tuple[tuple[int, ...], str]],
    owner: tuple[int, bool, bool],
) -> None:
    bind_to_owner(*owner)  # first: a worker never outlives the process it steps copies for
    ignore_stop_signals()
    shared = None
    limit_threads(1)  # a worker steps its copies on one core (marljoint.threads)
    try:
        copies = PettingZooJointEnv(env_fn, num_envs=stop - start, first_copy=start)
        shared = _SharedArrays(layout, name=shm_name)
        server = _Server(conn, EnvWorker(index, copies, start, stop, total), env_fn, shared.arrays)
        conn.send(("ready", None))
        server.serve()
    except KeyboardInterrupt:
        pass
    except BaseException as exc:  # the main process re-raises it with the worker's traceback
        try:
            copy_error = exc if isinstance(exc, EnvCopyError) else None
            conn.send(("error", (type(exc).__name__, str(exc), traceback.format_exc(), copy_error)))
        except (BrokenPipeError, OSError):
            pass
    finally:
        if shared is not None:
            shared.close()
        conn.close()


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _exclusive(method: _Method) -> _Method:
    """One exchange with the workers at a time: a collector waiting on them in a background thread (overlapped
    collection) and a call from the caller's thread never interleave their messages on the pipes."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._exchange:
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


class SubprocessJointEnv:
    """A :class:`~marljoint.env.JointEnv` whose copies step in worker processes, in parallel.

    Each worker holds a contiguous slice of the E copies (:func:`~marljoint.env.split_copies`) in a
    :class:`PettingZooJointEnv`; actions and results cross through one shared-memory block, so only a short message
    per worker and step goes through a pipe. Copy e is seeded exactly as in one process, so the same seed gives the
    same streams as :class:`PettingZooJointEnv`. Besides stepping, the workers run any function on their own copies
    (:meth:`run_in_workers`): the subprocess collector plays whole rollouts there.

    Args:
        env_fn: a function building one PettingZoo env (picklable when the start method is not ``fork``).
        num_envs: number of copies E.
        num_workers: worker processes (at most E).
        seed: seed of the first reset when it is given none.
        start_method: multiprocessing start method; ``None`` uses ``fork`` where available, else ``spawn``.

    Raises:
        ValueError: for a non-positive ``num_workers``; errors raised inside a worker are re-raised with their
            original type and message, after which every worker has stopped (the env is closed).
        EnvCopyError: an env copy raised in a worker (with the worker's traceback as text).
        EnvWorkerDied: from any call, when a worker process ended unasked (killed by a signal, say); the env is
            closed. The workers themselves end with this process, however it ends (:mod:`marljoint.env.lifetime`),
            and ignore SIGINT and SIGTERM: :meth:`close` stops them.
    """

    def __init__(
        self,
        env_fn: Any,
        num_envs: int = 2,
        num_workers: int = 2,
        seed: int | None = None,
        start_method: str | None = None,
    ) -> None:
        if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 1:
            raise ValueError(f"num_workers must be a positive integer, got {num_workers!r}")
        probe = PettingZooJointEnv(env_fn, num_envs=num_envs)
        self.env_fn = probe.env_fn
        """The factory building one env copy."""
        self.spec = probe.spec
        self.num_envs = probe.num_envs
        self.num_workers = min(num_workers, self.num_envs)
        self._seed = seed
        self._observation_spaces = probe.observation_spaces
        self._action_spaces = probe.action_spaces
        self._layout = _layout(probe)
        probe.close()
        self._shared = _SharedArrays(self._layout)
        a = self._shared.arrays
        groups = range(len(self.spec.groups))
        self._obs = tuple(a[f"obs{g}"] for g in groups)
        self._final = tuple(a[f"final{g}"] for g in groups)
        self._masks = tuple(a.get(f"mask{g}") for g in groups)
        self._actions = tuple(a[f"act{g}"] for g in groups)
        if start_method is None:
            start_method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
        ctx = mp.get_context(start_method)
        self.slices = split_copies(self.num_envs, self.num_workers)
        """Each worker's copies ``[start, stop)``."""
        self._conns = []
        self._procs = []
        self._closed = False
        self._exchange = threading.RLock()
        # The kernel kills a worker when the thread that started it ends: only right for the main thread (and for
        # the fork server, which lives as long as this process); elsewhere the workers' watchdog alone ends them.
        kernel = start_method == "forkserver" or threading.current_thread() is threading.main_thread()
        owner = (os.getpid(), start_method != "forkserver", kernel)
        for w in range(self.num_workers):
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=_worker,
                args=(child, w, env_fn, *self.slices[w], self.num_envs, self._shared.shm.name, self._layout, owner),
                daemon=True,
            )
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        self._gather()
        self._reset_done = False

    @property
    def observation_spaces(self) -> tuple[Any, ...]:
        """The raw PettingZoo observation space of each agent."""
        return self._observation_spaces

    @property
    def action_spaces(self) -> tuple[Any, ...]:
        """The raw PettingZoo action space of each agent."""
        return self._action_spaces

    def _send(self, messages: Sequence[tuple[str, Any]]) -> None:
        """Sends worker w ``messages[w]``; a worker that is gone closes the env (:class:`EnvWorkerDied`)."""
        for w, (conn, message) in enumerate(zip(self._conns, messages)):
            try:
                conn.send(message)
            except (BrokenPipeError, ConnectionResetError):
                raise self._died(w) from None

    def _send_all(self, command: str, payload: Any) -> None:
        self._send([(command, payload)] * len(self._conns))

    def _died(self, w: int) -> EnvWorkerDied:
        """Closes the env after worker w ended unasked, and the error naming it."""
        proc = self._procs[w]
        proc.join(timeout=1.0)  # its exit status, when it has one
        self.close()
        return EnvWorkerDied(w, proc.pid, self.slices[w], proc.exitcode)

    def _gather(self) -> list[Any]:
        results = []
        error = None
        for w, conn in enumerate(self._conns):
            try:
                status, payload = conn.recv()
            except (EOFError, ConnectionResetError):
                raise self._died(w) from None
            if status == "error" and error is None:
                error = (w, payload)
            results.append(payload)
        if error is not None:
            # A worker that raised has ended: the set of copies is incomplete, so every worker stops now (and a
            # later close() finds nothing to send to).
            self.close()
            w, (name, message, trace, copy_error) = error
            if copy_error is not None:  # the env itself raised: named as in one process, with the worker's trace
                raise EnvCopyError(*copy_error.args[:5], traceback=trace)
            exc_type = {
                "ValueError": ValueError,
                "TypeError": TypeError,
                "RuntimeError": RuntimeError,
                "SnapshotTrustError": SnapshotTrustError,
                "TrustKeyError": TrustKeyError,
                "NonFiniteEnvError": NonFiniteEnvError,
            }.get(name)
            if exc_type is None:
                raise RuntimeError(f"env worker {w} failed with {name}: {message}\n{trace}")
            raise exc_type(message)
        return results

    def _current(self) -> JointObs:
        """The observation state the workers last published (views of the shared arrays)."""
        a = self._shared.arrays
        return JointObs(self._obs, a["alive"], a["acting"], self._masks)

    @_exclusive
    def reset(self, seed: int | None = None) -> JointObs:
        """Resets every copy (copy e with ``seed + e``, as :meth:`PettingZooJointEnv.reset`)."""
        if seed is None:
            seed, self._seed = self._seed, None
        self._send_all("reset", seed)
        self._gather()
        self._reset_done = True
        return self._current()

    @_exclusive
    def step(self, actions: Sequence[np.ndarray]) -> JointStep:
        """Steps every copy in parallel (same contract as :meth:`PettingZooJointEnv.step`)."""
        if not self._reset_done:
            raise RuntimeError("step() was called before reset(); call env.reset(seed=...) first")
        for buf, arr in zip(self._actions, action_arrays(self.spec, self.num_envs, actions)):
            buf[...] = arr
        self._send_all("step", None)
        results = self._gather()
        N = self.spec.num_agents
        returns = [r[0] for r in results if len(r[1])]
        lengths = [r[1] for r in results if len(r[1])]
        a = self._shared.arrays
        return JointStep(
            obs=self._obs,
            alive=a["alive"],
            acting=a["acting"],
            action_masks=self._masks,
            rewards=a["rewards"],
            terminated=a["terminated"],
            truncated=a["truncated"],
            final_obs=self._final,
            reset_envs=a["reset_envs"],
            episode_returns=np.concatenate(returns) if returns else np.zeros((0, N)),
            episode_lengths=np.concatenate(lengths) if lengths else np.zeros(0, np.int64),
            final_waiting=a["final_waiting"],
        )

    @_exclusive
    def run_in_workers(self, function: Callable[..., Any], *args: Any) -> list[Any]:
        """Calls ``function(worker, *args)`` in every worker process, in parallel, and returns the results.

        ``worker`` is the worker's :class:`EnvWorker`: its copies and their current state. If the function leaves
        ``worker.state`` set, that state is published, so :meth:`step` continues from where the function left the
        copies.

        Args:
            function: a picklable function (module level), called with the worker's :class:`EnvWorker` first.
            *args: passed to every call (pickled once per worker).

        Returns:
            The results, one per worker in :attr:`slices` order.

        Raises:
            ValueError: raised by ``function`` in a worker (as are TypeError and RuntimeError: each is re-raised
                with its original type and message; any other type as a RuntimeError with the worker's traceback).
        """
        self._send_all("call", (function, args))
        replies = self._gather()
        if all(started for _, started in replies):
            self._reset_done = True
        return [result for result, _ in replies]

    def current(self) -> JointObs:
        """The copies' current state as the workers last published it (views of the shared arrays)."""
        return self._current()

    @_exclusive
    def reslice(self, slices: Sequence[tuple[int, int]]) -> None:
        """Hands the copies to the workers anew: worker w then holds ``slices[w]``.

        Every worker rebuilds its copies fresh, so the caller puts their state back afterwards: :meth:`set_state`
        of a snapshot resliced to the new split, or a collector's ``load_state`` (which reslices its own
        ``state()``). Copy e is seeded and stepped as copy e whichever worker
        holds it, so a split changes no result.

        Args:
            slices: one ``[start, stop)`` per worker, contiguous, non-empty, covering ``0..E-1`` in order.

        Raises:
            ValueError: for another number of slices, or slices that do not cover the copies in order.
        """
        slices = [(int(a), int(b)) for a, b in slices]
        covered = len(slices) == self.num_workers and [a for a, _ in slices] == [0] + [b for _, b in slices[:-1]]
        if not covered or slices[-1][1] != self.num_envs or any(b <= a for a, b in slices):
            raise ValueError(
                f"reslice needs {self.num_workers} contiguous non-empty [start, stop) slices covering the "
                f"{self.num_envs} copies in order, got {slices}"
            )
        self._send([("reslice", piece) for piece in slices])
        self._gather()
        self.slices = slices
        self._reset_done = False

    @_exclusive
    def get_state(self) -> bytes:
        """Snapshot of every worker's copies mid-episode (:meth:`PettingZooJointEnv.get_state`).

        Raises:
            TypeError: if an env copy cannot be pickled.
        """
        self._send_all("get_state", None)
        return self.snapshot(self._gather())

    @_exclusive
    def set_state(self, state: bytes) -> JointObs:
        """Restores a :meth:`get_state` snapshot taken from a subprocess env with the same copies and workers.

        Returns:
            The restored current :class:`JointObs`.

        Raises:
            ValueError: if the snapshot is unreadable or was taken with another split of the copies.
        """
        # A collector's snapshot pairs each worker's copies with what it keeps beside them.
        entries = self.worker_states(state)
        self._send([("set_state", entry[0] if isinstance(entry, tuple) else entry) for entry in entries])
        self._gather()
        self._reset_done = True
        return self._current()

    def worker_states(self, state: bytes) -> list[Any]:
        """The per-worker entries of a snapshot (:meth:`get_state`, or a collector's that extends it), checked
        against this env's split of the copies.

        Raises:
            marljoint.trust.SnapshotTrustError: if the snapshot is not signed with this user's key (checked before
                anything is unpickled).
            ValueError: if the snapshot is unreadable or was taken with another split of the copies.
        """
        return sliced_snapshot_entries(state, self.slices)

    def snapshot(self, workers: Sequence[Any]) -> bytes:
        """A snapshot in :meth:`get_state`'s format from per-worker entries (what :meth:`worker_states` reads)."""
        return sliced_snapshot(self.num_envs, self.slices, workers)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run (the workers are gone)."""
        return self._closed

    @_exclusive
    def close(self) -> None:
        """Stops the workers and frees the shared memory."""
        if self._closed:
            return
        self._closed = True
        for conn in self._conns:
            try:
                conn.send(("close", None))
                conn.recv()
            except (BrokenPipeError, EOFError, OSError):
                pass
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():  # stuck in its env: SIGKILL, as workers ignore SIGTERM
                proc.kill()
                proc.join(timeout=5)
        self._shared.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (
            f"SubprocessJointEnv(num_envs={self.num_envs}, num_workers={self.num_workers}, "
            f"agents={list(self.spec.agents)})"
        )


def action_arrays(spec: JointSpec, num_envs: int, actions: Sequence[Any]) -> list[np.ndarray]:
    """The actions of one step as numpy arrays, checked against the groups' shapes before they leave this process.

    Args:
        spec: the env's agents and groups.
        num_envs: E.
        actions: per group, ``[E, n_g, *action_shape_g]`` arrays or tensors.

    Returns:
        One array per group (views where the input already is a numpy array).

    Raises:
        ValueError: for another number of groups, or an array of another shape (naming the group and the shape).
    """
    groups = spec.groups
    if isinstance(actions, np.ndarray) or len(actions) != len(groups):
        raise ValueError(
            f"step() needs one action array per agent group ({len(groups)} groups), got "
            f"{'an array' if isinstance(actions, np.ndarray) else f'{len(actions)} arrays'}"
        )
    arrays = []
    for group, act in zip(groups, actions):
        arr = act.detach().cpu().numpy() if hasattr(act, "detach") else np.asarray(act)
        expected = (num_envs, group.size, *group.action.shape)
        if arr.shape != expected:
            raise ValueError(
                f"actions for group {list(group.agents)} have shape {arr.shape}, expected {expected} "
                f"([num_envs, agents in group, *action_shape] for {group.action.kind} actions)"
            )
        arrays.append(arr)
    return arrays


def sliced_snapshot(num_envs: int, slices: Sequence[tuple[int, int]], workers: Sequence[Any]) -> bytes:
    """The signed snapshot of an env whose copies step in workers: each worker's entry, in :attr:`slices` order.

    The format of :meth:`SubprocessJointEnv.get_state` (and of the other multi-worker envs, which restore each
    other's snapshots), read back by :func:`sliced_snapshot_entries`.
    """
    return sign(pickle.dumps({"num_envs": num_envs, "slices": list(slices), "workers": list(workers)}))


def sliced_snapshot_entries(state: bytes, slices: Sequence[tuple[int, int]]) -> list[Any]:
    """The per-worker entries of a :func:`sliced_snapshot`, checked against the split ``slices`` of the copies.

    Raises:
        marljoint.trust.SnapshotTrustError: if the snapshot is not signed with this user's key (checked before
            anything is unpickled).
        ValueError: if the snapshot is unreadable or was taken with another split of the copies.
    """
    payload = verify(state)  # before unpickling: bytes that are not this user's could run code
    try:
        snapshot = pickle.loads(payload)
        saved = [tuple(s) for s in snapshot["slices"]]
        workers = list(snapshot["workers"])
    except Exception as exc:  # unpickling damaged bytes raises many types
        raise ValueError(f"the env state cannot be unpickled ({type(exc).__name__}: {exc})") from exc
    if saved != [tuple(s) for s in slices]:
        raise ValueError(
            f"the env state was saved with copies split {saved} over {len(saved)} workers, this one splits them "
            f"{list(slices)}; resume with the same num_envs and number of workers"
        )
    return workers


def make_joint_env(
    env_fn: Any,
    num_envs: int,
    seed: int | None = None,
    vector_mode: str = "sync",
    num_env_workers: int | None = None,
) -> PettingZooJointEnv | SubprocessJointEnv:
    """Builds the JointEnv a config asks for: in-process (``"sync"``) or in worker processes (``"subprocess"``).

    Args:
        env_fn: a PettingZoo env factory or module.
        num_envs: number of copies E.
        seed: seed of the first reset.
        vector_mode: ``"sync"`` or ``"subprocess"``.
        num_env_workers: worker processes for ``"subprocess"`` (default: 2).

    Raises:
        ValueError: for an unknown ``vector_mode``.
    """
    if vector_mode == "sync":
        return PettingZooJointEnv(env_fn, num_envs=num_envs, seed=seed)
    if vector_mode == "subprocess":
        return SubprocessJointEnv(env_fn, num_envs=num_envs, num_workers=num_env_workers or 2, seed=seed)
    raise ValueError(f"vector_mode must be 'sync' or 'subprocess', got {vector_mode!r}")
