"""The README's Python example runs as printed."""

import math
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_python_example_trains(capsys):
    pytest.importorskip("mpe2")
    blocks = _python_blocks()
    assert blocks, "README.md has no python example"
    histories = []
    for block in blocks:
        namespace: dict = {}
        exec(compile(block, str(README), "exec"), namespace)
        histories.append(namespace.get("history"))
    history = next(h for h in histories if h is not None)
    assert history[-1]["env_steps"] >= 20_000
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed and math.isfinite(float(printed[-1]))
