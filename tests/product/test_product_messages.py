"""Messages for problems outside the command line's own input: videos of any frame size, an env that leaves the
agent to move no legal action, a checkpoint of another env, a binary config file, a full disk, an env version or
package that is not there. Each ends the command with exit status 2, one line, no traceback, nothing left behind."""

from __future__ import annotations

import errno
import sys

import numpy as np
import pytest
from _product_helpers import rendering_counter, run_cli

from marljoint import PettingZooJointEnv
from marljoint.run.errors import RunError, unwritable_file_error
from marljoint.run.evaluate import pad_frames, write_video
from marljoint_envs import kuhn_poker_v0

TRAIN = ["train", "--env", "mock_v0", "--quiet", "--total-steps", "64", "--num-envs", "2", "--rollout-steps", "16"]


def _fails(capsys, args, *matches):
    """Runs ``marljoint args``; asserts exit status 2 and one error line holding every match; returns the line."""
    code = run_cli(args)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("marljoint") and "error" in lines[0], lines[0]
    for match in matches:
        assert match in lines[0], lines[0]
    return lines[0]


# ---------------------------------------------------------------- videos of any frame size


def odd_frame_counter(render_mode=None, **kwargs):
    """counter_v0 rendering 7 x 5 frames (odd sizes, which H.264 cannot encode as they are)."""
    env = rendering_counter(render_mode, **kwargs)
    env.render = lambda: np.full((5, 7, 3), 200, np.uint8)
    return env


def _video_size(path):
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    frames = sum(1 for _ in reader)
    return tuple(meta["size"]), frames


@pytest.mark.parametrize(("height", "width", "padded"), [(774, 891, (892, 774)), (5, 7, (8, 6)), (6, 8, (8, 6))])
def test_videos_of_any_frame_size_are_padded_to_even_sizes(tmp_path, capfd, height, width, padded):
    pytest.importorskip("imageio_ffmpeg")
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(3)]
    path = write_video(frames, tmp_path / "episode.mp4", fps=5)
    assert path == tmp_path / "episode.mp4" and path.read_bytes()[4:8] == b"ftyp"
    assert _video_size(path) == (padded, 3)
    assert [p.name for p in tmp_path.iterdir()] == ["episode.mp4"]  # no temporary file left
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # ffmpeg's own output is kept from the terminal


def test_pad_frames_pads_with_black_to_the_block_and_the_largest_frame():
    frames = [np.full((5, 7, 4), 9, np.uint8), np.full((3, 9, 3), 7, np.uint8)]
    padded = pad_frames(frames, 2)
    assert [f.shape for f in padded] == [(6, 10, 3), (6, 10, 3)]
    assert (padded[0][:5, :7] == 9).all() and padded[0][5:].sum() == 0 and padded[0][:, 7:].sum() == 0
    assert (padded[1][:3, :9] == 7).all() and padded[1][3:].sum() == 0


def test_a_video_that_ffmpeg_cannot_write_leaves_no_file(tmp_path, capfd):
    pytest.importorskip("imageio_ffmpeg")
    frames = [np.zeros((5, 7, 3), np.uint8)] * 2
    with pytest.raises(RunError, match=r"ffmpeg could not write the video .*episode\.nosuchformat: Unable to choose"):
        write_video(frames, tmp_path / "episode.nosuchformat")
    assert list(tmp_path.iterdir()) == []
    assert capfd.readouterr().err == ""
    with pytest.raises(RunError, match="no frames to write"):
        write_video([], tmp_path / "episode.mp4")


def test_a_video_without_imageio_ffmpeg_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)
    with pytest.raises(RunError, match=r'pip install "marljoint\[video\]"'):
        write_video([np.zeros((4, 4, 3), np.uint8)], tmp_path / "episode.mp4")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def odd_run(tmp_path_factory):
    """A tiny run of an env that renders 7 x 5 frames."""
    out = tmp_path_factory.mktemp("odd") / "run"
    args = ["train", "--env", "test_product_messages:odd_frame_counter", "--env-kwargs", '{"truncate_at": 4}']
    args += ["--num-envs", "2", "--rollout-steps", "8", "--total-steps", "16", "--set", "hidden_sizes=[8]"]
    assert run_cli([*args, "--out", str(out), "--quiet"]) == 0
    return out


def test_eval_records_a_video_of_odd_sized_frames(odd_run, tmp_path, capfd):
    pytest.importorskip("imageio_ffmpeg")
    video = tmp_path / "episode.mp4"
    assert run_cli(["eval", str(odd_run), "--episodes", "1", "--video", str(video)]) == 0
    out, err = capfd.readouterr()
    assert f"video written to {video}" in out and "ffmpeg" not in err.lower()
    assert _video_size(video) == ((8, 6), 4)


