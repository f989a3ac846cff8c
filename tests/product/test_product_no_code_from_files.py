"""No code runs from files the user did not write: crafted checkpoints, PSRO and NFSP states and env snapshots are
refused (one line, exit status 2, for the command line) before anything in them is unpickled, and a run received
from someone else resumes only when the user vouches for it."""

from __future__ import annotations

import builtins
import pickle

import pytest
import torch
from _product_helpers import newest_checkpoint, run_cli, tiny_config, tiny_spec, train_args

import marljoint
from marljoint import JointMultiAgentTrainer
from marljoint.checkpoint import CheckpointError, atomic_torch_save, list_checkpoints, load_checkpoint
from marljoint.run.train import RunError, load_run_spec, make_env, train_run
from marljoint.trust import SnapshotTrustError, resign, sign

_FORMAT = "marljoint-checkpoint-v1"


class _WritesMarker:
    """Unpickling this creates the marker file: the kind of object a malicious file carries."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (builtins.open, (self.marker, "w"))


def _crafted_zip(path, marker, key="trainer"):
    """A torch zip checkpoint whose state holds the payload."""
    torch.save({"format": _FORMAT, "state": {key: _WritesMarker(marker)}}, path)


def _crafted_raw_pickle(path, marker, key="trainer"):
    """A plain pickle file (not torch's zip layout) holding the payload."""
    with open(path, "wb") as f:
        pickle.dump({"format": _FORMAT, "state": {key: _WritesMarker(marker)}}, f, protocol=2)


CRAFTERS = {"torch-zip": _crafted_zip, "raw-pickle": _crafted_raw_pickle}


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err and len(err.splitlines()) == 1, err
    assert err.startswith("marljoint") and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished tiny run (2 iterations, checkpoints with env snapshots), shared by the cases that only read it."""
    root = tmp_path_factory.mktemp("no_code")
    assert run_cli(train_args(root / "run", tiny_config(root), 2 * 64)) == 0
    return root / "run"


def _copy_run(source, target):
    import shutil

    shutil.copytree(source, target)
    return target


@pytest.mark.parametrize("crafter", sorted(CRAFTERS))
def test_eval_refuses_a_crafted_checkpoint_in_one_line(trained, tmp_path, capsys, crafter):
    out = _copy_run(trained, tmp_path / "run")
    marker = tmp_path / "ran"
    CRAFTERS[crafter](list_checkpoints(out / "checkpoints")[-1], marker)
    assert run_cli(["eval", str(out), "--episodes", "1"]) == 2
    assert "refused to load" in _one_line(capsys)
    assert not marker.exists()


@pytest.mark.parametrize("crafter", sorted(CRAFTERS))
def test_load_run_and_trainer_load_refuse_a_crafted_checkpoint(trained, tmp_path, crafter):
    out = _copy_run(trained, tmp_path / "run")
    marker = tmp_path / "ran"
    newest = list_checkpoints(out / "checkpoints")[-1]
    CRAFTERS[crafter](newest, marker)
    with pytest.raises((RunError, CheckpointError), match=r"refused to load .*could run code when loaded"):
        marljoint.load_run(out)
    spec = load_run_spec(out)
    env = make_env(spec)
    try:
        trainer = JointMultiAgentTrainer.from_env(env, spec.trainer)
        with pytest.raises(CheckpointError, match=r"refused to load .*could run code when loaded"):
            trainer.load(str(newest))
    finally:
        env.close()
    assert not marker.exists()


def _replace_snapshot(run_dir, snapshot: bytes) -> None:
    """Re-saves the newest checkpoint of ``run_dir`` with ``snapshot`` as its env copies' bytes."""
    newest = list_checkpoints(run_dir / "checkpoints")[-1]
    state = load_checkpoint(newest)
    state["env"] = {**state["env"], "env": snapshot}
    atomic_torch_save(state, newest)


def _payload_bytes(marker) -> bytes:
    return pickle.dumps({"envs": [_WritesMarker(marker)]})


@pytest.mark.parametrize(
    "how,message,extra",
    [
        ("unsigned", "the env snapshot is not signed", []),
        ("unsigned", "the env snapshot is not signed", ["--env-workers", "2"]),
        ("signed-by-someone-else", "signature does not match this user's key", []),
        ("signature-kept-payload-swapped", "signature does not match this user's key", []),
    ],
)
def test_resume_refuses_a_crafted_env_snapshot_before_unpickling_it(trained, tmp_path, capsys, how, message, extra):
    out = _copy_run(trained, tmp_path / "run")
    marker = tmp_path / "ran"
    payload = _payload_bytes(marker)
    genuine = load_checkpoint(list_checkpoints(out / "checkpoints")[-1])["env"]["env"]
    crafted = {
        "unsigned": payload,
        "signed-by-someone-else": sign(payload, key=b"k" * 32),
        "signature-kept-payload-swapped": genuine[: len(genuine) - len(payload)] + payload,
    }[how]
    _replace_snapshot(out, crafted)
    assert run_cli(["train", "--out", str(out), "--resume", "--total-steps", str(4 * 64), "--quiet", *extra]) == 2
    err = _one_line(capsys)
    assert message in err and "--trust-snapshot" in err and "ckpt_" in err, err
    assert not marker.exists()


def test_trust_snapshot_needs_resume(tmp_path, capsys):
    args = ["train", "--env", "mock_v0", "--out", str(tmp_path / "new"), "--trust-snapshot", "--quiet"]
    assert run_cli(args) == 2
    assert "--trust-snapshot only applies to --resume" in _one_line(capsys)
    assert not (tmp_path / "new").exists()


def test_a_foreign_but_genuine_run_resumes_bit_for_bit_only_when_trusted(tmp_path, capsys):
    spec = tiny_spec(4)
    train_run(spec, tmp_path / "straight", progress=False)
    train_run(spec, tmp_path / "received", progress=False, stop_after=3)  # stops mid-episode, checkpoint at 2
    # As if written on another machine: the same snapshot, signed under another user's key.
    newest = newest_checkpoint(tmp_path / "received")
    _replace_snapshot(tmp_path / "received", resign(newest["env"]["env"], key=b"someone else's key 32 bytes long"))
    assert run_cli(["eval", str(tmp_path / "received"), "--episodes", "1"]) == 0  # evaluating never reads it
    capsys.readouterr()
    resume = ["train", "--out", str(tmp_path / "received"), "--resume", "--quiet"]
    assert run_cli(resume) == 2
    assert "--trust-snapshot" in _one_line(capsys)
    assert run_cli([*resume, "--trust-snapshot"]) == 0
    a, b = newest_checkpoint(tmp_path / "straight"), newest_checkpoint(tmp_path / "received")
    assert a["trainer"]["iteration"] == b["trainer"]["iteration"] == 4
    for x, y in zip(a["trainer"]["policies"], b["trainer"]["policies"]):
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    assert torch.equal(a["trainer"]["generator"], b["trainer"]["generator"])


def test_trust_snapshot_in_python_restores_a_foreign_snapshot(trained):
    spec = load_run_spec(trained)
    state = load_checkpoint(list_checkpoints(trained / "checkpoints")[-1])
    foreign = {**state["env"], "env": resign(state["env"]["env"], key=b"x" * 32)}
    env = make_env(spec)
    try:
        trainer = JointMultiAgentTrainer.from_env(env, spec.trainer)
        trainer.load_state_dict(state["trainer"])
        with pytest.raises(SnapshotTrustError, match=r"does not match this user's key .*trust_snapshot=True"):
            trainer.load_env_state(foreign)
        trainer.load_env_state(foreign, trust_snapshot=True)
        trainer.update(trainer.collect_rollout())
    finally:
        env.close()


def _psro_run(out):
    assert run_cli(["psro", "--env", "kuhn_poker_v0", "--oracle", "exact", "--iterations", "1", "--out", str(out)]) == 0


def _nfsp_run(out):
    assert run_cli(["nfsp", "--env", "kuhn_poker_v0", "--num-envs", "8", "--iterations", "1", "--out", str(out)]) == 0


@pytest.mark.parametrize("method", ["psro", "nfsp"])
@pytest.mark.parametrize("crafter", sorted(CRAFTERS))
def test_psro_and_nfsp_resume_refuse_a_crafted_state_in_one_line(tmp_path, capsys, method, crafter):
    out = tmp_path / "run"
    (_psro_run if method == "psro" else _nfsp_run)(out)
    capsys.readouterr()
    marker = tmp_path / "ran"
    newest = list_checkpoints(out / "checkpoints")[-1]
    CRAFTERS[crafter](newest, marker)
    args = [method, "--out", str(out), "--iterations", "3", "--resume"]
    assert run_cli(args) == 2
    err = _one_line(capsys)
    assert f"refused to load {newest}" in err and "could run code when loaded" in err, err
    assert not marker.exists()


def test_a_psro_state_of_the_former_pickled_format_is_refused_saying_what_to_do(tmp_path):
    from marljoint.best_response.population import UniformPolicy
    from marljoint.env.spaces import ActionLayout
    from marljoint.run.migrations import read_psro_checkpoint

    out = tmp_path / "run"
    out.mkdir()
    state = {"populations": [[UniformPolicy(ActionLayout("discrete", (2,), ()))]]}  # the policy objects themselves
    torch.save({"format": _FORMAT, "state": state}, out / "psro.pt")
    with pytest.raises(CheckpointError, match="a PSRO checkpoint of an earlier marljoint version.*--force"):
        read_psro_checkpoint(out)


def test_psro_and_nfsp_checkpoints_load_weights_only(tmp_path):
    _psro_run(tmp_path / "psro")
    _nfsp_run(tmp_path / "nfsp")
    # no objects: the weights-only loader takes them
    psro = load_checkpoint(list_checkpoints(tmp_path / "psro" / "checkpoints")[-1])["trainer"]
    assert {member["kind"] for population in psro["policies"] for member in population} == {"uniform", "kuhn_table"}
    assert load_checkpoint(list_checkpoints(tmp_path / "nfsp" / "checkpoints")[-1])["trainer"]["iteration"] == 1
