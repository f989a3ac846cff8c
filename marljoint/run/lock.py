"""One writer per run directory: an operating-system lock held for a run's whole life.

``marljoint train``, ``psro`` and ``nfsp`` (and :func:`~marljoint.run.train.train_run`) take :class:`RunLock` on their
run directory before they create, clear or read anything in it for a resume. A second writer is refused at once
with :class:`RunLocked`, naming the process that holds the directory. The lock is the kernel's (``flock`` on POSIX,
``msvcrt.locking`` on Windows), so it goes away with the process that held it, however that process ends: a run
killed by SIGKILL or a power cut leaves no stale lock behind. Readers (``marljoint eval``, ``marljoint plot``) take
no lock.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import threading
from pathlib import Path
from typing import Any

from marljoint.run.errors import RunError

__all__ = ["LOCK_FILE", "RunLock", "RunLocked"]

LOCK_FILE = ".marljoint.lock"
"""The lock file inside a run directory, holding the writer's process id, host and command while it runs."""

_WINDOWS_LOCK_OFFSET = 1 << 30
"""Windows locks byte ranges that nobody may then read: the lock sits far past the holder's description."""


class RunLocked(RunError):
    """Another process (or another thread of this one) is writing the run directory.

    Attributes:
        run_dir: the run directory.
        holder: the writer, as its lock file describes it (``{"pid": ..., "host": ..., "command": ...}``; empty
            when the file could not be read).
    """

    def __init__(self, run_dir: Path, holder: dict[str, Any]) -> None:
        who = holder.get("command") or "marljoint"
        pid, host = holder.get("pid"), holder.get("host")
        name = f"{who} process {pid}" if pid is not None else f"another {who} process"
        where = f" on host {host}" if host else ""
        super().__init__(
            f"{run_dir} is being written by {name}{where}; wait for it to finish, stop it, or choose another --out"
        )
        self.run_dir = run_dir
        self.holder = holder


class _Held:
    """A lock this process holds: the open lock file, the holder's description, the thread that took it, the
    directories it created, and how often it was taken."""

    def __init__(self, fd: int, holder: dict[str, Any], thread: int, created: list[Path]) -> None:
        self.fd, self.holder, self.thread, self.created, self.count = fd, holder, thread, created, 1


# The locks this process holds, by lock file: a kernel lock belongs to the process, so a second acquire from the
# thread that holds it nests, and one from another thread must be refused here (the kernel would grant it).
_HELD: dict[str, _Held] = {}
_GUARD = threading.Lock()


def _forget_in_child() -> None:
    """A forked child (an env worker) closes its copies of the lock files: the lock stays with the parent and goes
    when the parent dies, even if the child outlives it."""
    global _GUARD
    _GUARD = threading.Lock()
    for held in _HELD.values():
        try:
            os.close(held.fd)
        except OSError:
            pass
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class RunLock:
    """The exclusive right to write a run directory, for as long as it is held.

    Acquiring creates the directory if needed and locks ``run_dir/.marljoint.lock`` with the kernel's lock, writing
    the holder's process id, host and command into it; releasing deletes the file (and the directories acquiring
    created, if nothing else was written there). The lock file is never opened through a symbolic link: a lock
    path that is a link, or anything but a regular file, is refused, and releasing deletes only the file this
    lock opened, never what has taken its place. The kernel releases the lock when the holder dies, so a crashed
    run never blocks the next one. The thread that holds a lock may acquire it again (the holds nest); any other
    writer, in this process or another, is refused with :class:`RunLocked` without waiting and without changing
    anything on disk.

    Args:
        run_dir: the run directory.
        command: the holder's command, for the refusal message (``"marljoint train"``).

    Example:
        >>> import tempfile
        >>> run_dir = Path(tempfile.mkdtemp()) / "run"
        >>> with RunLock(run_dir, "marljoint train") as lock:
        ...     lock.path.exists()
        True
        >>> run_dir.exists()  # nothing was written, so the directory is gone again
        False
    """

    def __init__(self, run_dir: str | os.PathLike[str], command: str = "marljoint") -> None:
        self.run_dir = Path(run_dir)
        self.command = command
        self._key: str | None = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()

    @property
    def path(self) -> Path:
        """The lock file."""
        return self.run_dir / LOCK_FILE

    def acquire(self) -> RunLock:
        """Takes the lock (once per :meth:`release`).

        Raises:
            RunLocked: another process, or another thread of this one, holds the directory.
            RunError: the path exists and is not a directory, cannot be created, or the lock path is a symbolic
                link or not a regular file.
        """
        if self.run_dir.exists() and not self.run_dir.is_dir():
            raise RunError(f"output path {self.run_dir} exists and is not a directory")
        absolute = self.run_dir.absolute()
        created = [p for p in (absolute, *absolute.parents) if not p.exists()]
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            _remove_empty(created)
            reason = os.strerror(exc.errno) if exc.errno is not None else str(exc)
            if exc.filename is not None and os.fspath(exc.filename) != os.fspath(self.run_dir):
                reason += f" ({exc.filename})"
            raise RunError(f"cannot create the run directory {self.run_dir}: {reason}; choose another --out") from None
        # The directory is resolved (two names of one directory share one lock), the lock file's own name never is.
        key = os.path.join(os.path.realpath(self.run_dir), LOCK_FILE)
        try:
            with _GUARD:
                held = _HELD.get(key)
                if held is not None:
                    if held.thread != threading.get_ident():
                        raise RunLocked(self.run_dir, held.holder)
                    held.count += 1
                else:
                    fd = _lock_file(self.path, self.run_dir)
                    holder = _describe(self.command)
                    _write_holder(fd, holder)
                    _HELD[key] = _Held(fd, holder, threading.get_ident(), created)
        except BaseException:
            _remove_empty(created)
            raise
        self._key = key
        return self

    def release(self) -> None:
        """Gives the lock back; the last release of nested holds deletes the lock file."""
        key, self._key = self._key, None
        if key is None:
            return
        with _GUARD:
            held = _HELD.get(key)
            if held is None:
                return
            held.count -= 1
            if held.count > 0:
                return
            del _HELD[key]
            # Unlinked while still locked: a writer that opened the old file finds it gone and tries again.
            if _same_file(held.fd, key):  # the absolute path: the working directory may have changed since
                try:
                    os.unlink(key)
                except OSError:
                    pass
            _unlock(held.fd)
            os.close(held.fd)
        _remove_empty(held.created)


