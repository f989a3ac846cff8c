"""Learning-curve plots of run directories (matplotlib, Agg backend, no display needed)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from marljoint.run.runlog import METRICS_FILE, read_metrics
from marljoint.run.stats import confidence_interval

__all__ = ["PlottingUnavailable", "image_path", "plot_learning_curve", "plot_runs", "run_group", "smooth"]


class PlottingUnavailable(RuntimeError):
    """matplotlib is not installed."""


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise PlottingUnavailable("matplotlib is not installed (pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def smooth(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average over the finite values of the last ``window`` entries (``nan`` if none).

    Example:
        >>> smooth([1.0, 3.0, float("nan"), 5.0], 2)
        [1.0, 2.0, 3.0, 5.0]
    """
    out = []
    for k in range(len(values)):
        finite = [v for v in values[max(0, k - window + 1) : k + 1] if math.isfinite(v)]
        out.append(sum(finite) / len(finite) if finite else math.nan)
    return out


def run_group(run_dir: str | os.PathLike[str]) -> list[Path]:
    """The runs behind one argument of ``marljoint plot``: the directory itself if it holds a run, else the runs in
    its subdirectories (the seeds of ``marljoint train --seeds``), in name order.

    Raises:
        FileNotFoundError: if neither it nor any subdirectory holds a ``metrics.csv``.
    """
    path = Path(run_dir)
    if (path / METRICS_FILE).is_file():
        return [path]
    members = sorted(p for p in path.iterdir() if (p / METRICS_FILE).is_file()) if path.is_dir() else []
    if not members:
        raise FileNotFoundError(f"{run_dir} holds no {METRICS_FILE}, nor do its subdirectories; is it a marljoint run?")
    return members


def _refuse_missing(run_dirs: Sequence[str | os.PathLike[str]]) -> None:
    """Refuses, in one message naming each, the run directories that do not exist."""
    missing = [str(d) for d in run_dirs if not Path(d).exists()]
    if len(missing) == 1:
        raise FileNotFoundError(
            f"run directory {missing[0]} does not exist; give the --out directory of a marljoint train run"
        )
    if missing:
        raise FileNotFoundError(
            f"run directories {', '.join(missing)} do not exist; give the --out directories of marljoint train runs"
        )


def _group_series(members: Sequence[Path], metric: str, x: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, mean, half-width of the 95% CI)`` over a group's runs, on the rows they all have."""
    series = [_series(m, metric, x) for m in members]
    length = min(len(xs) for xs, _ in series)
    xs = np.asarray(series[0][0][:length], dtype=np.float64)
    values = np.asarray([ys[:length] for _, ys in series], dtype=np.float64)
    stats = [confidence_interval(values[:, k][np.isfinite(values[:, k])]) for k in range(length)]
    return xs, np.array([m for m, _ in stats]), np.array([h for _, h in stats])


def _series(run_dir: Path, metric: str, x: str) -> tuple[list[float], list[float]]:
    path = run_dir / METRICS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} holds no {METRICS_FILE}; is it a marljoint run directory?")
    columns, rows = read_metrics(path)
    for name in (metric, x):
        if name not in columns:
            raise ValueError(f"{path} has no column {name!r}; columns: {columns}")
    return [r[x] for r in rows], [r[metric] for r in rows]


def plot_runs(
    run_dirs: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    metric: str = "episode_return_mean",
    x: str = "env_steps",
    window: int = 10,
    labels: Sequence[str] | None = None,
    title: str | None = None,
) -> Path:
    """Plots ``metric`` against ``x`` for several runs in one PNG: raw values faint, a moving average bold.

    An argument whose directory holds runs in subdirectories instead (the seeds of ``marljoint train --seeds``) is
    drawn as one curve: the mean over its runs, and a band of the 95% Student-t confidence interval of the mean.

    Args:
        run_dirs: run directories (each with a ``metrics.csv``), or directories of such runs.
        out: the image to write; a directory (existing, or written with a trailing ``/``) gets
            ``<metric>.png`` inside it, and a name without a suffix gets ``.png``.
        metric: a metrics.csv column.
        x: the x-axis column (``env_steps``, ``agent_steps``, ``wall_time`` or ``iteration``).
        window: moving-average window in iterations (1: no smoothing).
        labels: legend labels (the directory names when ``None``).
        title: the figure title.

    Returns:
        The path written.

    Raises:
        PlottingUnavailable: without matplotlib.
        FileNotFoundError: for run directories that do not exist (naming every one), or a directory without
            ``metrics.csv``.
        ValueError: for an unknown column, or labels that do not match the runs.
    """
    out = image_path(out, metric)
    if not run_dirs:
        raise ValueError("plot_runs needs at least one run directory")
    if labels is not None and len(labels) != len(run_dirs):
        raise ValueError(f"got {len(labels)} labels for {len(run_dirs)} runs")
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive integer, got {window!r}")
    _refuse_missing(run_dirs)
    groups = [run_group(d) for d in run_dirs]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    try:
        for k, (run_dir, members) in enumerate(zip(run_dirs, groups)):
            label = labels[k] if labels is not None else Path(run_dir).resolve().name
            _draw_curve(ax, run_dir, members, metric, x, window, label, f"C{k % 10}")
        ax.set_xlabel(x)
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        if title:
            ax.set_title(title)
        ax.legend(loc="best", fontsize="small")
        fig.tight_layout()
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out)
    finally:
        plt.close(fig)
    return out


def _draw_curve(
    ax: Any,
    run_dir: str | os.PathLike[str],
    members: Sequence[Path],
    metric: str,
    x: str,
    window: int,
    label: str,
    color: str,
) -> None:
    """One argument's curve on ``ax``: a run's raw values faint and their moving average bold, or a group's mean
    over its runs with the band of its confidence interval."""
    if len(members) == 1 and Path(members[0]) == Path(run_dir):
        xs, ys = _series(members[0], metric, x)
        ax.plot(xs, ys, color=color, alpha=0.25, linewidth=0.8)
        ax.plot(xs, smooth(ys, window), color=color, linewidth=2.0, label=label)
        return
    xs, mean, half = _group_series(members, metric, x)
    centre = np.asarray(smooth(list(mean), window))
    spread = np.nan_to_num(np.asarray(smooth(list(half), window)))
    ax.fill_between(xs, centre - spread, centre + spread, color=color, alpha=0.2, linewidth=0)
    ax.plot(xs, centre, color=color, linewidth=2.0, label=f"{label} (mean of {len(members)}, 95% CI)")


def image_path(out: str | os.PathLike[str], metric: str) -> Path:
    """Where :func:`plot_runs` writes for ``out``: ``out/<metric>.png`` for a directory (an existing one, or a path
    ending in ``/``), ``out.png`` for a name without a suffix, else ``out`` itself."""
    text = os.fspath(out)
    path = Path(text)
    if text.endswith(("/", os.sep)) or path.is_dir():
        return path / f"{metric.replace('/', '_')}.png"
    return path if path.suffix else path.with_name(path.name + ".png")


def plot_learning_curve(run_dir: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> Path:
    """Writes one run's learning curve (mean episode return against env steps), by default to
    ``learning_curve.png`` in the run directory.

    Raises:
        PlottingUnavailable: without matplotlib.
    """
    run_dir = Path(run_dir)
    out = run_dir / "learning_curve.png" if out is None else out
    return plot_runs([run_dir], out, title=f"{run_dir.resolve().name}: mean episode return")
