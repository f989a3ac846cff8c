"""W&B project names and run ids that W&B would refuse (with a UsageError traceback once the run is built) are refused
with one line naming the character and the rule, before the run starts."""

from __future__ import annotations

import re

import pytest
from _product_helpers import resume_args, run_cli, tiny_config, train_args

from marljoint.run.errors import RunError
from marljoint.run.wandb_names import check_project, check_run_id, check_wandb_run


def _one_line_error(capsys, args: list[str], match: str) -> str:
    code = run_cli(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert match in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("char", list("/\\#?%:"))
def test_project_names_with_a_character_wandb_refuses(char):
    with pytest.raises(RunError, match=re.escape(f"holds {char!r}; W&B project names cannot hold")):
        check_project(f"team{char}runs")


@pytest.mark.parametrize(("name", "match"), [("", "expected a W&B project name"), ("x" * 129, "at most 128")])
def test_empty_and_too_long_project_names(name, match):
    with pytest.raises(RunError, match=match):
        check_project(name)


def test_a_project_name_wandb_accepts_passes():
    assert check_project("marl-experiments_2 (spread)") == "marl-experiments_2 (spread)"
    assert check_project("x" * 128) == "x" * 128


@pytest.mark.parametrize("char", list("/\\#?%:;,'"))
def test_run_ids_with_a_character_wandb_refuses(char):
    with pytest.raises(RunError, match=r"^runs/a/wandb_id: the W&B run id .* W&B run ids cannot hold"):
        check_run_id(f"ab{char}cd", "runs/a/wandb_id")


@pytest.mark.parametrize(("run_id", "match"), [("", "holds an empty W&B run id"), (" ab", "starts or ends")])
def test_empty_run_ids_and_ids_with_outer_whitespace(run_id, match):
    with pytest.raises(RunError, match=match):
        check_run_id(run_id, "wandb_id")


def test_check_wandb_run_reads_the_run_directory_id_only_when_logging_to_wandb(tmp_path):
    (tmp_path / "wandb_id").write_text("a/b\n")
    check_wandb_run(None, tmp_path)  # no W&B: the file is not read
    with pytest.raises(RunError, match=r"wandb_id: the W&B run id 'a/b' holds '/'"):
        check_wandb_run("project", tmp_path)
    (tmp_path / "wandb_id").write_text("1a2b3c4d\n")
    check_wandb_run("project", tmp_path)


@pytest.mark.parametrize(
    ("project", "match"),
    [
        ("team/runs", "argument --wandb: the W&B project name 'team/runs' holds '/'"),
        ("", "argument --wandb: expected a W&B project name"),
        ("p" * 200, "argument --wandb: the W&B project name 'pppppppppppppppppppp'... is 200 characters long"),
    ],
    ids=["slash", "empty", "too-long"],
)
def test_train_with_a_bad_wandb_project_says_one_line(capsys, tmp_path, project, match):
    _one_line_error(capsys, ["train", "--wandb", project, "--out", str(tmp_path / "r")], match)
    assert not (tmp_path / "r").exists()


def test_train_with_a_bad_wandb_project_in_the_config_file_says_one_line(capsys, tmp_path):
    config = tiny_config(tmp_path, 'wandb_project = "team?runs"\n')
    args = ["train", "--config", str(config), "--out", str(tmp_path / "r")]
    _one_line_error(capsys, args, "wandb_project: the W&B project name 'team?runs' holds '?'")
    assert not (tmp_path / "r").exists()


def test_tune_with_a_bad_wandb_project_says_one_line(capsys, tmp_path):
    args = ["tune", "--param", "ent_coef=0:0.01", "--wandb", "a%b", "--out", str(tmp_path / "t")]
    _one_line_error(capsys, args, "argument --wandb: the W&B project name 'a%b' holds '%'")


def test_resume_with_a_bad_wandb_run_id_says_one_line_before_training(capsys, tmp_path):
    out = tmp_path / "run"
    assert run_cli(train_args(out, tiny_config(tmp_path), 2 * 64)) == 0
    config = out / "config.toml"
    config.write_text(config.read_text() + 'wandb_project = "marl"\n')
    (out / "wandb_id").write_text("run:1\n")
    before = (out / "metrics.csv").read_text()
    capsys.readouterr()
    _one_line_error(capsys, resume_args(out, 4 * 64), f"{out / 'wandb_id'}: the W&B run id 'run:1' holds ':'")
    assert (out / "metrics.csv").read_text() == before
