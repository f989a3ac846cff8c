"""Nothing a run does writes or deletes outside its run directory, whatever symbolic links or empty paths it is
handed: a lock file, a run file or a run folder that is a link is refused (one line naming the link and the fix)
before anything is written, links planted while a run writes are refused rather than followed, an empty --out is
refused by every command that takes one, and --force replaces only a marljoint run.

Every case keeps a sentinel outside the run directory (a notes file and another run's checkpoints) and checks that
it still exists, byte for byte, afterwards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import threading
from pathlib import Path

import pytest
from _product_helpers import run_cli

from marljoint.cli.args import out_path
from marljoint.run.errors import RunError
from marljoint.run.export import export_run
from marljoint.run.lock import LOCK_FILE, RunLock, RunLocked
from marljoint.run.rundir import is_run, open_run_file
from marljoint.run.runlog import MetricsLog
from marljoint.run.sweep import (
    LOG_FILE,
    SWEEP_CSV,
    SWEEP_PLOT,
    RunJob,
    SweepRow,
    check_before_start,
    plot_sweep,
    run_job,
    write_sweep_csv,
)
from marljoint.run.train import RunSpec, train_run

TINY = {
    "env": "mock_v0",
    "env_kwargs": {"max_cycles": 8},  # episodes that end, for eval
    "num_envs": 2,
    "rollout_steps": 16,
    "minibatch_size": 32,
    "n_epochs": 1,
    "hidden_sizes": [16],
    "checkpoint_every": 1,
    "keep_checkpoints": 1,
}
ITERATION = 32  # env steps: 2 copies x 16 steps
LINKED_NAMES = [
    "checkpoints",
    "config.toml",
    "metrics.csv",
    "train.log",
    "tensorboard",
    "learning_curve.png",
    "wandb",
    "wandb_id",
    "export",
]


def _spec(iterations: int = 2) -> RunSpec:
    return RunSpec.from_dict({**TINY, "total_steps": iterations * ITERATION})


def _cli_config(directory: Path) -> list[str]:
    path = directory / "tiny.toml"
    path.write_text("rollout_steps = 16\nminibatch_size = 32\nn_epochs = 1\nhidden_sizes = [16]\n")
    return [
        "--env", "mock_v0", "--env-kwargs", '{"max_cycles": 8}', "--num-envs", "2", "--total-steps", str(2 * ITERATION),
        "--config", str(path),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished two-iteration run, copied by the tests that need one."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    train_run(_spec(), run_dir, progress=False)
    return run_dir


class Sentinel:
    """Files outside the run directory: a notes file, a folder, and another run's checkpoints."""

    def __init__(self, root: Path, trained: Path) -> None:
        self.root = root / "outside"
        self.root.mkdir()
        (self.root / "notes.txt").write_bytes(b"my notes\n\x00\xff")
        (self.root / "folder").mkdir()
        (self.root / "folder" / "keep.txt").write_bytes(b"keep me")
        shutil.copytree(trained / "checkpoints", self.root / "checkpoints")
        self.before = self._snapshot()

    def _snapshot(self) -> dict[Path, bytes]:
        return {p.relative_to(self.root): p.read_bytes() for p in sorted(self.root.rglob("*")) if p.is_file()}

    def target(self, name: str) -> Path:
        """What a link named ``name`` in a run directory points to: a folder for the run's folders."""
        if name == "checkpoints":
            return self.root / "checkpoints"
        return self.root / ("folder" if name in ("tensorboard", "wandb", "export") else "notes.txt")

    def assert_intact(self) -> None:
        assert self._snapshot() == self.before
        assert sorted(p.name for p in self.root.iterdir()) == ["checkpoints", "folder", "notes.txt"]


@pytest.fixture()
def sentinel(tmp_path, trained) -> Sentinel:
    return Sentinel(tmp_path, trained)


def _copy(trained: Path, tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir)
    return run_dir


def _link(run_dir: Path, name: str, target: Path) -> Path:
    path = run_dir / name
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target, target_is_directory=target.is_dir())
    return path


# The lock file.


