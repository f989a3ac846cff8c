"""``marljoint export``: files, manifest and messages, and bad input (one line on standard error, exit 2)."""

from __future__ import annotations

import json
import re
import sys

import pytest
from _product_helpers import run_cli, tiny_config, train_args

from marljoint_envs import counter_v0


def image_counter(**kwargs):
    """counter_v0 whose observation is a 1 × 1 × 1 image (an image policy, which export refuses)."""
    import supersuit

    return supersuit.reshape_v0(counter_v0.parallel_env(**kwargs), (1, 1, 1))


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """A finished tiny bucket brigade run (``run``, two checkpoints) and a tiny run on images (``images``)."""
    root = tmp_path_factory.mktemp("export")
    config = tiny_config(root)
    every_iteration = ("--checkpoint-every", "1", "--keep-checkpoints", "2")
    assert run_cli(train_args(root / "run", config, 2 * 64, *every_iteration)) == 0
    images = [
        "train",
        "--env",
        "test_product_export:image_counter",
        "--num-envs",
        "2",
        "--total-steps",
        "32",
        "--config",
        str(config),
        "--set",
        "normalize_observations=false",
        "--set",
        "minibatch_size=32",
        "--out",
        str(root / "images"),
        "--quiet",
    ]
    assert run_cli(images) == 0
    return root


@pytest.mark.parametrize("fmt, suffix", [("torchscript", ".pt"), ("onnx", ".onnx")])
def test_export_writes_one_file_per_group_and_a_manifest(place, fmt, suffix, capsys, tmp_path):
    if fmt == "onnx":
        pytest.importorskip("onnxscript")  # in the dev and export extras
    out = tmp_path / "deploy"
    assert run_cli(["export", str(place / "run"), "--format", fmt, "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(out / f"group_0{suffix}"), str(out / "manifest.json")]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == fmt and manifest["env"] == "bucket_brigade_v0"
    assert manifest["agents"] == ["agent_0", "agent_1"]
    (group,) = manifest["groups"]
    assert group["file"] == f"group_0{suffix}" and group["agents"] == ["agent_0", "agent_1"]
    assert group["action_space"] == {"kind": "multidiscrete", "nvec": [5, 2, 2], "start": [0, 0, 0]}
    assert group["outputs"]["action"] == {"dtype": "int64", "shape": ["B", 3]}
    assert manifest["checkpoint"].endswith("ckpt_0000002.pt")


def test_export_writes_into_the_run_by_default_and_takes_a_checkpoint(place, capsys):
    older = place / "run" / "checkpoints" / "ckpt_0000001.pt"
    assert run_cli(["export", str(place / "run"), "--checkpoint", str(older), "--quiet"]) == 0
    assert capsys.readouterr().out == ""
    manifest = json.loads((place / "run" / "export" / "torchscript" / "manifest.json").read_text())
    assert manifest["checkpoint"] == str(older)
    assert (place / "run" / "export" / "torchscript" / "group_0.pt").is_file()


CASES = {
    "missing-run": (["export", "{root}/no_such_run"], "is not a marljoint run directory"),
    "unknown-format": (
        ["export", "{root}/run", "--format", "tflite"],
        "unknown export format 'tflite'; choose one of torchscript, onnx",
    ),
    "missing-checkpoint": (["export", "{root}/run", "--checkpoint", "{root}/nope.pt"], "nope.pt does not exist"),
    "image-policy": (
        ["export", "{root}/images"],
        r"cannot export .*images: group \['agent_0', 'agent_1'\] observes images \(1, 1, 1\); export handles flat "
        "observations only",
    ),
}


def _one_line_error(capsys, code):
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("marljoint export: error: "), err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_gets_one_line_and_exit_2(place, name, capsys, tmp_path):
    args, message = CASES[name]
    args = [a.replace("{root}", str(place)) for a in args]
    err = _one_line_error(capsys, run_cli([*args, "--out", str(tmp_path / "out")]))
    assert re.search(message, err), err
    assert not (tmp_path / "out").exists()


def test_onnx_not_installed_names_the_extra(place, capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx fails, as where it is not installed
    code = run_cli(["export", str(place / "run"), "--format", "onnx", "--out", str(tmp_path / "out")])
    err = _one_line_error(capsys, code)
    assert "needs the onnx and onnxscript packages (onnx is missing)" in err
    assert 'pip install "marljoint[export]"' in err
    assert not (tmp_path / "out").exists()


def test_export_never_overwrites_files_it_did_not_write(place, capsys, tmp_path):
    run = str(place / "run")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "manifest.json").write_text('{"my": "notes"}\n')
    (mine / "other.txt").write_text("kept\n")
    assert run_cli(["export", run, "--out", str(mine), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"marljoint export: error: export --out {mine} already holds manifest.json, which no marljoint export wrote "
        "there; choose a new or empty directory (files of an earlier export to the same directory are replaced)"
    )
    assert (mine / "manifest.json").read_text() == '{"my": "notes"}\n' and not (mine / "group_0.pt").exists()
    (mine / "manifest.json").unlink()
    (mine / "group_0.pt").write_bytes(b"a file of the user's")
    assert run_cli(["export", run, "--out", str(mine), "--quiet"]) == 2
    assert "already holds group_0.pt" in capsys.readouterr().err
    assert (mine / "group_0.pt").read_bytes() == b"a file of the user's"
    (mine / "group_0.pt").unlink()
    assert run_cli(["export", run, "--out", str(mine), "--quiet"]) == 0  # beside other files: nothing overwritten
    assert run_cli(["export", run, "--out", str(mine), "--quiet"]) == 0  # an earlier export's files are replaced
    assert (mine / "other.txt").read_text() == "kept\n" and (mine / "group_0.pt").is_file()