def test_eval_video_that_fails_is_one_line_and_leaves_nothing(odd_run, tmp_path, capsys):
    pytest.importorskip("imageio_ffmpeg")
    video = tmp_path / "videos" / "episode.nosuchformat"
    _fails(capsys, ["eval", str(odd_run), "--episodes", "1", "--video", str(video)], "ffmpeg could not write")
    assert not video.exists() and list(video.parent.iterdir()) == []


# ---------------------------------------------------------------- an agent to move without a legal action


def no_legal_move(after: int = 1):
    """Kuhn poker (AEC) whose agent to move gets an all-zero action mask from move ``after`` of a hand on
    (importable as ``test_product_messages:no_legal_move``)."""
    from pettingzoo.utils.wrappers import BaseWrapper

    class NoLegalMove(BaseWrapper):
        def observe(self, agent):
            obs = dict(super().observe(agent))
            if len(self.env.unwrapped.history) >= after:
                obs["action_mask"] = np.zeros_like(obs["action_mask"])
            return obs

    return NoLegalMove(kuhn_poker_v0.env())


@pytest.mark.parametrize(("after", "where"), [(0, "right after reset"), (1, "after move 1 of its episode")])
def test_an_agent_to_move_without_a_legal_action_is_named_where_its_mask_arrives(after, where):
    agent = "player_0" if after == 0 else "player_1"
    expected = (
        rf"env 'kuhn_poker_v0' \(env copy 0, {where}\): the agent to move, '{agent}', has an action mask that "
        r"allows no action; the env must leave the agent to move at least one legal action"
    )
    env = PettingZooJointEnv(lambda: no_legal_move(after), num_envs=2, seed=0)
    with pytest.raises(ValueError, match=expected):
        env.reset()
        env.step([np.zeros((2, 2), np.int64)])
    env.close()