def test_a_lock_file_that_is_a_link_is_refused_and_its_target_survives(tmp_path, sentinel):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    link = _link(run_dir, LOCK_FILE, sentinel.target("notes"))
    with pytest.raises(RunError, match=r"lock file .*\.marljoint\.lock is a symbolic link .*remove the link \(rm "):
        RunLock(run_dir).acquire()
    assert link.is_symlink()
    sentinel.assert_intact()


def test_a_lock_path_that_is_not_a_regular_file_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / LOCK_FILE).mkdir(parents=True)
    with pytest.raises(RunError, match=r"lock file .*\.marljoint\.lock is not a regular file; remove it"):
        RunLock(run_dir).acquire()
    assert (run_dir / LOCK_FILE).is_dir()


def test_release_deletes_the_lock_file_only_never_what_replaced_it(tmp_path, sentinel):
    run_dir = tmp_path / "run"
    lock = RunLock(run_dir).acquire()
    planted = tmp_path / "planted"
    planted.symlink_to(sentinel.target("notes"))
    os.replace(planted, run_dir / LOCK_FILE)  # a link takes the lock file's place while the lock is held
    lock.release()
    assert (run_dir / LOCK_FILE).is_symlink()
    sentinel.assert_intact()


def test_two_names_of_one_directory_share_one_lock(tmp_path):
    run_dir = tmp_path / "run"
    alias = tmp_path / "alias"
    run_dir.mkdir()
    alias.symlink_to(run_dir, target_is_directory=True)
    refused: list[BaseException] = []

    def other_thread() -> None:
        try:
            RunLock(alias).acquire()
        except RunLocked as exc:
            refused.append(exc)

    with RunLock(run_dir):
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
    assert len(refused) == 1
    assert not (run_dir / LOCK_FILE).exists()


@pytest.mark.parametrize("mode", ["new", "force", "resume"])
def test_train_with_a_linked_lock_file_is_refused(tmp_path, sentinel, trained, mode):
    run_dir = _copy(trained, tmp_path) if mode != "new" else tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    _link(run_dir, LOCK_FILE, sentinel.target("notes"))
    with pytest.raises(RunError, match=r"\.marljoint\.lock is a symbolic link"):
        train_run(_spec(3), run_dir, resume=mode == "resume", force=mode == "force", progress=False)
    sentinel.assert_intact()


# Run files and folders that are links, found before the run writes anything.


@pytest.mark.parametrize("mode", ["new", "force", "resume"])
@pytest.mark.parametrize("name", LINKED_NAMES)
def test_a_run_file_or_folder_that_is_a_link_is_refused_before_anything_is_written(
    tmp_path, sentinel, trained, name, mode
):
    run_dir = _copy(trained, tmp_path) if mode != "new" else tmp_path / "run"
    link = _link(run_dir, name, sentinel.target(name))
    before = sorted(p.name for p in run_dir.iterdir())
    with pytest.raises(RunError, match=rf"{name} is a symbolic link \(to .*\); .*remove the link \(rm .*{name}\)"):
        train_run(_spec(3), run_dir, resume=mode == "resume", force=mode == "force", progress=False)
    assert link.is_symlink() and sorted(p.name for p in run_dir.iterdir()) == before
    sentinel.assert_intact()


