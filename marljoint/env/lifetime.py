"""Worker processes that end with the process they work for, however that one ends.

A learner killed with SIGKILL runs no cleanup: without help its env workers would live on, parentless, holding
their memory. A worker therefore binds itself to its owner as soon as it starts (:func:`bind_to_owner`):

- on Linux the kernel kills it when its parent dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``);
- everywhere, a daemon thread checks every :data:`WATCH_INTERVAL_S` seconds whether the owner still lives and
  whether the process still has the parent it started with (a process whose parent dies is re-parented), and ends
  the process when either is gone. This also covers a parent that died between the fork and the ``prctl`` call,
  and the ``forkserver`` start method, where the parent is the fork server and the owner a process beside it.

Stopping is the owner's decision: a worker ignores SIGINT and SIGTERM (:func:`ignore_stop_signals`), which a
terminal or a scheduler sends to every process of the job, so that the owner can finish its checkpoint with its
workers' help before it closes them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time

__all__ = ["WATCH_INTERVAL_S", "bind_to_owner", "ignore_stop_signals", "process_alive"]

WATCH_INTERVAL_S = 0.25
"""How often a worker checks that its owner lives: the longest a worker outlives it where the kernel does not
kill it first."""

_PR_SET_PDEATHSIG = 1
_EXIT_OWNER_GONE = 1


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie, exited but not yet reaped, counts as gone).

    Example:
        >>> process_alive(os.getpid())
        True
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):  # no /proc (macOS), or the process vanished meanwhile
        return True
    return state not in (b"Z", b"X")


def _kill_with_parent() -> bool:
    """Asks the Linux kernel to SIGKILL this process when its parent thread ends; whether it could."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _owner_gone(owner: int, parent: int) -> bool:
    return os.getppid() != parent or not process_alive(owner)


def _watch(owner: int, parent: int) -> None:
    while not _owner_gone(owner, parent):
        time.sleep(WATCH_INTERVAL_S)
    os._exit(_EXIT_OWNER_GONE)  # no cleanup to run: the shared memory and the pipes are the owner's


def bind_to_owner(owner: int, owner_is_parent: bool = True, kernel: bool = True) -> None:
    """Ends this (worker) process as soon as process ``owner`` is gone; call it first thing in the worker.

    Args:
        owner: pid of the process this one works for.
        owner_is_parent: whether ``owner`` started this process itself (``fork``, ``spawn``); with ``forkserver``
            the parent is the fork server, which ends when the owner does.
        kernel: also ask the Linux kernel to kill this process when its parent ends. Only right where the parent
            thread lives as long as the owner: the owner's main thread, or the fork server (the kernel watches the
            thread that forked, not the process).
    """
    parent = os.getppid()
    if kernel:
        _kill_with_parent()
    if (owner_is_parent and parent != owner) or _owner_gone(owner, parent):
        os._exit(_EXIT_OWNER_GONE)  # the owner died before the kernel was asked to watch it
    threading.Thread(target=_watch, args=(owner, parent), name="marljoint-owner-watch", daemon=True).start()


def ignore_stop_signals() -> None:
    """SIGINT and SIGTERM no longer stop this process: its owner stops it (after its checkpoint)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(signum, signal.SIG_IGN)
        except (ValueError, OSError):  # not the main thread of the process: leave the signals as they are
            pass
