"""Resolving ``--env``, the TOML writer, checkpoint rotation, and the installed ``marljoint`` command."""

from __future__ import annotations

import math
import shutil
import subprocess

import pytest
import torch

from marljoint.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint
from marljoint.cli import main
from marljoint.run import _toml
from marljoint.run.registry import BUNDLED_ENVS, EnvSpecError, resolve_env


def test_bundled_name():
    env = resolve_env("counter_v0", {"num_agents": 3})
    assert env.make().possible_agents == ["agent_0", "agent_1", "agent_2"]
    assert "bucket_brigade_v0" in BUNDLED_ENVS


def test_module_path_uses_parallel_env():
    env = resolve_env("marljoint_envs.kuhn_poker_v0")
    assert env.factory.__name__ == "parallel_env"


def test_module_path_of_a_third_party_env():
    pytest.importorskip("mpe2")
    env = resolve_env("mpe2.simple_spread_v3", {"N": 2})
    assert len(env.make().possible_agents) == 2


def test_factory_path_and_env_fn():
    env = resolve_env("marljoint_envs.counter_v0:parallel_env", {"num_agents": 1})
    assert env.env_fn(truncate_at=3)().possible_agents == ["agent_0"]


def test_factory_signature_is_checked():
    with pytest.raises(EnvSpecError, match=r"does not accept the keyword argument\(s\) \['colour'\]"):
        resolve_env("marljoint_envs.bucket_brigade_v0:specialist_policy", {"colour": 1})


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("no_such_env_v0", "unknown env 'no_such_env_v0'"),
        ("no_such_package.env_v0", "is the package 'no_such_package' installed"),
        ("marljoint_envs:", "a factory path looks like"),
        ("marljoint_envs._common", "has neither parallel_env"),
        ("marljoint_envs.counter_v0:RENDER_MODES", "not a function"),
        ("", "non-empty string"),
    ],
)
def test_bad_names(name, match):
    with pytest.raises(EnvSpecError, match=match):
        resolve_env(name)


def test_toml_round_trip():
    values = {"a": 1, "b": 0.5, "c": math.inf, "d": 'x"y', "e": [1, 2], "f": {"g": True, "h": [[1.0]]}, "i": None}
    text = _toml.dumps(values)
    assert "# i is not set (None)" in text
    assert _toml.loads(text) == {k: v for k, v in values.items() if v is not None}
    with pytest.raises(TypeError, match="TOML cannot hold"):
        _toml.dumps({"x": object()})


def test_checkpoint_rotation_keeps_the_newest(tmp_path):
    for iteration in (1, 2, 3, 4):
        save_checkpoint(tmp_path, iteration, {"w": torch.tensor([iteration])}, keep=2)
    (tmp_path / ".ckpt_0000005.pt.abc.tmp").write_bytes(b"partial")
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt_0000003.pt", "ckpt_0000004.pt"]
    assert load_checkpoint(list_checkpoints(tmp_path)[-1])["w"].item() == 4
    with pytest.raises(ValueError, match="keep must be a positive integer"):
        save_checkpoint(tmp_path, 5, {}, keep=0)


def test_installed_command_reports_bad_input_in_one_line(tmp_path):
    command = shutil.which("marljoint") or pytest.skip("the marljoint command is not installed")
    proc = subprocess.run(
        [command, "train", "--env", "no_such_env_v0", "--out", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("marljoint train: error: unknown env 'no_such_env_v0'")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()


def test_train_help_documents_every_option(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in (
        "--env",
        "--env-kwargs",
        "--total-steps",
        "--num-envs",
        "--seed",
        "--out",
        "--config",
        "--redundancy",
        "--redundancy-coef",
        "--checkpoint-every",
        "--keep-checkpoints",
        "--resume",
        "--force",
        "--quiet",
    ):
        assert f"{option} " in text