def test_force_from_the_command_line_with_another_runs_checkpoints_linked_is_one_line(tmp_path, sentinel, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _link(run_dir, "checkpoints", sentinel.target("checkpoints"))
    status = run_cli(["train", *_cli_config(tmp_path), "--out", str(run_dir), "--force", "--quiet"])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("marljoint train: error: ") and "checkpoints is a symbolic link" in err
    sentinel.assert_intact()


def test_seeds_with_a_linked_train_log_are_refused_before_any_run_starts(tmp_path, sentinel, capsys):
    out = tmp_path / "seeds"
    _link(out / "seed_0", LOG_FILE, sentinel.target("notes"))
    status = run_cli(["train", *_cli_config(tmp_path), "--seeds", "0", "1", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert status == 2 and "train.log is a symbolic link" in err
    assert not (out / "seed_1").exists()
    sentinel.assert_intact()


def test_a_run_of_several_with_a_linked_train_log_fails_alone_and_writes_nothing_through_it(tmp_path, sentinel):
    run_dir = tmp_path / "run"
    _link(run_dir, LOG_FILE, sentinel.target("notes"))
    outcome = run_job(RunJob(_spec(), run_dir))
    assert not outcome.ok and "train.log is a symbolic link" in outcome.error
    with pytest.raises(RunError, match="train.log is a symbolic link"):
        check_before_start([RunJob(_spec(), run_dir)], resume=False, force=False)
    sentinel.assert_intact()


def test_psro_and_nfsp_refuse_a_linked_metrics_file(tmp_path, sentinel, capsys):
    for command in ("psro", "nfsp"):
        out = tmp_path / command
        _link(out, "metrics.csv", sentinel.target("notes"))
        _link(out, "config.toml", sentinel.target("notes"))
        argv = [command, "--env", "kuhn_poker_v0", "--iterations", "1", "--out", str(out), "--force", "--quiet"]
        status = run_cli(argv)
        err = capsys.readouterr().err
        assert status == 2 and f"marljoint {command}: error: " in err and "is a symbolic link" in err
    sentinel.assert_intact()


# Links planted while the run writes: the writers check again and refuse.


def test_a_checkpoint_folder_linked_mid_run_is_refused_and_the_rotation_deletes_nothing_of_its_target(
    tmp_path, sentinel
):
    run_dir = tmp_path / "run"

    def plant(row):
        if row["iteration"] == 1:  # before the first checkpoint: the rotation (keep 1) would empty the target
            _link(run_dir, "checkpoints", sentinel.target("checkpoints"))

    with pytest.raises(RunError, match=r"checkpoints is a symbolic link"):
        train_run(_spec(), run_dir, progress=False, on_iteration=plant)
    sentinel.assert_intact()


def test_a_metrics_file_linked_mid_run_is_refused_not_appended_to(tmp_path, sentinel):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    log = MetricsLog(run_dir, tensorboard=False)
    log.log({"iteration": 1, "return": 0.5})
    _link(run_dir, "metrics.csv", sentinel.target("notes"))
    with pytest.raises(RunError, match=r"metrics.csv is a symbolic link .*remove the link"):
        log.log({"iteration": 2, "return": 0.75})
    log.close()
    sentinel.assert_intact()


def test_a_learning_curve_linked_mid_run_is_refused(tmp_path, sentinel):
    run_dir = tmp_path / "run"

    def plant(row):
        if row["iteration"] == 2:
            _link(run_dir, "learning_curve.png", sentinel.target("notes"))

    with pytest.raises(RunError, match=r"learning_curve.png is a symbolic link"):
        train_run(_spec(), run_dir, progress=False, on_iteration=plant)
    sentinel.assert_intact()


@pytest.mark.parametrize("append", [True, False])
def test_a_run_file_opened_for_writing_is_never_a_link_or_a_special_file(tmp_path, sentinel, append):
    link = _link(tmp_path, LOG_FILE, sentinel.target("notes"))
    with pytest.raises(RunError, match=r"train.log is a symbolic link .*remove the link"):
        open_run_file(link, append=append)
    link.unlink()
    link.mkdir()
    with pytest.raises(IsADirectoryError):
        open_run_file(link, append=append)
    sentinel.assert_intact()


def test_a_sweeps_table_and_plot_are_never_written_through_a_link(tmp_path, sentinel):
    rows = [SweepRow({"lr": "1e-3"}, -1.5, 0.25, 3, 0)]
    for name, write in ((SWEEP_CSV, write_sweep_csv), (SWEEP_PLOT, plot_sweep)):
        link = _link(tmp_path / "sweep", name, sentinel.target("notes"))
        with pytest.raises(RunError, match=rf"{name} is a symbolic link .*remove the link"):
            write(link, rows)
    sentinel.assert_intact()
    (tmp_path / "sweep" / SWEEP_CSV).unlink()
    write_sweep_csv(tmp_path / "sweep" / SWEEP_CSV, rows)
    assert (tmp_path / "sweep" / SWEEP_CSV).read_text().splitlines() == [
        "lr,final_return_mean,final_return_ci95,n,failed",
        "1e-3,-1.5,0.25,3,0",
    ]


# Readers and exports of a finished run.


@pytest.mark.parametrize("name", ["export", "export/torchscript", "export/torchscript/group_0.pt"])
def test_export_into_the_run_directory_refuses_links(tmp_path, sentinel, trained, name):
    run_dir = _copy(trained, tmp_path)
    _link(run_dir, name, sentinel.target("export" if not name.endswith(".pt") else "notes"))
    with pytest.raises(RunError, match=r"is a symbolic link .*remove the link"):
        export_run(run_dir, "torchscript")
    sentinel.assert_intact()


def test_eval_and_export_leave_linked_targets_alone(tmp_path, sentinel, trained, capsys):
    run_dir = _copy(trained, tmp_path)
    for name in (LOCK_FILE, "metrics.csv", "learning_curve.png", "tensorboard"):
        _link(run_dir, name, sentinel.target(name))
    assert run_cli(["eval", str(run_dir), "--episodes", "1"]) == 0
    out = tmp_path / "exported"
    assert run_cli(["export", str(run_dir), "--out", str(out), "--quiet"]) == 0
    assert (out / "manifest.json").is_file()
    capsys.readouterr()
    sentinel.assert_intact()


# Empty --out, and --force on what is not a run.


@pytest.mark.parametrize(
    "command",
    [
        ["train"],
        ["tune", "--param", "learning_rate=1e-4:1e-3"],
        ["psro", "--env", "kuhn_poker_v0"],
        ["nfsp", "--env", "kuhn_poker_v0"],
        ["export", "RUN"],
    ],
)
@pytest.mark.parametrize("out", ["", "  "])
def test_an_empty_out_is_refused_by_every_command(tmp_path, capsys, monkeypatch, command, out):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "metrics.csv").write_text("mine\n")
    force = [] if command[0] == "export" else ["--force"]
    assert run_cli([*command, "--out", out, *force]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "argument --out: an empty or blank path" in err and "would be the current directory" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.csv"]


@pytest.mark.parametrize("text", ["", " ", "\t\n"])
def test_the_out_type_refuses_an_empty_or_blank_path(text):
    with pytest.raises(argparse.ArgumentTypeError, match=r"an empty or blank path .* would be the current directory"):
        out_path(text)
    assert out_path(".") == Path(".")


def test_train_run_refuses_an_empty_run_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RunError, match="run_dir is empty, which would be the current directory"):
        train_run(_spec(), "", force=True, progress=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "files",
    [
        {"metrics.csv": "date,weight\n"},
        {"config.toml": "[tool.black]\nline-length = 88\n", "tensorboard/events": "x"},
        {"config.toml": "not = [toml", "wandb_id": "abc\n"},
        {"checkpoints/notes.txt": "mine"},
    ],
)
def test_force_refuses_a_directory_that_holds_run_like_files_but_no_run(tmp_path, files):
    run_dir = tmp_path / "mine"
    for name, text in files.items():
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text(text)
    assert not is_run(run_dir)
    with pytest.raises(RunError, match=r"--force: .*mine holds .* but no marljoint training run .*another --out"):
        train_run(_spec(), run_dir, force=True, progress=False)
    assert {str(p.relative_to(run_dir)): p.read_text() for p in run_dir.rglob("*") if p.is_file()} == files


def test_a_run_is_its_config_or_its_checkpoints(tmp_path, trained):
    assert is_run(trained)
    only_config = tmp_path / "config_only"
    only_config.mkdir()
    shutil.copy(trained / "config.toml", only_config / "config.toml")
    assert is_run(only_config)
    only_checkpoints = tmp_path / "checkpoints_only"
    shutil.copytree(trained / "checkpoints", only_checkpoints / "checkpoints")
    assert is_run(only_checkpoints)


def test_psro_force_refuses_a_directory_without_a_psro_run(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "metrics.csv").write_text("date,weight\n")
    status = run_cli(["psro", "--env", "kuhn_poker_v0", "--out", str(out), "--force", "--quiet"])
    err = capsys.readouterr().err
    assert status == 2
    assert "--force:" in err and "holds metrics.csv but no marljoint training run" in err
    assert (out / "metrics.csv").read_text() == "date,weight\n"