def test_training_on_an_env_without_a_legal_action_is_one_line_and_leaves_nothing(tmp_path, capsys):
    args = ["train", "--env", "test_product_messages:no_legal_move", "--num-envs", "2", "--rollout-steps", "8"]
    args += ["--total-steps", "16", "--quiet", "--out", str(tmp_path / "run")]
    _fails(capsys, args, "the agent to move, 'player_1', has an action mask that allows no action", "env copy 0")
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- a checkpoint of another env


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Tiny finished runs of mock_v0 and counter_v0."""
    root = tmp_path_factory.mktemp("two_runs")
    assert run_cli([*TRAIN, "--out", str(root / "mock")]) == 0
    counter = ["train", "--env", "counter_v0", "--quiet", "--total-steps", "64", "--num-envs", "2"]
    assert run_cli([*counter, "--rollout-steps", "16", "--out", str(root / "counter")]) == 0
    return root


def _snapshot(directory):
    return {p: p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("run", "other"), [("mock", "counter"), ("counter", "mock")])
def test_eval_of_a_checkpoint_of_another_env_names_both_envs_and_what_differs(two_runs, run, other, capsys):
    checkpoint = sorted((two_runs / other / "checkpoints").glob("ckpt_*.pt"))[-1]
    before = _snapshot(two_runs)
    envs = {"mock": "'mock_v0'", "counter": "'counter_v0'"}
    line = _fails(
        capsys,
        ["eval", str(two_runs / run), "--episodes", "1", "--checkpoint", str(checkpoint)],
        f"was trained on env {envs[other]}, but this run's env is {envs[run]}",
        "actor input (observation + agent id) of network 0",
        f"marljoint eval {two_runs / other}",
    )
    assert "normalize_observations" not in line
    assert _snapshot(two_runs) == before


# ---------------------------------------------------------------- a binary config file


def test_a_binary_config_file_is_named_as_not_a_toml_text_file(tmp_path, capsys):
    config = tmp_path / "weights.toml"
    config.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    _fails(
        capsys,
        [*TRAIN, "--config", str(config), "--out", str(tmp_path / "run")],
        f"config file {config} is not a TOML text file",
        "byte 0x89 at offset 0",
    )
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- a full disk


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


WRITERS = {
    "config.toml": ("marljoint.run.loop", "write_config"),
    "metrics.csv": ("marljoint.run.runlog.MetricsLog", "log"),
    "checkpoints": ("marljoint.checkpoint", "atomic_torch_save"),
}


@pytest.mark.parametrize("written", sorted(WRITERS))
def test_a_full_disk_names_the_file_and_the_fix_and_leaves_no_run(written, tmp_path, capsys, monkeypatch):
    module, name = WRITERS[written]
    monkeypatch.setattr(f"{module}.{name}", _no_space)
    out = tmp_path / "run"
    _fails(
        capsys,
        [*TRAIN, "--out", str(out)],
        f"cannot write {out / written}: No space left on device (ENOSPC)",
        "free space on that disk or choose another --out",
    )
    assert not out.exists()


def test_a_full_disk_when_drawing_the_curve_keeps_the_trained_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("marljoint.run.plotting.plot_learning_curve", _no_space)
    out = tmp_path / "run"
    _fails(capsys, [*TRAIN, "--out", str(out)], f"cannot write {out / 'learning_curve.png'}: No space left")
    assert list((out / "checkpoints").glob("ckpt_*.pt"))  # the checkpoints written before stay


def test_a_full_disk_mid_run_keeps_the_checkpoints_written(tmp_path, capsys, monkeypatch):
    from marljoint.run import runlog

    original, rows = runlog.MetricsLog.log, []

    def log_then_fill_the_disk(self, row):
        rows.append(row)
        if len(rows) > 2:
            _no_space()
        original(self, row)

    monkeypatch.setattr(runlog.MetricsLog, "log", log_then_fill_the_disk)
    out = tmp_path / "run"
    args = [*TRAIN[:5], "256", *TRAIN[6:], "--out", str(out), "--set", "checkpoint_every=1"]
    _fails(capsys, args, "metrics.csv: No space left on device (ENOSPC)")
    assert len(list((out / "checkpoints").glob("ckpt_*.pt"))) == 2  # resumable from its newest checkpoint


@pytest.mark.parametrize(
    ("code", "fix"),
    [
        (errno.ENOSPC, "free space on that disk or choose another --out"),
        (errno.EDQUOT, "free space within your disk quota"),
        (errno.EROFS, "choose another --out on a writable file system"),
        (errno.EACCES, "choose another --out that you may write to"),
    ],
)
def test_unwritable_file_errors_say_the_reason_and_the_fix(code, fix):
    error = unwritable_file_error(OSError(code, "message"), "runs/a/metrics.csv")
    assert isinstance(error, RunError)
    assert str(error).startswith(f"cannot write runs/a/metrics.csv: {__import__('os').strerror(code)}")
    assert f"({errno.errorcode[code]}); {fix}" in str(error)
    named = unwritable_file_error(OSError(code, "message", "runs/a/checkpoints/.ckpt.tmp"), "runs/a/checkpoints")
    assert "cannot write runs/a/checkpoints/.ckpt.tmp:" in str(named)
    assert unwritable_file_error(OSError(errno.EIO, "I/O error"), "x") is None


def test_other_os_errors_while_writing_are_not_reworded(tmp_path, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr("marljoint.run.loop.write_config", broken)
    line = _fails(capsys, [*TRAIN, "--out", str(tmp_path / "run")], "Input/output error")
    assert "choose another --out" not in line
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- env versions and packages


def test_an_env_version_that_does_not_exist_names_the_versions_there_are(tmp_path, capsys):
    pytest.importorskip("pettingzoo.sisl")
    _fails(
        capsys,
        ["train", "--env", "pettingzoo.sisl.pursuit_v4", "--out", str(tmp_path / "run")],
        "unknown env 'pettingzoo.sisl.pursuit_v4': pettingzoo.sisl has no pursuit_v4; the versions it has: "
        "pettingzoo.sisl.pursuit_v5",
    )
    _fails(capsys, ["train", "--env", "mock_v1", "--out", str(tmp_path / "run")], "bundled versions: mock_v0")
    line = _fails(capsys, ["train", "--env", "pettingzoo.sisl.nosuch_v0", "--out", str(tmp_path / "run")], "its envs")
    assert "multiwalker_v9" in line and "installed" not in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("env", "missing", "command"),
    [
        ("mpe2.simple_spread_v3", "mpe2", "is the package 'mpe2' installed? (pip install \"marljoint[mpe]\")"),
        ("pettingzoo.sisl.pursuit_v5", "pygame", 'pip install "pettingzoo[sisl]" or pip install "marljoint[envs]"'),
        ("openspiel:leduc_poker", "pyspiel", 'pip install "marljoint[openspiel]"'),
        ("no_such_package.env_v0", "no_such_package", "is the package 'no_such_package' installed?"),
    ],
)
def test_a_missing_package_names_the_pip_extra_that_installs_it(env, missing, command, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, missing, None)  # importing it fails, as where it is not installed
    for name in [m for m in sys.modules if m.startswith(env.rpartition(".")[0] + ".")]:
        monkeypatch.delitem(sys.modules, name)  # imported again, so the missing package is noticed
    short = ["--total-steps", "1", "--num-envs", "1", "--quiet"]  # quick to fail should the import succeed
    _fails(capsys, ["train", "--env", env, *short, "--out", str(tmp_path / "run")], command)
    assert not (tmp_path / "run").exists()
