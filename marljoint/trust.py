"""Signatures that let a user's own env snapshots be unpickled, and nobody else's.

A training checkpoint keeps the env copies mid-episode as pickled bytes (``get_state``), and unpickling bytes can
run any code they name. So every snapshot marljoint writes is signed with HMAC-SHA256 under a secret key of the
user, and a snapshot is unpickled only after its signature checks out under that key: a file that someone else
wrote or altered is refused before a single byte of it is unpickled.

The key is 32 random bytes in ``snapshot.key`` of the user's marljoint directory: ``$MARLJOINT_HOME`` if set, else
``$XDG_CONFIG_HOME/marljoint``, else ``~/.config/marljoint``. It is created on first use, readable by its owner only
(mode 0600), and atomically: processes that create it at the same moment all end up with the same key. The same key
signs each run's ``config.toml`` (:func:`text_signature`), so that a run's settings are trusted only when the user
wrote them.

Whoever can read or replace the key can sign files the user's marljoint then trusts, so, as ssh does with a private
key, a key file is refused (:class:`TrustKeyError`, naming the file, what is wrong and the fix) when it is a symbolic
link (links are not followed, whatever they point to), not a regular file, not 32 bytes long, or, on POSIX systems,
not owned by the current user or readable or writable by anyone else (any group or other permission bit). Windows
has no such owner and mode bits, so there only the link, file and size checks apply.

A run received from someone else carries their signatures. To resume it, the user vouches for it explicitly
(``marljoint train --resume --trust-snapshot``, ``trust_snapshot=True`` in Python), which re-signs its snapshot with
the user's own key (:func:`resign`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import tempfile
from pathlib import Path

__all__ = [
    "HOME_VARIABLE",
    "SnapshotTrustError",
    "TrustKeyError",
    "adopt_key",
    "is_signed",
    "key_path",
    "resign",
    "sign",
    "text_signature",
    "user_key",
    "verify",
]

HOME_VARIABLE = "MARLJOINT_HOME"
"""The environment variable that overrides the directory holding the user's key."""

_KEY_FILE = "snapshot.key"
_KEY_SIZE = 32
_MAGIC = b"marljoint-signed-snapshot-v1\n"
_TAG_SIZE = hashlib.sha256().digest_size
# Put before a text's bytes when it is signed, so that a text's signature can never pass for a snapshot's.
_TEXT_CONTEXT = b"marljoint-signed-text-v1\n"
_NEW_KEY = (
    "delete it (a new key is made on next use; runs and snapshots signed with the old one then need --trust-run or "
    "--trust-snapshot once)"
)
_OPT_IN = "resume with --trust-snapshot (trust_snapshot=True in Python) only if you trust where it came from"

# The key of each key file read by this process: snapshots are signed and checked often during a run.
_keys: dict[Path, bytes] = {}
# A key handed over by the process that started this one (a Ray actor on another machine): it wins over the file.
_adopted: bytes | None = None


class SnapshotTrustError(ValueError):
    """Env snapshot bytes that are unsigned, signed under another user's key, or altered since they were signed:
    unpickling them could run code, so they are refused."""


class TrustKeyError(ValueError):
    """The user's key file is not one marljoint can trust: a link, not a regular file, of the wrong size, or (on
    POSIX systems) owned by someone else or open to other users. The message names the file, what is wrong and the
    fix."""


def key_path() -> Path:
    """The file of the user's key: ``snapshot.key`` in ``$MARLJOINT_HOME``, ``$XDG_CONFIG_HOME/marljoint`` or
    ``~/.config/marljoint`` (the first that is set)."""
    home = os.environ.get(HOME_VARIABLE)
    if home:
        return Path(home).expanduser() / _KEY_FILE
    config = os.environ.get("XDG_CONFIG_HOME")
    base = Path(config).expanduser() if config else Path.home() / ".config"
    return base / "marljoint" / _KEY_FILE


def user_key() -> bytes:
    """The user's 32-byte secret key, created (mode 0600) on first use.

    Raises:
        TrustKeyError: if the key file is a symbolic link, not a regular file, not 32 bytes long, or (not on
            Windows) owned by another user or readable or writable by others; the message names the file, what
            is wrong and the fix (``chmod 600``, or deleting it so that a new key is made).
        OSError: if the directory cannot be created or the file cannot be written.
    """
    if _adopted is not None:
        return _adopted
    path = key_path()
    key = _keys.get(path)
    if key is None:
        key = _read_key(path)
        _keys[path] = key
    return key


def _read_key(path: Path) -> bytes:
    """The key in ``path`` (created first if there is none), after :func:`_check_key_file` on the path and again on
    the open file, which is opened without following links: a file swapped in between is caught too."""
    try:
        _check_key_file(path, os.lstat(path))
    except FileNotFoundError:
        _create_key(path)
        _check_key_file(path, os.lstat(path))
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise TrustKeyError(f"the key file {path} cannot be read ({exc.strerror or exc}); {_NEW_KEY}") from None
    with os.fdopen(fd, "rb") as f:
        _check_key_file(path, os.fstat(f.fileno()))
        return f.read(_KEY_SIZE)


