"""Jobs of data-parallel ranks started as a user starts them (``marljoint train --ranks K``, torchrun): what they
write, that any K resumes any run, and how a job ends when a rank dies."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from marljoint.checkpoint import list_checkpoints, load_checkpoint
from marljoint.run import ranks as ranks_module
from tests.product._product_helpers import newest_checkpoint, resume_args, run_cli, tiny_config, train_args

ITERATION = 64
"""Env steps of one iteration of the tiny runs (4 copies x 16 steps)."""


def _marljoint(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "marljoint", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the newest checkpoint's networks, by name."""
    found: dict[str, torch.Tensor] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            found[prefix] = value
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}/{key}", item)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                walk(f"{prefix}/{i}", item)

    walk("", newest_checkpoint(run_dir)["trainer"]["policies"])
    return found


def _metrics_rows(run_dir: Path) -> list[str]:
    return (run_dir / "metrics.csv").read_text().splitlines()[1:]


@pytest.mark.slow  # about 20 s on 2 cores: two launches of processes importing torch
def test_two_ranks_then_one_rank_end_where_one_process_ends(tmp_path):
    config = tiny_config(tmp_path)
    ranked, single = tmp_path / "ranked", tmp_path / "single"
    args = [a for a in train_args(ranked, config, 2 * ITERATION) if a != "--quiet"]
    done = _marljoint(*args, "--ranks", "2")
    assert done.returncode == 0, done.stderr
    # Rank 0 alone prints and writes: one result line, one "done" line, one run directory.
    assert done.stdout.count("final mean episode return") == 1 and done.stdout.count("\n") == 1
    assert done.stderr.count("done: 2 iterations") == 1
    assert "Traceback" not in done.stderr
    assert len(_metrics_rows(ranked)) == 2
    assert "ranks" not in (ranked / "config.toml").read_text()  # K changes nothing but speed: not a setting
    assert run_cli(resume_args(ranked, 4 * ITERATION)) == 0  # one process continues the run of two
    assert run_cli(train_args(single, config, 4 * ITERATION)) == 0
    assert len(_metrics_rows(ranked)) == 4
    got, want = _weights(ranked), _weights(single)
    assert got.keys() == want.keys() and got
    for name, value in want.items():
        assert torch.allclose(got[name], value, rtol=0, atol=1e-4), name


def _rank_pid(launcher: subprocess.Popen, rank: int) -> int:
    """The process id of ``rank`` among the launcher's children (by the RANK variable torch's launcher gives)."""
    for child in Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split():
        variables = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        if f"RANK={rank}".encode() in variables:
            return int(child)
    raise AssertionError(f"no rank {rank} among the children of {launcher.pid}")


