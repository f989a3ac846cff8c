"""The code passes the project's lint rules (``[tool.ruff.lint]`` in pyproject.toml)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    pytest.importorskip("ruff", reason="ruff comes with the [dev] extra")
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "marljoint", "tests", "benchmarks", "envs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
