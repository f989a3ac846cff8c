"""``--ranks``: how many ranks, which runs may use them, the combinations refused, and the one line that names a
failed rank (all without starting processes)."""

from __future__ import annotations

import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from marljoint.cli import main
from marljoint.cli.ranks import quiet_rank_error, ranks_wanted, resumed_on_ranks
from marljoint.run import ranks as ranks_module
from marljoint.run.algorithms import ALGORITHMS
from marljoint.run.errors import RunError, RunInterrupted
from marljoint.run.ranks import (
    PEER_LOST,
    RankFailure,
    RankLost,
    RanksStopped,
    agree,
    check_ranks,
    decide,
    resolve_ranks,
    without_ranks_option,
)
from marljoint.run.spec import RunSpec
from tests.product._product_helpers import tiny_config, tiny_spec, train_args


def test_auto_is_the_usable_cores_capped_at_one_rank_per_env_copy():
    assert resolve_ranks("auto", num_envs=64, cores=2) == 2
    assert resolve_ranks("auto", num_envs=3, cores=16) == 3
    assert resolve_ranks(4, num_envs=4) == 4


def test_more_ranks_than_env_copies_is_refused_naming_both_and_the_fix():
    with pytest.raises(RunError, match=r"--ranks 5 is more than the run's 4 env copies .* --ranks 4 or fewer"):
        resolve_ranks(5, num_envs=4)
    with pytest.raises(RunError, match=r"--ranks 8 is more than the run's 4 env copies"):
        check_ranks(tiny_spec(2), 8)


@pytest.mark.parametrize("algorithm", ["psro", "nfsp"])
def test_algorithms_whose_row_refuses_ranks_are_refused_by_name_with_the_rows_reason(algorithm):
    spec = RunSpec.from_dict({"algorithm": algorithm, "num_envs": 4})
    reason = ALGORITHMS[algorithm].ranks_refusal
    with pytest.raises(RunError, match=rf"--ranks 2: algorithm '{algorithm}' does not train on data-parallel ranks: "):
        check_ranks(spec, 2)
    with pytest.raises(RunError) as refused:
        check_ranks(spec, 2)
    assert reason in str(refused.value)
    check_ranks(spec, 1)  # one rank is one process: nothing to refuse


@pytest.mark.parametrize("algorithm", ["vdn", "qmix", "masac", "maddpg"])
def test_the_off_policy_rows_train_on_ranks(algorithm):
    assert ALGORITHMS[algorithm].ranks_refusal is None
    check_ranks(RunSpec.from_dict({"algorithm": algorithm, "num_envs": 4}), 2)


def test_mmd_self_play_is_a_ppo_row_and_trains_on_ranks():
    check_ranks(tiny_spec(2, self_play="mmd", env="kuhn_poker_v0", env_kwargs={}), 2)


def test_env_workers_with_ranks_are_refused():
    spec = tiny_spec(2, collection={"backend": "subprocess", "workers": 2})
    with pytest.raises(RunError, match=r"--ranks 2 with --env-workers 2: .* drop --env-workers"):
        check_ranks(spec, 2)


def test_ray_with_ranks_is_refused():
    spec = tiny_spec(2, collection={"backend": "ray", "workers": 2})
    with pytest.raises(RunError, match=r"--ranks 2 with Ray collection: .* drop --ray"):
        check_ranks(spec, 2)


def _args(ranks):
    return SimpleNamespace(ranks=ranks)


def test_ranks_wanted_is_one_without_the_option_and_checks_the_run():
    assert ranks_wanted(_args(None), tiny_spec(2)) == 1
    assert ranks_wanted(_args(2), tiny_spec(2)) == 2
    with pytest.raises(RunError, match="more than the run's 4 env copies"):
        ranks_wanted(_args(9), tiny_spec(2))


def _cli_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_the_command_refuses_before_it_starts_any_process(tmp_path, capsys):
    argv = train_args(tmp_path / "run", tiny_config(tmp_path))
    err = _cli_error(capsys, [*argv, "--ranks", "2", "--env-workers", "2"])
    assert err.count("\n") == 1 and "marljoint train: error: --ranks 2 with --env-workers 2" in err
    assert not (tmp_path / "run").exists()


def test_several_runs_with_ranks_are_refused(tmp_path, capsys):
    argv = train_args(tmp_path / "runs", tiny_config(tmp_path))
    argv[argv.index("--quiet")] = "--seeds"
    err = _cli_error(capsys, [*argv, "1", "2", "--ranks", "2"])
    assert "--ranks 2 shares one run among processes, and --seeds, --sweep and marljoint tune" in err


