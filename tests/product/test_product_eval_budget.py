"""``marljoint eval`` says up front how many episodes and at most how many env steps it plays, refuses counts that
cannot end within its step cap, and on Ctrl-C reports the episodes played so far, marked partial, with exit 130."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from _product_helpers import run_cli, tiny_config, train_args

from marljoint.run import evaluate
from marljoint.run.episodes import EpisodesInterrupted, check_step_budget, play_episodes
from marljoint.run.errors import RunError, RunInterrupted
from marljoint.run.evaluate import EvalInterrupted, evaluate_run, evaluation_copies

EPISODE_LENGTH = 20
"""The longest episode of the tiny bucket brigade (max_nights = 20): a copy ends an episode in this many steps or
fewer, so after ``k * EPISODE_LENGTH`` steps every copy has ended at least ``k``."""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval_budget")
    out = root / "run"
    assert run_cli(train_args(out, tiny_config(root), 2 * 64)) == 0
    return out


def _interrupt_after(monkeypatch, steps: int) -> None:
    """Ctrl-C (KeyboardInterrupt) when the policies are asked for their ``steps + 1``-th action."""
    load_run = evaluate.load_run

    def interrupting_load_run(*args, **kwargs):
        run = load_run(*args, **kwargs)
        act, calls = run.trainer.act, [0]

        def act_then_interrupt(obs, deterministic=True):
            calls[0] += 1
            if calls[0] > steps:
                raise KeyboardInterrupt
            return act(obs, deterministic=deterministic)

        run.trainer.act = act_then_interrupt
        return run

    monkeypatch.setattr(evaluate, "load_run", interrupting_load_run)


def test_check_step_budget_refuses_episodes_that_cannot_end_within_the_cap():
    check_step_budget(8 * 100, 8, 100)  # a copy's 100 episodes fit 100 steps if each lasts one step
    with pytest.raises(RunError, match=r"^801 episodes on 8 env copies take at least 101 joint steps .* cap of 100"):
        check_step_budget(801, 8, 100)


@pytest.mark.parametrize("episodes", [0, -3, 2.5, True])
def test_evaluation_copies_refuses_a_count_that_is_not_a_positive_integer(episodes):
    with pytest.raises(RunError, match="episodes must be a positive integer"):
        evaluation_copies(episodes, None, False)


def test_evaluation_copies():
    assert evaluation_copies(3, None, False) == 3
    assert evaluation_copies(10**9, None, False) == 8
    assert evaluation_copies(10**9, 32, False) == 32
    assert evaluation_copies(10**9, 32, True) == 1


def test_play_episodes_interrupted_keeps_the_episodes_that_ended(run_dir):
    run = evaluate.load_run(run_dir, num_envs=2)
    act, calls = run.trainer.act, [0]

    def act_then_interrupt(obs, deterministic=True):
        calls[0] += 1
        if calls[0] > 2 * EPISODE_LENGTH + 5:
            raise KeyboardInterrupt
        return act(obs, deterministic=deterministic)

    run.trainer.act = act_then_interrupt
    try:
        with pytest.raises(EpisodesInterrupted, match=r"interrupted after \d+ of 100 episodes") as caught:
            play_episodes(run.trainer, run.env, 100)
    finally:
        run.close()
    assert isinstance(caught.value, KeyboardInterrupt)  # whoever stops at Ctrl-C still stops
    played = len(caught.value.returns)
    assert played >= 4 and str(caught.value) == f"interrupted after {played} of 100 episodes"
    assert caught.value.returns.shape == (played, 2) and caught.value.lengths.shape == (played,)
    assert all(1 <= n <= EPISODE_LENGTH for n in caught.value.lengths)


def test_evaluate_run_interrupted_raises_the_partial_result(run_dir, monkeypatch):
    _interrupt_after(monkeypatch, EPISODE_LENGTH + 3)
    with pytest.raises(EvalInterrupted, match=r"^interrupted after \d+ of 50 episodes; the partial result") as caught:
        evaluate_run(run_dir, episodes=50, num_envs=4)
    result = caught.value.result
    played = len(result.returns)
    assert isinstance(caught.value, RunInterrupted) and caught.value.exit_status == 130
    assert result.partial and result.requested == 50 and played >= 4
    assert result.format().startswith(f"PARTIAL result (interrupted): {played} of 50 episodes")


def test_evaluate_run_interrupted_before_any_episode_ended_has_no_result(run_dir, monkeypatch):
    _interrupt_after(monkeypatch, 3)
    with pytest.raises(EvalInterrupted, match="before any of the 50 episodes ended") as caught:
        evaluate_run(run_dir, episodes=50, num_envs=4)
    assert caught.value.result is None


def test_a_finished_evaluation_is_not_partial(run_dir):
    result = evaluate_run(run_dir, episodes=2)
    assert not result.partial and result.requested is None
    assert not result.format().startswith("PARTIAL")


def test_eval_announces_its_episodes_and_step_cap(run_dir, capsys):
    assert run_cli(["eval", str(run_dir), "--episodes", "3", "--num-envs", "2", "--max-steps", "500"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith(
        "eval: 3 episodes on 2 env copies, at most 500 joint steps (1,000 env steps; --max-steps caps them)"
    )


def test_eval_of_one_episode_per_env_copy_says_nothing_before_its_result(run_dir, capsys):
    assert run_cli(["eval", str(run_dir), "--episodes", "3"]) == 0
    assert capsys.readouterr().err == ""


def test_eval_announces_a_huge_count_and_runs_it(run_dir, capsys, monkeypatch):
    _interrupt_after(monkeypatch, EPISODE_LENGTH)  # stands in for the user's Ctrl-C: the count itself is allowed
    assert run_cli(["eval", str(run_dir), "--episodes", "1e6"]) == 130
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith("eval: 1,000,000 episodes on 8 env copies, at most 1,000,000 joint steps")


def test_eval_refuses_episodes_that_cannot_end_within_the_cap_in_one_line(run_dir, capsys):
    code = run_cli(["eval", str(run_dir), "--episodes", "1e9"])
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    assert err.strip().splitlines() == [
        "marljoint eval: error: 1,000,000,000 episodes on 8 env copies take at least 125,000,000 joint steps (a copy "
        "ends one episode per step at most), more than the cap of 1,000,000 (--max-steps): lower --episodes, or raise "
        "--max-steps or --num-envs"
    ]


@pytest.mark.parametrize("episodes", ["0", "-5"])
def test_eval_refuses_non_positive_counts(run_dir, capsys, episodes):
    assert run_cli(["eval", str(run_dir), "--episodes", episodes]) == 2
    assert "argument --episodes: must be a positive integer" in capsys.readouterr().err


def test_ctrl_c_during_eval_prints_the_partial_result_and_exits_130(run_dir, capsys, monkeypatch):
    _interrupt_after(monkeypatch, 2 * EPISODE_LENGTH + 1)
    assert run_cli(["eval", str(run_dir), "--episodes", "100", "--num-envs", "4"]) == 130
    captured = capsys.readouterr()
    played = int(re.match(r"PARTIAL result \(interrupted\): (\d+) of 100 episodes", captured.out).group(1))
    assert played >= 8
    assert "Traceback" not in captured.err
    assert captured.err.strip().splitlines()[-1] == (
        f"marljoint eval: interrupted after {played} of 100 episodes; the partial result covers those {played}"
    )


def test_ctrl_c_during_eval_with_json_marks_the_result_partial(run_dir, capsys, monkeypatch):
    _interrupt_after(monkeypatch, EPISODE_LENGTH + 1)
    assert run_cli(["eval", str(run_dir), "--episodes", "100", "--num-envs", "4", "--json"]) == 130
    payload = json.loads(capsys.readouterr().out)
    assert payload["partial"] is True
    assert payload["episodes"] >= 4 and payload["episodes_requested"] == 100
    assert np.isfinite(payload["returns"]["mean"]["mean"])


def test_a_finished_eval_with_json_is_not_partial(run_dir, capsys):
    assert run_cli(["eval", str(run_dir), "--episodes", "2", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["partial"] is False and payload["episodes"] == payload["episodes_requested"] == 2


def test_a_reference_that_is_no_run_is_refused_before_any_episode_is_played(run_dir, capsys, monkeypatch):
    monkeypatch.setattr(evaluate, "load_run", None)  # nothing may be loaded, let alone played
    assert run_cli(["eval", str(run_dir), "--episodes", "3", "--against", "nowhere"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [err.strip()]
    assert err.startswith("marljoint eval: error: --against 'nowhere' is neither 'random', a run directory")


def test_a_run_that_cannot_be_loaded_is_one_line_without_the_announcement(tmp_path, capsys):
    assert run_cli(["eval", str(tmp_path), "--episodes", "3"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "eval: 3 episodes" not in err
