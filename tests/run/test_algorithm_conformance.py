"""Every row of :data:`~marljoint.run.algorithms.ALGORITHMS` honours the :class:`~marljoint.run.algorithms.Algorithm`
contract through the product, on a parallel env (mock_v0) and a turn-based one (kuhn_poker_v0): its command trains
a tiny run (or refuses the env in one line), metrics.csv has the contract's columns, a run of two iterations and one
of one iteration resumed for another hold the same bits, ``marljoint eval`` plays it, ``marljoint export`` writes it
or refuses in one line with the reason, and a checkpoint with non-finite weights is refused by eval and resume.

The rows are read from the table: a row added is tested here without editing this file. A row whose command is not
``train`` needs its tiny budget in :data:`COMMAND_BUDGETS`; a row with a settings table of a new name may give its
tiny settings in :data:`TABLE_SETTINGS` (else it trains with its defaults).
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import torch
from rollout_checks import same_state

from marljoint.checkpoint import atomic_torch_save, list_checkpoints, load_checkpoint
from marljoint.cli import main
from marljoint.run.algorithms import ALGORITHMS, AlgorithmEntry

ENVS = {"mock_v0": {"max_cycles": 5}, "kuhn_poker_v0": {}}
"""A parallel env (episodes of 5 steps) and a turn-based one (an AEC game with action masks, zero-sum), with their
keyword arguments: a row may refuse either in one line, and trains at least one."""

CONTRACT_COLUMNS = ("iteration", "wall_time", "env_steps", "agent_steps", "sps", "episodes", "episode_return_mean")
"""The columns every row's metrics.csv holds (:meth:`~marljoint.run.algorithms.Algorithm.iteration_metrics`, and the
run's own wall time), with ``episode_return/<agent>`` for each agent."""

TIMING_COLUMNS = ("wall_time", "sps", "iteration_seconds", "br_seconds")
"""The columns that measure the machine, not the run: left out where runs are compared (``iteration_seconds`` and
``br_seconds``: PSRO's)."""

TINY_TRAIN = ["--num-envs", "2", "--rollout-steps", "4", "--set", "hidden_sizes=[8]"]
FAMILY_SETTINGS = {"ppo": ["--set", "minibatch_size=8"]}
"""Tiny settings only a family reads (a setting an algorithm does not read is refused)."""
TABLE_SETTINGS = {"offpolicy": ["--set", "offpolicy={learning_starts=8, batch_size=8, buffer_size=64}"]}
"""Tiny settings of each settings table (a row's ``table``)."""

COMMAND_BUDGETS = {
    "psro": ["--br-steps", "16", "--num-envs", "4", "--episodes-per-entry", "2", "--gain-every", "0"]
    + ["--set", "rollout_steps=4"],
    "nfsp": ["--num-envs", "2", "--gain-every", "0", "--set", "rollout_steps=4"]
    + ["--set", "nfsp={rollouts_per_iteration=1}"],
}
"""Tiny options of each command other than ``train`` (its iterations are given with ``--iterations``)."""


def _run(args: list[str]) -> int:
    try:
        return main(args)
    except SystemExit as exc:
        return int(exc.code or 0)


def _budget(entry: AlgorithmEntry, iterations: int) -> list[str]:
    """The options of a tiny run of ``iterations`` iterations of ``entry``."""
    kind = entry.command[0]
    if kind == "train":
        steps = iterations * 2 * 4
        tiny = [*FAMILY_SETTINGS.get(entry.family, []), *TABLE_SETTINGS.get(entry.table or "", [])]
        return [*TINY_TRAIN, "--total-steps", str(steps), *tiny]
    if kind not in COMMAND_BUDGETS:
        pytest.fail(f"row {entry.name!r} runs `marljoint {kind}`: add its tiny options to COMMAND_BUDGETS")
    return [*COMMAND_BUDGETS[kind], "--iterations", str(iterations)]


def _resume_budget(entry: AlgorithmEntry, iterations: int) -> list[str]:
    if entry.command[0] == "train":
        return ["--total-steps", str(iterations * 2 * 4)]
    return ["--iterations", str(iterations)]


def _train(entry: AlgorithmEntry, env: str, out: Path, iterations: int) -> int:
    where = ["--env", env, "--env-kwargs", json.dumps(ENVS[env]), "--out", str(out)]
    return _run([*entry.command, *where, "--quiet", *_budget(entry, iterations)])


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as file:
        return list(csv.DictReader(file))


