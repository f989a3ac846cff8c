"""``marljoint tune`` checks its whole search space before the first trial: a range whose values the setting cannot
take is refused in one line naming the field, with no trial started and nothing written."""

from __future__ import annotations

import re

import pytest
from _product_helpers import run_cli

from marljoint.run.errors import RunError
from marljoint.run.spec import RunSpec
from marljoint.run.tune import ParamRange, check_search_space


@pytest.mark.parametrize(
    ("param", "match"),
    [
        ("hidden_sizes=1:4", r"hidden_sizes = 1\.0, which the run refuses \(.*hidden_sizes must be a list"),
        ("n_epochs=1:4", r"n_epochs = 1\.0, .*; search integers with n_epochs=int:1:4$"),
        ("gamma=0.9:1.5", r"gamma = 1\.5, which the run refuses \(.*gamma must be in \[0, 1\]"),
        ("learning_rate=0:0.01", r"learning_rate = 0\.0, which the run refuses"),
        ("minibatch_size=int:0:64", r"minibatch_size = 0, which the run refuses"),
    ],
)
def test_a_range_with_a_value_the_setting_refuses_is_refused_naming_it(param, match):
    with pytest.raises(RunError, match=rf"^--param {re.escape(param)}: a trial could draw {match}"):
        check_search_space([ParamRange.parse(param)], RunSpec())


def test_ranges_the_settings_take_pass():
    params = [ParamRange.parse(p) for p in ("learning_rate=log:1e-4:1e-2", "ent_coef=0:0.05", "n_epochs=int:1:8")]
    check_search_space(params, RunSpec())


def test_the_ranges_print_as_param_takes_them():
    assert str(ParamRange.parse("learning_rate=log:1e-4:1e-2")) == "learning_rate=log:0.0001:0.01"
    assert str(ParamRange.parse("n_epochs=int:1:4")) == "n_epochs=int:1:4"
    assert ParamRange.parse("n_epochs=int:1:4").ends() == (1, 4)
    assert ParamRange.parse("ent_coef=0:1").ends() == (0.0, 1.0)


def test_tune_with_a_malformed_range_says_one_line_before_any_trial(capsys, tmp_path):
    pytest.importorskip("optuna")
    out = tmp_path / "t"
    code = run_cli(["tune", "--param", "hidden_sizes=1:4", "--trials", "1", "--total-steps", "64", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert "Traceback" not in captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("marljoint tune: error: --param hidden_sizes=1:4: a trial could draw hidden_sizes")
    assert "trial" not in captured.out
    assert not out.exists()
