"""Deeply nested TOML and JSON (a config file, a run's config.toml, --env-kwargs, --set, --wrap) is refused with one
line naming where it came from and the limit, before a recursive parser can run out of stack."""

from __future__ import annotations

import json

import pytest
from _product_helpers import resume_args, run_cli, tiny_config, train_args

from marljoint.run import _toml
from marljoint.run.errors import RunError
from marljoint.run.spec import parse_env_kwargs, read_config_file

DEEP = 5000
"""Far past the depth at which ``tomllib`` and ``json`` raise RecursionError (about 500 and 1000)."""


def _one_line_error(capsys, args: list[str], match: str) -> str:
    code = run_cli(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[:2000]
    assert match in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    "text",
    [
        "a = " + "[" * DEEP + "]" * DEEP,
        "a = " + "{b = " * DEEP + "1" + "}" * DEEP,
        "[" + ".".join(["t"] * 100) + "]\nx = 1",  # a header nests without brackets
        ".".join(["t"] * 100) + " = 1",  # and so does a dotted key
    ],
    ids=["arrays", "inline-tables", "header", "dotted-key"],
)
def test_toml_nested_too_deep_is_refused_naming_its_source(text):
    with pytest.raises(_toml.NestingTooDeep, match=r"^config file a\.toml nests .* deeper than 64 levels"):
        _toml.loads(text, "config file a.toml")


def test_toml_at_the_limit_and_brackets_in_strings_and_comments_are_read():
    at_limit = "a = " + "[" * _toml.MAX_NESTING + "]" * _toml.MAX_NESTING
    assert _toml.loads(at_limit)["a"] is not None
    text = f"s = \"{'[' * 100}\"\nl = '{'{' * 100}'\nm = '''\n{'[' * 100}'''\n# {'[' * 100}\nn = 1"
    assert _toml.loads(text)["n"] == 1


def test_one_level_past_the_limit_is_refused():
    text = "a = " + "[" * (_toml.MAX_NESTING + 1) + "]" * (_toml.MAX_NESTING + 1)
    with pytest.raises(_toml.NestingTooDeep, match="deeper than 64 levels"):
        _toml.loads(text)


def test_json_nested_too_deep_is_refused_and_brackets_in_strings_are_not_counted():
    with pytest.raises(_toml.NestingTooDeep, match=r"^--env-kwargs nests arrays and objects deeper than 64 levels"):
        _toml.loads_json("[" * DEEP + "]" * DEEP, "--env-kwargs")
    assert _toml.loads_json(json.dumps({"a": "[" * 100 + '\\"'})) == {"a": "[" * 100 + '\\"'}


def test_read_config_file_names_the_file(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text("a = " + "[" * DEEP + "]" * DEEP + "\n")
    with pytest.raises(RunError, match=rf"^config file {path} nests arrays and tables deeper than 64 levels"):
        read_config_file(path)


def test_parse_env_kwargs_refuses_deep_json():
    with pytest.raises(RunError, match="^env_kwargs nests arrays and objects deeper than 64 levels"):
        parse_env_kwargs('{"a": ' + "[" * DEEP + "]" * DEEP + "}")


def test_train_with_a_deep_config_file_says_one_line(capsys, tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text("n_epochs = 2\na = " + "{b = " * DEEP + "1" + "}" * DEEP + "\n")
    _one_line_error(capsys, ["train", "--config", str(path), "--out", str(tmp_path / "r")], f"config file {path} nests")
    assert not (tmp_path / "r").exists()


def test_train_with_deep_env_kwargs_in_the_config_file_says_one_line(capsys, tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text(f"env_kwargs = {json.dumps('[' * DEEP + ']' * DEEP)}\n")
    _one_line_error(capsys, ["train", "--config", str(path), "--out", str(tmp_path / "r")], "env_kwargs nests")


@pytest.mark.parametrize(
    ("option", "value", "match"),
    [
        ("--env-kwargs", "[" * DEEP + "]" * DEEP, "argument --env-kwargs: the JSON object nests"),
        ("--set", "hidden_sizes=" + "[" * DEEP + "]" * DEEP, "argument --set: the value of hidden_sizes nests"),
        ("--set", "env_kwargs=" + '{"a":' * DEEP + "1" + "}" * DEEP, "argument --set: the value of env_kwargs nests"),
        ("--wrap", "resize_v1:x_size=" + "[" * DEEP + "]" * DEEP, "argument --wrap: the value of x_size nests"),
    ],
    ids=["env-kwargs", "set", "set-json", "wrap"],
)
def test_train_with_deep_command_line_values_says_one_line(capsys, tmp_path, option, value, match):
    line = _one_line_error(capsys, ["train", option, value, "--out", str(tmp_path / "r")], match)
    assert "64 levels" in line


@pytest.mark.parametrize("command", ["psro", "nfsp"])
def test_best_response_commands_with_deep_env_kwargs_say_one_line(capsys, tmp_path, command):
    args = [command, "--env", "kuhn_poker_v0", "--out", str(tmp_path / "r"), "--env-kwargs", "[" * DEEP + "]" * DEEP]
    _one_line_error(capsys, args, "--env-kwargs nests arrays and objects deeper than 64 levels")


def test_resume_of_a_run_whose_config_toml_nests_too_deep_says_one_line(capsys, tmp_path):
    out = tmp_path / "run"
    assert run_cli(train_args(out, tiny_config(tmp_path), 2 * 64)) == 0
    config = out / "config.toml"
    config.write_text(config.read_text() + "deep = " + "[" * DEEP + "]" * DEEP + "\n")
    capsys.readouterr()
    _one_line_error(capsys, resume_args(out, 4 * 64), f"config file {config} nests arrays and tables deeper than 64")
