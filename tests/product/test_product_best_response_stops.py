"""SIGINT and SIGTERM stop ``marljoint psro`` and ``marljoint nfsp`` at once, whatever an iteration is doing, with the
checkpoint of the last completed iteration kept for ``--resume``; a signal that arrives while a run's files are
being written waits until they are all written."""

from __future__ import annotations

import csv
import os
import signal

import pytest
from _product_helpers import run_cli

from marljoint.cli import best_response
from marljoint.run.migrations import read_nfsp_checkpoint, read_psro_checkpoint

COMMANDS = {
    "psro": ["psro", "--env", "kuhn_poker_v0", "--br-steps", "256", "--quiet"],
    "nfsp": ["nfsp", "--env", "kuhn_poker_v0", "--num-envs", "4", "--quiet"],
}
READERS = {"psro": read_psro_checkpoint, "nfsp": read_nfsp_checkpoint}


def _signal_after(monkeypatch, calls: int, signum: int = signal.SIGTERM) -> None:
    """The run sends itself ``signum`` right after its ``calls``-th record (iteration ``calls - 1`` for psro,
    which records once before its first iteration; ``calls`` for nfsp)."""
    real = best_response._recorder

    def recorder(*args, **kwargs):
        record = real(*args, **kwargs)
        count = {"n": 0}

        def signalling(row):
            record(row)
            count["n"] += 1
            if count["n"] == calls:
                os.kill(os.getpid(), signum)

        return signalling

    monkeypatch.setattr(best_response, "_recorder", recorder)


def _rows(out) -> int:
    with open(out / "metrics.csv", newline="") as f:
        return len(list(csv.DictReader(f)))


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_sigterm_stops_the_run_with_its_last_iteration_kept_and_it_resumes(command, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    _signal_after(monkeypatch, 2)
    args = [*COMMANDS[command], "--out", str(out), "--iterations", "6"]
    assert run_cli(args) == 143
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"marljoint {command}: stopped by SIGTERM; the checkpoint of its last completed iteration is kept. Continue "
        f"with: marljoint {command} --env kuhn_poker_v0 --out {out} --resume"
    ]
    history = READERS[command](out)["history"]
    last = history[-1]["iteration"]
    assert 1 <= last < 6 and _rows(out) == len(history)
    monkeypatch.undo()
    assert run_cli([*COMMANDS[command], "--out", str(out), "--resume", "--iterations", str(last + 1)]) == 0
    assert READERS[command](out)["history"][-1]["iteration"] == last + 1


def test_ctrl_c_before_the_first_iteration_ends_writes_nothing(tmp_path, monkeypatch, capsys):
    def interrupted(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        raise AssertionError("the signal did not stop the run")

    monkeypatch.setattr("marljoint.best_response.nfsp.NFSP.run", interrupted)
    out = tmp_path / "run"
    assert run_cli([*COMMANDS["nfsp"], "--out", str(out), "--iterations", "3"]) == 130
    assert capsys.readouterr().err.strip() == (
        "marljoint nfsp: stopped by SIGINT before its first iteration ended; nothing was written"
    )
    assert not out.exists()


def test_a_signal_during_the_writes_waits_until_every_file_is_written(tmp_path, monkeypatch, capsys):
    real = best_response.write_metrics_csv
    sent = {"done": False}

    def signalling_write(*args, **kwargs):
        if not sent["done"] and len(args[0]) == 2:  # the second iteration's row: the checkpoint is written next
            sent["done"] = True
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(best_response, "write_metrics_csv", signalling_write)
    out = tmp_path / "run"
    assert run_cli([*COMMANDS["psro"], "--out", str(out), "--iterations", "6"]) == 143
    assert sent["done"]
    assert len(read_psro_checkpoint(out)["history"]) == _rows(out) == 2
