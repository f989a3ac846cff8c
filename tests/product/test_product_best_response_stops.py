"""SIGINT and SIGTERM stop ``marljoint psro`` and ``marljoint nfsp`` (runs of the run driver): between iterations
with a checkpoint of the last one, during an iteration at once (it is abandoned, the checkpoint of the last completed
one kept for ``--resume``); a signal that arrives while a run's files are being written waits until they are all
written."""

from __future__ import annotations

import csv
import os
import signal

import pytest
from _product_helpers import run_cli

from marljoint.checkpoint import list_checkpoints
from marljoint.cli import best_response

COMMANDS = {
    "psro": ["psro", "--env", "kuhn_poker_v0", "--br-steps", "256", "--quiet"],
    "nfsp": ["nfsp", "--env", "kuhn_poker_v0", "--num-envs", "4", "--quiet"],
}


def _signal_after(monkeypatch, calls: int, signum: int = signal.SIGTERM) -> None:
    """The run sends itself ``signum`` right after its ``calls``-th iteration is logged (psro's first is its
    iteration 0, the initial population)."""
    real = best_response._progress

    def progress(*args, **kwargs):
        show = real(*args, **kwargs)
        count = {"n": 0}

        def signalling(row):
            show(row)
            count["n"] += 1
            if count["n"] == calls:
                os.kill(os.getpid(), signum)

        return signalling

    monkeypatch.setattr(best_response, "_progress", progress)


def _rows(out) -> list[dict]:
    with open(out / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _checkpointed(out) -> int:
    """The driver's iterations the newest checkpoint holds (one metrics row each)."""
    return int(list_checkpoints(out / "checkpoints")[-1].stem.split("_")[1])


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_sigterm_stops_the_run_with_its_last_iteration_kept_and_it_resumes(command, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    _signal_after(monkeypatch, 2)
    args = [*COMMANDS[command], "--out", str(out), "--iterations", "6"]
    assert run_cli(args) == 143
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"marljoint {command}: stopped by SIGTERM after iteration 2, which is checkpointed. Continue with: "
        f"marljoint {command} --out {out} --resume"
    ]
    rows = _rows(out)
    last = int(rows[-1]["iteration"])
    assert 1 <= last < 6 and _checkpointed(out) == len(rows) == 2
    monkeypatch.undo()
    assert run_cli([command, "--out", str(out), "--resume", "--iterations", str(last + 1), "--quiet"]) == 0
    assert int(_rows(out)[-1]["iteration"]) == last + 1 and _checkpointed(out) == 3


def test_ctrl_c_before_the_first_iteration_ends_writes_nothing(tmp_path, monkeypatch, capsys):
    def interrupted(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        raise AssertionError("the signal did not stop the run")

    monkeypatch.setattr("marljoint.best_response.nfsp.NFSP.step", interrupted)
    out = tmp_path / "run"
    assert run_cli([*COMMANDS["nfsp"], "--out", str(out), "--iterations", "3"]) == 130
    assert capsys.readouterr().err.strip() == (
        "marljoint nfsp: stopped by SIGINT before its first iteration ended; nothing was written"
    )
    assert not out.exists()


def test_a_signal_during_an_iteration_abandons_it_and_keeps_the_last_completed_one(tmp_path, monkeypatch, capsys):
    from marljoint.best_response.psro import PSRO

    real = PSRO.step
    calls = {"n": 0}

    def step(self):
        calls["n"] += 1
        if calls["n"] == 2:  # PSRO's iteration 2: the driver's third
            os.kill(os.getpid(), signal.SIGTERM)
            raise AssertionError("the signal did not stop the iteration")
        return real(self)

    monkeypatch.setattr(PSRO, "step", step)
    out = tmp_path / "run"
    assert run_cli([*COMMANDS["psro"], "--out", str(out), "--iterations", "6"]) == 143
    assert capsys.readouterr().err.strip() == (
        "marljoint psro: stopped by SIGTERM during iteration 3, which was abandoned; the checkpoint of iteration 2, "
        f"the last completed one, is kept. Continue with: marljoint psro --out {out} --resume"
    )
    assert _checkpointed(out) == len(_rows(out)) == 2


def test_a_signal_during_the_writes_waits_until_every_file_is_written(tmp_path, monkeypatch):
    from marljoint.run import rundir

    real = rundir.save_checkpoint
    sent = {"done": False}

    def signalling_save(*args, **kwargs):
        if not sent["done"]:  # the first checkpoint: the signal arrives while it is written
            sent["done"] = True
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(rundir, "save_checkpoint", signalling_save)
    out = tmp_path / "run"
    assert run_cli([*COMMANDS["psro"], "--out", str(out), "--iterations", "6"]) == 143
    assert sent["done"]
    assert _checkpointed(out) == len(_rows(out)) == 1