def _remove_empty(directories: list[Path]) -> None:
    """Removes the directories an acquire created, from the run directory up, while they are empty: a run that
    never started leaves nothing behind."""
    for directory in directories:
        try:
            directory.rmdir()
        except OSError:
            break


def _describe(command: str) -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "command": command}


def _same_file(fd: int, path: str | Path) -> bool:
    """Whether ``path`` itself (not what a link there points to) is the file open as ``fd``."""
    try:
        found, held = os.lstat(path), os.fstat(fd)
    except OSError:
        return False
    return (found.st_dev, found.st_ino) == (held.st_dev, held.st_ino)


_NOT_REGULAR = "lock file {path} is not a regular file; remove it (marljoint creates its own) and run again"


def _refuse_unsafe(path: Path) -> None:
    """Refuses a lock path that is a symbolic link or not a regular file: writing the holder there would truncate
    whatever it names, and releasing would delete it.

    Raises:
        RunError: naming the path and the fix.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise RunError(
            f"lock file {path} is a symbolic link (to {os.readlink(path)}); marljoint writes no lock through a "
            f"link: remove the link (rm {path}) and run again"
        )
    if not stat.S_ISREG(mode):
        raise RunError(_NOT_REGULAR.format(path=path))


def _open_lock_file(path: Path) -> int:
    """Opens (creating) the lock file without following a link at its name."""
    _refuse_unsafe(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0), 0o644)
    except OSError:
        _refuse_unsafe(path)  # a link or a special file put there since the check: say so
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunError(_NOT_REGULAR.format(path=path))
    return fd


def _lock_file(path: Path, run_dir: Path) -> int:
    """Opens and locks the lock file; raises :class:`RunLocked` if another process holds it."""
    while True:
        fd = _open_lock_file(path)
        try:
            locked = _try_lock(fd)
        except BaseException:
            os.close(fd)
            raise
        if not locked:
            holder = _read_holder(fd)
            os.close(fd)
            raise RunLocked(run_dir, holder)
        if _same_file(fd, path) or sys.platform == "win32":
            return fd
        # The holder deleted this file as it released the lock: lock the file now at the path instead.
        _unlock(fd)
        os.close(fd)


def _try_lock(fd: int) -> bool:
    if sys.platform == "win32":
        import msvcrt

        os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (BlockingIOError, PermissionError):
        return False
    return True


def _unlock(fd: int) -> None:
    if sys.platform == "win32":
        import msvcrt

        os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)  # type: ignore[attr-defined]
        except OSError:
            pass
        return
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_UN)


def _write_holder(fd: int, holder: dict[str, Any]) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, (json.dumps(holder) + "\n").encode())


def _read_holder(fd: int) -> dict[str, Any]:
    """The holder's description; empty if it is not written yet (the holder is between locking and writing)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        value = json.loads(os.read(fd, 4096).decode() or "{}")
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