def _wait_for_checkpoint(run_dir: Path, process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not list_checkpoints(run_dir / "checkpoints"):
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline, "no checkpoint written"
        time.sleep(0.1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the ranks' processes in /proc")
def test_a_rank_killed_mid_run_ends_the_job_with_one_line_naming_it(tmp_path):
    out = tmp_path / "run"
    args = train_args(out, tiny_config(tmp_path), 10_000 * ITERATION, "--checkpoint-every", "1", "--ranks", "2")
    launcher = subprocess.Popen([sys.executable, "-m", "marljoint", *args], stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_checkpoint(out, launcher)
        os.kill(_rank_pid(launcher, 1), signal.SIGKILL)
        killed = time.monotonic()
        _, err = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert time.monotonic() - killed < 30  # a dead peer closes its connections: seconds, not the timeout
    assert launcher.returncode == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("marljoint train: error: rank 1 (pid ")
    assert "was killed by SIGKILL, which ended the job of 2 ranks; the last good checkpoint is " in lines[0]
    assert f"continue with: marljoint train --out {out} --resume --ranks 2" in lines[0]
    paths = list_checkpoints(out / "checkpoints")
    assert str(paths[-1]) in lines[0]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [p.name for p in paths]  # no partial file
    for path in paths:
        load_checkpoint(path)
    iteration = int(paths[-1].stem.split("_")[1])
    assert run_cli(resume_args(out, (iteration + 1) * ITERATION)) == 0  # the kept checkpoint continues


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_nodes(args: list[str]) -> list[subprocess.CompletedProcess]:
    """``torchrun --nnodes 2 --nproc-per-node 1`` run twice on this machine (two "nodes") with ``args``."""
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        f"nodes-{port}",
        "-m",
        "marljoint",
        *args,
    ]
    nodes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    done = []
    for node in nodes:
        out, err = node.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(command, node.returncode, out, err))
    return done


@pytest.mark.slow
def test_two_nodes_under_torchrun_train_checkpoint_and_resume(tmp_path):
    out = tmp_path / "run"
    for node in _two_nodes(train_args(out, tiny_config(tmp_path), 2 * ITERATION)):
        assert node.returncode == 0, node.stderr
    assert len(_metrics_rows(out)) == 2 and list_checkpoints(out / "checkpoints")
    for node in _two_nodes(resume_args(out, 4 * ITERATION)):
        assert node.returncode == 0, node.stderr
    assert [row.split(",")[0] for row in _metrics_rows(out)] == ["1", "2", "3", "4"]


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the ranks' processes in /proc")
def test_an_elastic_restart_resumes_from_the_last_checkpoint_by_itself(tmp_path):
    out, reference = tmp_path / "run", tmp_path / "reference"
    config = tiny_config(tmp_path)
    args = train_args(out, config, 6 * ITERATION, "--checkpoint-every", "1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    job = subprocess.Popen(
        [*command, "--max-restarts", "1", "-m", "marljoint", *args], stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for_checkpoint(out, job)
        os.kill(_rank_pid(job, 1), signal.SIGKILL)
        _, err = job.communicate(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, err
    assert [row.split(",")[0] for row in _metrics_rows(out)] == ["1", "2", "3", "4", "5", "6"]
    assert run_cli(train_args(reference, config, 6 * ITERATION, "--checkpoint-every", "1")) == 0
    got, want = _weights(out), _weights(reference)
    for name, value in want.items():
        assert torch.allclose(got[name], value, rtol=0, atol=1e-4), name


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals")
def test_sigint_to_the_launcher_stops_every_rank_after_the_same_iteration(tmp_path):
    out = tmp_path / "run"
    args = train_args(out, tiny_config(tmp_path), 10_000 * ITERATION, "--checkpoint-every", "1000", "--ranks", "2")
    launcher = subprocess.Popen([sys.executable, "-m", "marljoint", *args], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / "metrics.csv").exists() or len(_metrics_rows(out)) < 2:
            assert launcher.poll() is None and time.monotonic() < deadline, launcher.communicate()[1]
            time.sleep(0.1)
        launcher.send_signal(signal.SIGINT)
        _, err = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 130, err
    assert err.count("stopped by SIGINT after iteration") == 1, err
    iteration = int(err.split("stopped by SIGINT after iteration ")[1].split(",")[0])
    assert int(list_checkpoints(out / "checkpoints")[-1].stem.split("_")[1]) == iteration
    assert len(_metrics_rows(out)) == iteration


@pytest.mark.slow  # the launcher's 60 s grace for the hung rank
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the ranks' processes in /proc")
def test_a_rank_that_hangs_ends_the_job_after_the_timeout_naming_it(tmp_path):
    out = tmp_path / "run"
    args = train_args(out, tiny_config(tmp_path), 10_000 * ITERATION, "--checkpoint-every", "1", "--ranks", "2")
    launcher = subprocess.Popen(
        [sys.executable, "-m", "marljoint", *args, "--rank-timeout", "5"], stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for_checkpoint(out, launcher)
        os.kill(_rank_pid(launcher, 1), signal.SIGSTOP)
        stopped = time.monotonic()
        _, err = launcher.communicate(timeout=300)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert time.monotonic() - stopped < 5 + ranks_module.SHUTDOWN_SECONDS + 30
    assert launcher.returncode == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert (
        "rank 1 (pid " in lines[0]
        and "stopped responding: the other ranks waited the process group's timeout " in lines[0]
    )
    assert "(5 s, --rank-timeout)" in lines[0] and "the last good checkpoint is " in lines[0]