def _check_key_file(path: Path, info: os.stat_result) -> None:
    """Refuses a key file that is a link, not a regular file, of the wrong size, or (POSIX) not private to the
    current user."""
    if stat.S_ISLNK(info.st_mode):
        target = os.readlink(path)
        dangling = "" if os.path.exists(path) else ", which does not exist"
        raise TrustKeyError(
            f"the key file {path} is a symbolic link (to {target}{dangling}): marljoint reads its key only from a "
            f"regular file of your own; replace the link with the file itself (chmod 600) or {_NEW_KEY}"
        )
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise TrustKeyError(f"the key file {path} is {kind}; {_NEW_KEY}")
    if os.name != "nt":  # Windows has no POSIX owner and mode bits
        if info.st_uid != os.geteuid():
            raise TrustKeyError(
                f"the key file {path} is owned by user id {info.st_uid}, not by you ({os.geteuid()}): whoever owns "
                f"it can sign runs and snapshots in your name; {_NEW_KEY}"
            )
        if info.st_mode & 0o077:
            raise TrustKeyError(
                f"the key file {path} has mode {stat.S_IMODE(info.st_mode):04o}, open to other users: whoever can "
                f"read or replace it can sign runs and snapshots in your name; chmod 600 {path} if nobody else "
                f"could have read or changed it, else {_NEW_KEY}"
            )
    if info.st_size != _KEY_SIZE:
        raise TrustKeyError(
            f"the key file {path} holds {info.st_size} bytes, not {_KEY_SIZE}: it is not a marljoint key (damaged or "
            f"replaced); {_NEW_KEY}"
        )


def adopt_key(key: bytes) -> None:
    """Makes ``key`` this process's key, instead of the key file's: a Ray actor, which may run on another machine
    without the user's key file, signs and checks the driver's snapshots with the driver's key.

    Args:
        key: the 32 bytes of :func:`user_key` in the driver.

    Raises:
        SnapshotTrustError: if ``key`` is not 32 bytes.
    """
    global _adopted
    if not isinstance(key, bytes) or len(key) != _KEY_SIZE:
        raise SnapshotTrustError(f"a snapshot key is {_KEY_SIZE} bytes, got {type(key).__name__} of {len(key)}")
    _adopted = key


def _create_key(path: Path) -> None:
    """Writes a fresh key to a private temporary file and links it into place, so that a reader never sees a
    partial key and, of processes racing to create it, the first link wins and the others read its key."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = secrets.token_bytes(_KEY_SIZE)
    fd, tmp = tempfile.mkstemp(prefix=".snapshot.key.", dir=path.parent)  # mkstemp opens with mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(key)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process linked its key first: that one is the key
        except OSError:  # a file system without hard links: an exclusive create, where the first one wins too
            _create_exclusively(path, key)
    finally:
        os.unlink(tmp)


def _create_exclusively(path: Path, key: bytes) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "wb") as f:
        f.write(key)
        f.flush()
        os.fsync(f.fileno())


def _tag(payload: bytes, key: bytes) -> bytes:
    return hmac.new(key, payload, hashlib.sha256).digest()


def sign(payload: bytes, key: bytes | None = None) -> bytes:
    """``payload`` with a header and its HMAC-SHA256 tag under ``key`` (the user's key by default).

    Args:
        payload: the bytes to sign (a pickled snapshot).
        key: the secret key; :func:`user_key` when ``None``.

    Returns:
        The signed bytes, which :func:`verify` turns back into ``payload``.
    """
    payload = bytes(payload)
    return _MAGIC + _tag(payload, user_key() if key is None else key) + payload


def text_signature(text: str, key: bytes | None = None) -> str:
    """The HMAC-SHA256 of ``text`` (as UTF-8) under ``key`` (the user's key by default), in hex: how a run's
    ``config.toml`` is signed. A text's signature never equals a snapshot's tag of the same bytes.

    Args:
        text: the text to sign.
        key: the secret key; :func:`user_key` when ``None``.

    Returns:
        64 hex digits; compare them with :func:`hmac.compare_digest`.
    """
    return _tag(_TEXT_CONTEXT + text.encode("utf-8"), user_key() if key is None else key).hex()


def is_signed(data: bytes) -> bool:
    """Whether ``data`` has the layout of :func:`sign`'s output (whoever signed it)."""
    return isinstance(data, (bytes, bytearray)) and bytes(data[: len(_MAGIC)]) == _MAGIC


def verify(data: bytes, key: bytes | None = None) -> bytes:
    """The payload of bytes signed by :func:`sign`, after checking their tag under ``key``; only then may it be
    unpickled.

    Args:
        data: signed bytes.
        key: the secret key; :func:`user_key` when ``None``.

    Returns:
        The payload.

    Raises:
        SnapshotTrustError: for bytes that are not signed, or whose tag does not match (signed under another key,
            or altered): the message says why and names the opt-in.
    """
    if not is_signed(data):
        raise SnapshotTrustError(
            "the env snapshot is not signed, so it was not written by this version of marljoint for this user (or "
            f"was altered) and unpickling it could run code; {_OPT_IN}"
        )
    start = len(_MAGIC) + _TAG_SIZE
    payload = bytes(data[start:])
    if not hmac.compare_digest(bytes(data[len(_MAGIC) : start]), _tag(payload, user_key() if key is None else key)):
        raise SnapshotTrustError(
            f"the env snapshot's signature does not match this user's key ({key_path()}): it was written by another "
            f"user or machine, or altered since, and unpickling it could run code; {_OPT_IN}"
        )
    return payload


def resign(data: bytes, key: bytes | None = None) -> bytes:
    """Signed bytes re-signed under ``key`` (the user's by default), whoever signed them: how a user vouches for a
    snapshot received from someone else. Unsigned bytes are signed as they are.

    Args:
        data: bytes signed under any key, or unsigned bytes.
        key: the secret key; :func:`user_key` when ``None``.

    Returns:
        Bytes that :func:`verify` accepts under ``key``.
    """
    payload = bytes(data[len(_MAGIC) + _TAG_SIZE :]) if is_signed(data) else bytes(data)
    return sign(payload, key)
