"""Logging of a training run: the metrics CSV, TensorBoard event files (when installed) and the progress display.

The CSV has one row per iteration and a fixed header; the names are documented in ``docs/metrics.md``.
"""

from __future__ import annotations

import csv
import math
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from marljoint.checkpoint import atomic_write_bytes
from marljoint.run.rundir import open_run_file, run_path

__all__ = [
    "METRICS_FILE",
    "MetricsLog",
    "Progress",
    "read_metrics",
    "tensorboard_available",
    "write_csv",
    "write_metrics_csv",
]

METRICS_FILE = "metrics.csv"
"""Name of the metrics file in a run directory."""

TENSORBOARD_DIR = "tensorboard"
"""Folder of the TensorBoard event files in a run directory."""


def tensorboard_available() -> bool:
    """Whether ``torch.utils.tensorboard`` can write event files (the ``tensorboard`` package is installed)."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return False
    return True


def read_metrics(path: str | os.PathLike[str]) -> tuple[list[str], list[dict[str, float]]]:
    """Reads a metrics CSV.

    Returns:
        ``(columns, rows)``; every value is a float (``nan`` where the cell is empty or ``nan``).

    Raises:
        FileNotFoundError: if the file does not exist.
    """
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        columns = list(reader.fieldnames or [])
        rows = [{k: _float(v) for k, v in row.items() if k is not None} for row in reader]
    return columns, rows


def _float(text: str | None) -> float:
    if text is None or text == "":
        return math.nan
    try:
        return float(text)
    except ValueError:
        return math.nan


class WandbLog:
    """Logs every metrics row to a Weights & Biases run as well (``pip install "marljoint[wandb]"``).

    The W&B run lives in ``RUN_DIR/wandb``; its id is kept in ``RUN_DIR/wandb_id`` so that a resumed run continues
    the same W&B run. Without network, set ``WANDB_MODE=offline`` (and ``wandb sync`` later).

    Args:
        project: the W&B project.
        run_dir: the run directory (its name names the W&B run).
        config: the run's settings, recorded as the W&B config.

    Raises:
        ImportError: if wandb is not installed (the message gives the install command).
    """

    def __init__(self, project: str, run_dir: str | os.PathLike[str], config: Mapping[str, Any]) -> None:
        try:
            import wandb
        except ImportError:
            raise ImportError('--wandb needs Weights & Biases: pip install "marljoint[wandb]"') from None
        run_dir = Path(run_dir)
        run_path(run_dir, "wandb")  # W&B writes there: never into a folder a link names
        id_file = run_path(run_dir, "wandb_id")
        run_id = id_file.read_text().strip() if id_file.is_file() else secrets.token_hex(4)
        atomic_write_bytes((run_id + "\n").encode(), id_file)
        self.run = wandb.init(
            project=project,
            dir=str(run_dir),
            id=run_id,
            name=run_dir.resolve().name,
            config=dict(config),
            resume="allow",
        )

    def log(self, row: Mapping[str, Any]) -> None:
        """Logs the finite numbers of one metrics row at its ``env_steps``."""
        values = {k: v for k, v in row.items() if isinstance(v, (int, float)) and math.isfinite(v)}
        self.run.log(values, step=int(row.get("env_steps", row.get("iteration", 0))))

    def close(self) -> None:
        """Finishes the W&B run."""
        self.run.finish()


class MetricsLog:
    """Appends one row per iteration to ``metrics.csv`` and, when available, to TensorBoard.

    The header is fixed by the first row. Keys that first appear later are added by rewriting the file with a
    wider header (earlier rows get empty cells); keys missing from a row are left empty.

    Args:
        run_dir: the run directory.
        tensorboard: write TensorBoard event files too (ignored when ``tensorboard`` is not installed).
        keep_until: when resuming, keep only the existing rows with ``iteration <= keep_until`` (the rows after
            the checkpoint are produced again); ``None`` starts a new file.
        wandb: also log every row to this :class:`WandbLog` (closed with this log).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        tensorboard: bool = True,
        keep_until: int | None = None,
        wandb: WandbLog | None = None,
    ) -> None:
        self.path = run_path(run_dir, METRICS_FILE)
        self._wandb = wandb
        self._columns: list[str] = []
        rows: list[dict[str, Any]] = []
        if keep_until is not None and self.path.exists():
            with open(self.path, newline="") as f:
                reader = csv.DictReader(f)
                self._columns = list(reader.fieldnames or [])
                # Rows are kept as the text they were written as, so a resumed file matches an uninterrupted one.
                rows = [r for r in reader if _float(r.get("iteration")) <= keep_until]
        self._rewrite(rows)
        self._writer: Any = None
        if tensorboard and tensorboard_available():
            from torch.utils.tensorboard import SummaryWriter

            # Events are logged at env_steps: a resume discards those after the last row it keeps.
            purge = None
            if keep_until is not None:
                purge = int(max((_float(r.get("env_steps")) for r in rows), default=-1)) + 1
            log_dir = run_path(run_dir, TENSORBOARD_DIR)  # never event files in a folder a link names
            self._writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge)

    @property
    def columns(self) -> list[str]:
        """The CSV header."""
        return list(self._columns)

    def log(self, metrics: Mapping[str, Any]) -> None:
        """Appends one iteration's metrics (numbers) to the CSV and TensorBoard."""
        row = dict(metrics)
        new = [k for k in row if k not in self._columns]
        if new:
            # Rare (a metric that first appears late): the file is rewritten from disk with the wider header, so
            # no row is held in memory however long the run.
            rows = self._written_rows()
            self._columns.extend(new)
            self._rewrite([*rows, row])
        else:
            with open_run_file(self.path) as f:  # a link planted since the run started is refused, not followed
                csv.DictWriter(f, self._columns).writerow(row)
        if self._writer is not None:
            step = int(row.get("env_steps", row.get("iteration", 0)))
            for key, value in row.items():
                if key not in ("iteration", "env_steps") and isinstance(value, (int, float)) and math.isfinite(value):
                    self._writer.add_scalar(key, value, step)
            self._writer.flush()
        if self._wandb is not None:
            self._wandb.log(row)

    def _written_rows(self) -> list[dict[str, str]]:
        with open(self.path, newline="") as f:
            return list(csv.DictReader(f))

    def _rewrite(self, rows: list[dict[str, Any]]) -> None:
        write_csv(self.path, self._columns, rows)

    def close(self) -> None:
        """Closes the TensorBoard writer and the W&B run."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._wandb is not None:
            self._wandb.close()
            self._wandb = None


class Progress:
    """A progress display: a redrawn bar on a terminal, plain lines otherwise.

    Shows env steps done / total, agent-steps per second, the estimated time left and the latest mean episode
    return.

    Args:
        total_steps: env steps the run will reach.
        start_steps: env steps already done (when resuming).
        stream: where to write (standard error by default).
        enabled: False shows nothing.
        line_interval: seconds between plain lines when ``stream`` is not a terminal.
    """

    def __init__(
        self,
        total_steps: int,
        start_steps: int = 0,
        stream: TextIO | None = None,
        enabled: bool = True,
        line_interval: float = 10.0,
    ) -> None:
        self.total = total_steps
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.line_interval = line_interval
        self._start_steps = start_steps
        self._start = time.perf_counter()
        self._last_line = -math.inf
        self._last_return = math.nan

    def update(self, env_steps: int, sps: float, episode_return: float, force: bool = False) -> None:
        """Shows the state after an iteration (``force`` prints a plain line even if one was printed recently)."""
        if not self.enabled:
            return
        if math.isfinite(episode_return):
            self._last_return = episode_return
        now = time.perf_counter()
        done = env_steps - self._start_steps
        rate = done / (now - self._start) if now > self._start else 0.0
        eta = (self.total - env_steps) / rate if rate > 0 else math.nan
        text = (
            f"{env_steps:,}/{self.total:,} steps  {sps:,.0f} agent-steps/s  ETA {_duration(eta)}  "
            f"return {self._last_return:.4g}"
        )
        if self.tty:
            width = 24
            filled = int(width * min(env_steps / self.total, 1.0)) if self.total else width
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {text}\x1b[K")
            self.stream.flush()
        elif force or now - self._last_line >= self.line_interval:
            self._last_line = now
            self.stream.write(text + "\n")
            self.stream.flush()

    def close(self) -> None:
        """Ends the redrawn line on a terminal."""
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def ordered(keys: Iterable[str], first: Iterable[str]) -> list[str]:
    """``keys`` with the names in ``first`` moved to the front, in that order."""
    keys = list(keys)
    head = [k for k in first if k in keys]
    return head + [k for k in keys if k not in head]


def write_csv(path: str | os.PathLike[str], columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
    """Writes ``rows`` under the header ``columns`` (none when there are no columns) atomically: into a temporary
    file beside ``path``, renamed over it once complete, so a reader never sees half a file. Rows lacking a column
    leave it empty.

    Args:
        path: the CSV file.
        columns: the header, in order; every key of every row must be one of them.
        rows: the rows, as mappings of column to value.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(columns))
            if columns:
                writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_metrics_csv(
    rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str], first: Sequence[str] = ()
) -> None:
    """Writes metric rows to a CSV file atomically (:func:`write_csv`); the columns are ``first`` then every other
    key, sorted. Rows lacking a column leave it empty.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "m.csv"
        >>> write_metrics_csv([{"b": 1, "iteration": 0}, {"iteration": 1, "a": float("nan")}], path, ["iteration"])
        >>> path.read_text().splitlines()
        ['iteration,a,b', '0,,1', '1,nan,']
    """
    keys = {key for row in rows for key in row}
    columns = [c for c in first if c in keys] + sorted(keys - set(first))
    write_csv(path, columns, rows)
