"""mock_v0 with faults switched on from outside, for runs that fail or stall in the middle (used as
``--env _faulty_envs:faulty_mock`` with ``tests/product`` on the path).

The faults are read from environment variables at every step, so a test turns them on for one run and off for its
resume (a resume keeps the run's env kwargs):

- ``FAULTY_ENV_RAISE_AT=N``: a copy raises ``RuntimeError("sensor unplugged")`` at step N of its episode;
  ``FAULTY_ENV_COPY=C`` limits that to copy C (the copy whose first reset has seed ``seed + C``; the runs here use
  seed 0).
- ``FAULTY_ENV_NAN_AT=N``: a copy's first agent receives a NaN reward at step N of its episode (``FAULTY_ENV_COPY``
  limits it as above).
- ``FAULTY_ENV_GATE=DIR`` and ``FAULTY_ENV_GATE_AT=N``: copy 0 stops at step N of its episode, creates
  ``DIR/waiting`` (holding the id of the process that steps it) and waits until ``DIR/release`` exists: a run held
  mid-iteration for as long as a test needs.

Episodes never end (no ``max_cycles``), so the step of the episode is the step of the copy's life.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from marljoint_envs.mock_v0 import MockEnv

GATE_TIMEOUT_S = 300.0
"""A gate never released (a test that failed before releasing it) ends the run instead of hanging."""


class FaultyMock(MockEnv):
    """mock_v0 whose faults the environment variables above switch on."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.copy: int | None = None

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if self.copy is None and seed is not None:
            self.copy = seed
        return super().reset(seed=seed, options=options)

    def step(self, actions: dict[str, Any]) -> Any:
        step = self.timestep + 1
        raise_at = os.environ.get("FAULTY_ENV_RAISE_AT")
        only = os.environ.get("FAULTY_ENV_COPY")
        if raise_at is not None and step == int(raise_at) and (only is None or int(only) == self.copy):
            raise RuntimeError("sensor unplugged")
        gate = os.environ.get("FAULTY_ENV_GATE")
        if gate and self.copy == 0 and step == int(os.environ.get("FAULTY_ENV_GATE_AT", "0")):
            _wait_at(Path(gate))
        obs, rewards, terminated, truncated, infos = super().step(actions)
        nan_at = os.environ.get("FAULTY_ENV_NAN_AT")
        if nan_at is not None and step == int(nan_at) and (only is None or int(only) == self.copy):
            rewards[self.possible_agents[0]] = float("nan")
        return obs, rewards, terminated, truncated, infos


def _wait_at(gate: Path) -> None:
    (gate / "waiting").write_text(str(os.getpid()))
    deadline = time.monotonic() + GATE_TIMEOUT_S
    while not (gate / "release").exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"gate {gate} was never released")
        time.sleep(0.02)


def faulty_mock(**kwargs: Any) -> FaultyMock:
    """The factory: a :class:`FaultyMock` with mock_v0's keyword arguments (2 agents by default)."""
    return FaultyMock(**kwargs)
