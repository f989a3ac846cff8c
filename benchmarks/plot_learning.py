"""Learning curves of ``benchmarks/learning.py`` runs: mean and min-max band over seeds, one panel per preset.

Usage::

    python benchmarks/plot_learning.py results/curves --out docs/img/learning_curves.png
"""

from __future__ import annotations

import argparse
import csv
import re
from collections import defaultdict
from pathlib import Path

import numpy as np


def read_curves(directory: Path) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    """``{preset: [(env_steps, episode_return_mean) per seed]}`` from ``<preset>_seed<k>.csv`` files."""
    curves: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for path in sorted(directory.glob("*_seed*.csv")):
        match = re.fullmatch(r"(.+)_seed\d+", path.stem)
        if match is None:
            continue
        with path.open() as f:
            rows = [r for r in csv.DictReader(f) if r["episode_return_mean"] not in ("", "nan")]
        steps = np.array([float(r["env_steps"]) for r in rows])
        returns = np.array([float(r["episode_return_mean"]) for r in rows])
        curves[match.group(1)].append((steps, returns))
    return dict(curves)


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average (shorter at the start)."""
    cumulative = np.cumsum(np.insert(values, 0, 0.0))
    out = np.empty_like(values)
    for i in range(len(values)):
        lo = max(0, i + 1 - window)
        out[i] = (cumulative[i + 1] - cumulative[lo]) / (i + 1 - lo)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directories", type=Path, nargs="+", help="curves directories")
    parser.add_argument("--presets", nargs="*", help="only these presets (default: all found)")
    parser.add_argument("--window", type=int, default=20, help="moving-average window in iterations")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for directory in args.directories:
        for preset, runs in read_curves(directory).items():
            curves[preset].extend(runs)
    names = [p for p in (args.presets or sorted(curves)) if p in curves]
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.4), squeeze=False)
    for ax, name in zip(axes[0], names):
        runs = curves[name]
        grid = np.linspace(max(r[0][0] for r in runs), min(r[0][-1] for r in runs), 200)
        table = np.stack([np.interp(grid, steps, smooth(returns, args.window)) for steps, returns in runs])
        ax.plot(grid, table.mean(axis=0), label=f"mean of {len(runs)} seed{'s' * (len(runs) > 1)}")
        ax.fill_between(grid, table.min(axis=0), table.max(axis=0), alpha=0.25, label="min-max over seeds")
        ax.set_title(name)
        ax.set_xlabel("env steps")
        ax.set_ylabel("training episode return (per agent)")
        ax.legend(loc="lower right", fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