def test_under_torchrun_ranks_are_torchruns(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    argv = train_args(tmp_path / "run", tiny_config(tmp_path))
    err = _cli_error(capsys, [*argv, "--ranks", "2"])
    assert "--ranks 2: this process is already one of 2 ranks (WORLD_SIZE=2, set by torchrun)" in err


def test_an_elastic_restart_needs_out(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    argv = train_args(tmp_path / "run", tiny_config(tmp_path))
    i = argv.index("--out")
    err = _cli_error(capsys, argv[:i] + argv[i + 2 :])
    assert "torchrun restarted the job (TORCHELASTIC_RESTART_COUNT=1), but the command line names no --out" in err


def test_a_bad_world_size_is_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(RunError, match=r"WORLD_SIZE='two' must be a positive integer"):
        ranks_module.torchrun_world_size()


def test_every_rank_runs_the_command_line_without_ranks():
    argv = ["--debug", "train", "--ranks", "2", "--num-envs", "4", "--ranks=auto", "--out", "x"]
    assert without_ranks_option(argv) == ["--debug", "train", "--num-envs", "4", "--out", "x"]


def test_without_a_group_agree_and_decide_are_this_process_own():
    assert agree(None, lambda: 3) == 3
    assert decide(None, {"stop": None, "out_of_time": True}) == {"stop": None, "out_of_time": True}


class _Group:
    """Two ranks seen from one of them, with the other rank's values given."""

    def __init__(self, rank, other):
        self.rank, self.world_size, self.is_writer, self.other = rank, 2, rank == 0, other

    def all_gather_object(self, obj):
        return [obj, self.other] if self.rank == 0 else [self.other, obj]

    def broadcast_object(self, obj, src=0):
        return obj if self.rank == src else self.other


def test_a_stop_on_any_rank_stops_every_rank_and_rank_0_decides_the_rest():
    other = {"stop": "SIGTERM", "out_of_time": True, "new_best": True}
    decided = decide(_Group(0, other), {"stop": None, "out_of_time": False, "new_best": False})
    assert decided == {"stop": "SIGTERM", "out_of_time": False, "new_best": False}


def test_rank_0s_error_stops_the_other_ranks_without_a_line_of_their_own():
    def refused():
        raise RunError("runs/x already holds a run")

    with pytest.raises(RunError, match="already holds a run"):
        agree(_Group(0, None), refused)
    with pytest.raises(RanksStopped, match="rank 0 stopped: runs/x already holds a run"):
        agree(_Group(1, ("error", "runs/x already holds a run")), refused)
    assert agree(_Group(1, ("ok", 7)), refused) == 7


def _failure(pid, exitcode, timestamp):
    return SimpleNamespace(pid=pid, exitcode=exitcode, timestamp=timestamp)


def _write_checkpoint(run_dir: Path) -> Path:
    path = run_dir / "checkpoints" / "ckpt_0000004.pt"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    return path


def test_a_killed_rank_is_named_with_the_last_good_checkpoint(tmp_path):
    path = _write_checkpoint(tmp_path)
    failures = {0: _failure(10, PEER_LOST, 5), 1: _failure(11, -signal.SIGKILL, 5)}
    with pytest.raises(RankFailure, match=rf"rank 1 \(pid 11\) was killed by SIGKILL, .* {path}; continue with"):
        ranks_module._failed(failures, 2, tmp_path, 30.0)


def test_a_hung_rank_is_named_after_the_others_timed_out(tmp_path):
    failures = {0: _failure(10, PEER_LOST, 5), 1: _failure(11, -signal.SIGKILL, 35)}
    with pytest.raises(
        RankFailure, match=r"rank 1 \(pid 11\) stopped responding: .* timeout \(30 s, .* no checkpoint was written yet"
    ):
        ranks_module._failed(failures, 2, tmp_path, 30.0)


def test_a_rank_that_reported_its_own_error_gives_the_job_its_status(tmp_path):
    failures = {0: _failure(10, 2, 5), 1: _failure(11, PEER_LOST, 5)}
    assert ranks_module._failed(failures, 2, tmp_path, 30.0) == 2


def test_which_errors_a_rank_leaves_to_others(monkeypatch):
    assert quiet_rank_error(RankLost("x")) is None  # one process: every error is its own
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert quiet_rank_error(RankLost("x")) is None  # plain torchrun: each rank says what it saw
    assert quiet_rank_error(RanksStopped("x")) == PEER_LOST
    assert quiet_rank_error(RunInterrupted("stopped", 143)) == 143
    assert quiet_rank_error(RunError("its own env failed")) is None
    monkeypatch.setenv(ranks_module.LAUNCHED_RANKS, "2")
    assert quiet_rank_error(RankLost("x")) == PEER_LOST  # the launcher names the rank that failed
    monkeypatch.setenv("RANK", "0")
    assert quiet_rank_error(RanksStopped("x")) is None


def test_a_run_collected_by_env_workers_resumes_on_ranks_collecting_in_each_rank():
    spec = tiny_spec(2, collection={"backend": "subprocess", "workers": 2})
    assert resumed_on_ranks(spec, {}).trainer.collection.backend == "local"
    check_ranks(resumed_on_ranks(spec, {}), 2)
    given = {"collection": {"backend": "subprocess", "workers": 2}}  # named on the command line: refused as given
    with pytest.raises(RunError, match="with --env-workers 2"):
        check_ranks(resumed_on_ranks(spec, given), 2)