def _newest(run_dir: Path) -> Path:
    return list_checkpoints(run_dir / "checkpoints")[-1]


def _same_log(a: Path, b: Path) -> bool:
    rows_a, rows_b = _rows(a), _rows(b)
    # A run measures its exploitability every K iterations and after its last, so a run stopped after iteration 1
    # and resumed also measures there: the measurements are left out (the trainer states are compared besides).
    untimed = [
        {k: v for k, v in row.items() if k not in TIMING_COLUMNS and not k.startswith("exploit/")}
        for row in rows_a + rows_b
    ]
    return len(rows_a) == len(rows_b) and untimed[: len(rows_a)] == untimed[len(rows_a) :]


def _first_float(state: object) -> torch.Tensor | None:
    """The first floating-point tensor of a nested state."""
    values = state.values() if isinstance(state, dict) else state if isinstance(state, (list, tuple)) else [state]
    for value in values:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value
        if isinstance(value, (dict, list, tuple)):
            found = _first_float(value)
            if found is not None:
                return found
    return None


def _first_of_family(name: str) -> bool:
    family = ALGORITHMS[name].family
    return next(row.name for row in ALGORITHMS.values() if row.family == family) == name


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_every_algorithm_trains_resumes_evaluates_and_exports_or_refuses(name, tmp_path, capsys):
    entry = ALGORITHMS[name]
    trained = [env for env in ENVS if _conforms(entry, env, tmp_path / env, capsys)]
    assert trained, f"{name} refuses every env of the test: {list(ENVS)}"
    if _first_of_family(name):
        _refuse_non_finite(entry, tmp_path / trained[0] / "straight", capsys)


def _conforms(entry: AlgorithmEntry, env: str, root: Path, capsys: pytest.CaptureFixture[str]) -> bool:
    """Checks the row on ``env`` (see the module's docstring); False where it refuses the env, in one line."""
    name, once = entry.name, root / "once"
    capsys.readouterr()
    if _train(entry, env, once, 1) != 0:  # the row refuses this env: one line naming it, and nothing written
        assert env in _one_line(capsys) and not once.exists()
        return False
    header = list(_rows(once)[0])
    agents = ("agent_0", "agent_1") if env == "mock_v0" else ("player_0", "player_1")
    missing = [c for c in (*CONTRACT_COLUMNS, *(f"episode_return/{a}" for a in agents)) if c not in header]
    assert not missing, f"{name} on {env}: metrics.csv lacks {missing}"

    assert _run([entry.command[0], "--out", str(once), "--resume", "--quiet", *_resume_budget(entry, 2)]) == 0
    straight = root / "straight"
    assert _train(entry, env, straight, 2) == 0
    a, b = load_checkpoint(_newest(straight)), load_checkpoint(_newest(once))
    assert same_state(a["trainer"], b["trainer"]), f"{name} on {env}: a resumed run differs from an uninterrupted one"
    assert _same_log(straight, once), f"{name} on {env}: the resumed run's metrics differ"

    assert _run(["eval", str(straight), "--episodes", "2", "--json"]) == 0
    capsys.readouterr()
    exported = root / "exported"
    if entry.exports:
        assert _run(["export", str(straight), "--out", str(exported)]) == 0
        assert (exported / "manifest.json").is_file()
    else:
        assert _run(["export", str(straight), "--out", str(exported)]) == 2
        assert f"cannot export {straight}" in _one_line(capsys) and not exported.exists()
    return True


def _refuse_non_finite(entry: AlgorithmEntry, run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint whose weights hold a NaN is refused by eval and by resume, in one line each."""
    copy = shutil.copytree(run_dir, run_dir.parent / "diverged")
    path = _newest(copy)
    state = load_checkpoint(path)
    weights = [state["trainer"][k] for k in ("policies", "algorithm") if k in state["trainer"]]
    first = _first_float(weights)
    assert first is not None, f"{entry.name}: no weights under the keys the divergence check reads"
    first.fill_(float("nan"))
    atomic_torch_save(state, path)
    capsys.readouterr()
    assert _run(["eval", str(copy), "--episodes", "1"]) == 2
    assert "non-finite weights" in _one_line(capsys)
    assert _run([entry.command[0], "--out", str(copy), "--resume", "--quiet", *_resume_budget(entry, 3)]) == 2
    assert "non-finite weights" in _one_line(capsys)
