"""Learning-curve plots of run directories (matplotlib, Agg backend, no display needed)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

from marljoint.runlog import METRICS_FILE, read_metrics

__all__ = ["PlottingUnavailable", "image_path", "plot_learning_curve", "plot_runs", "smooth"]


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

    Args:
        run_dirs: run directories (each with a ``metrics.csv``).
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
        FileNotFoundError: for a directory without ``metrics.csv``.
        ValueError: for an unknown column, or labels that do not match the runs.
    """
    out = image_path(out, metric)
    if not run_dirs:
        raise ValueError("plot_runs needs at least one run directory")
    if labels is not None and len(labels) != len(run_dirs):
        raise ValueError(f"got {len(labels)} labels for {len(run_dirs)} runs")
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive integer, got {window!r}")
    series = [_series(Path(d), metric, x) for d in run_dirs]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    try:
        for k, (run_dir, (xs, ys)) in enumerate(zip(run_dirs, series)):
            label = labels[k] if labels is not None else Path(run_dir).resolve().name
            color = f"C{k % 10}"
            ax.plot(xs, ys, color=color, alpha=0.25, linewidth=0.8)
            ax.plot(xs, smooth(ys, window), color=color, linewidth=2.0, label=label)
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
