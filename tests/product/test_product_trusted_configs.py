"""A config file names code to call only when the user wrote it: a run's config.toml is signed with the user's key,
and one that is not (crafted, received, altered, or a --config file written by hand) may not name an env of the form
``package.module:function`` unless the user vouches for it with --trust-run. The crafted files here name
``os:system`` with a command that writes a marker file: the marker shows whether the function was called."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from _product_helpers import TINY_ENV_KWARGS, run_cli

import marljoint
from marljoint.run.config_trust import SIGNATURE_PREFIX, UntrustedConfigError, config_signed
from marljoint.run.spec import load_run_spec, resume_spec
from marljoint.trust import text_signature

FACTORY = "_config_envs:tiny_brigade"
TINY = ["--set", "rollout_steps=16", "--set", "minibatch_size=32", "--set", "n_epochs=1", "--set", "hidden_sizes=[16]"]


def _train(out, *extra: str) -> list[str]:
    """A tiny run (64 env steps per iteration) of the user's own factory env."""
    kwargs = ["--env-kwargs", json.dumps(TINY_ENV_KWARGS)]
    return ["train", "--env", FACTORY, *kwargs, "--num-envs", "4", *TINY, "--out", str(out), "--quiet", *extra]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def own_run(tmp_path_factory):
    """The user's own finished run (2 iterations) whose env is a function of a module on the path."""
    out = tmp_path_factory.mktemp("trusted_configs") / "own"
    assert run_cli(_train(out, "--total-steps", "128")) == 0
    return out


def _body(text: str) -> str:
    """A config's text without its signature line."""
    return text.split("\n", 1)[1] if text.startswith(SIGNATURE_PREFIX) else text


def _craft(text: str, marker) -> str:
    """``text`` with its env turned into a shell command that writes ``marker``."""
    text = re.sub(r"^env = .*$", 'env = "os:system"', text, flags=re.M)
    return re.sub(r"^env_kwargs = .*$", f'env_kwargs = {{command = "touch {marker}"}}', text, flags=re.M)


CRAFTED = {
    "unsigned": lambda text, marker: _craft(_body(text), marker),
    "signed-by-another-key": lambda text, marker: (
        f"{SIGNATURE_PREFIX}{text_signature(_craft(_body(text), marker), key=b'o' * 32)}\n{_craft(_body(text), marker)}"
    ),
    "signed-then-altered": lambda text, marker: _craft(text, marker),
}
WHY = {
    "unsigned": "is not signed",
    "signed-by-another-key": "is signed with another user's key, or was changed after it was signed",
    "signed-then-altered": "is signed with another user's key, or was changed after it was signed",
}


def _crafted_run(own_run, tmp_path, how):
    """A copy of the user's run whose config.toml was replaced: ``(run_dir, marker)``."""
    out = tmp_path / "crafted"
    shutil.copytree(own_run, out)
    marker = tmp_path / "MARKER"
    config = out / "config.toml"
    config.write_text(CRAFTED[how](config.read_text(), marker))
    return out, marker


COMMANDS = {
    "eval": lambda out: ["eval", str(out), "--episodes", "1"],
    "export": lambda out: ["export", str(out), "--quiet"],
    "resume": lambda out: ["train", "--out", str(out), "--resume", "--total-steps", "192", "--quiet"],
    "config": lambda out: ["train", "--config", str(out / "config.toml"), "--out", str(out.parent / "new"), "--quiet"],
}


@pytest.mark.parametrize("how", sorted(CRAFTED))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_crafted_config_never_calls_the_function_it_names(own_run, tmp_path, capsys, command, how):
    out, marker = _crafted_run(own_run, tmp_path, how)
    capsys.readouterr()
    assert run_cli(COMMANDS[command](out)) == 2
    err = _one_line(capsys)
    assert re.search(
        rf"config.toml: env = 'os:system' names a function to call, and the file {WHY[how]}.*"
        r"refused before anything was imported; .*--trust-run",
        err,
    ), err
    if command == "config":
        assert "give the env on the command line (--env os:system) if you wrote this file" in err, err
    assert not marker.exists()
    assert not (out.parent / "new").exists()


@pytest.mark.parametrize("how", sorted(CRAFTED))
def test_load_run_refuses_a_crafted_config_before_importing_anything(own_run, tmp_path, how):
    out, marker = _crafted_run(own_run, tmp_path, how)
    with pytest.raises(UntrustedConfigError, match=r"env = 'os:system' names a function to call.*trust_run=True"):
        marljoint.load_run(out)
    with pytest.raises(UntrustedConfigError, match="names a function to call"):
        marljoint.export_run(out)
    with pytest.raises(UntrustedConfigError, match="names a function to call"):
        resume_spec(out)
    assert not marker.exists()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_with_trust_run_the_function_a_config_names_is_called(own_run, tmp_path, capsys, command):
    out, marker = _crafted_run(own_run, tmp_path, "unsigned")
    run_cli([*COMMANDS[command](out), "--trust-run"])  # os.system returns no env: the command fails after the call
    assert marker.exists()


def test_load_run_with_trust_run_calls_the_function(own_run, tmp_path):
    out, marker = _crafted_run(own_run, tmp_path, "signed-by-another-key")
    with pytest.raises(ValueError, match="neither a PettingZoo ParallelEnv nor an AECEnv"):
        marljoint.load_run(out, trust_run=True)
    assert marker.exists()


def test_the_users_own_run_naming_a_function_needs_no_flag(own_run, tmp_path, capsys):
    assert config_signed((own_run / "config.toml").read_text())
    out = tmp_path / "own"
    shutil.copytree(own_run, out)
    assert run_cli(["eval", str(out), "--episodes", "1", "--json"]) == 0
    assert run_cli(["export", str(out), "--quiet"]) == 0
    assert run_cli(["train", "--out", str(out), "--resume", "--total-steps", "192", "--quiet"]) == 0
    run = marljoint.load_run(out)
    assert run.spec.env == FACTORY and run.trainer.iteration == 3
    run.close()
    assert run_cli(["train", "--config", str(out / "config.toml"), "--out", str(tmp_path / "again"), "--quiet"]) == 0
    assert load_run_spec(tmp_path / "again").env == FACTORY


def test_an_older_unsigned_run_resumes_once_with_trust_run_and_is_signed_again(own_run, tmp_path, capsys):
    out = tmp_path / "older"
    shutil.copytree(own_run, out)
    config = out / "config.toml"
    config.write_text(_body(config.read_text()))  # as written before runs were signed
    resume = ["train", "--out", str(out), "--resume", "--total-steps", "192", "--quiet"]
    assert run_cli(resume) == 2
    assert "is not signed (written by hand, or by a marljoint older than signed runs)" in _one_line(capsys)
    assert run_cli([*resume, "--trust-run"]) == 0
    assert config_signed(config.read_text())
    assert run_cli(["eval", str(out), "--episodes", "1"]) == 0  # no flag from now on


def test_a_config_written_by_hand_runs_its_function_env_when_the_env_is_typed_too(tmp_path, capsys):
    config = tmp_path / "mine.toml"
    kwargs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in TINY_ENV_KWARGS.items())
    config.write_text(f'env = "{FACTORY}"\nenv_kwargs = {{{kwargs}}}\ntotal_steps = 64\n')
    args = ["train", "--config", str(config), "--num-envs", "4", *TINY, "--quiet"]
    assert run_cli([*args, "--out", str(tmp_path / "refused")]) == 2
    assert f"give the env on the command line (--env {FACTORY}) if you wrote this file" in _one_line(capsys)
    assert not (tmp_path / "refused").exists()
    assert run_cli([*args, "--env", FACTORY, "--out", str(tmp_path / "typed")]) == 0
    assert run_cli([*args, "--trust-run", "--out", str(tmp_path / "trusted")]) == 0
    assert config_signed((tmp_path / "typed" / "config.toml").read_text())


def test_trust_run_needs_a_config_to_read(tmp_path, capsys):
    assert run_cli(["train", "--env", "mock_v0", "--out", str(tmp_path / "new"), "--trust-run", "--quiet"]) == 2
    assert "--trust-run only applies to a config file read: --resume" in _one_line(capsys)
    assert not (tmp_path / "new").exists()


def test_an_unsigned_config_may_still_name_bundled_envs_and_module_paths(own_run, tmp_path):
    out = tmp_path / "bundled"
    shutil.copytree(own_run, out)
    config = out / "config.toml"
    config.write_text(_body(config.read_text()).replace(f'env = "{FACTORY}"', 'env = "bucket_brigade_v0"'))
    assert load_run_spec(out).env == "bucket_brigade_v0"
    config.write_text(_body(config.read_text()).replace('env = "bucket_brigade_v0"', 'env = "marljoint_envs.mock_v0"'))
    assert load_run_spec(out).env == "marljoint_envs.mock_v0"


def test_a_run_signed_under_another_users_key_home_is_refused(own_run, tmp_path, monkeypatch, capsys):
    from marljoint import trust

    monkeypatch.setenv(trust.HOME_VARIABLE, str(tmp_path / "other_user"))  # another user: another key
    monkeypatch.setattr(trust, "_keys", {})
    assert config_signed((own_run / "config.toml").read_text()) is False
    assert run_cli(["eval", str(own_run), "--episodes", "1"]) == 2
    assert "is signed with another user's key, or was changed after it was signed" in _one_line(capsys)
    with pytest.raises(UntrustedConfigError, match=f"env = '{FACTORY}' names a function to call"):
        load_run_spec(own_run)


def test_only_a_signature_line_over_the_exact_text_counts():
    text = 'env = "os:system"\n'
    signed = f"{SIGNATURE_PREFIX}{text_signature(text)}\n{text}"
    assert config_signed(signed) is True
    assert config_signed(text) is None
    assert config_signed(signed + "# one more line\n") is False
    assert config_signed(signed.replace(SIGNATURE_PREFIX, SIGNATURE_PREFIX + "0")) is False
    assert config_signed(f"{SIGNATURE_PREFIX}{text_signature(text)}") is None  # a signature of nothing


@pytest.mark.parametrize("name", ["DeprecatedWrapper", "utils", "_DeprecatedWrapper", "aec_vector"])
def test_a_config_s_wrappers_name_only_supersuit_s_versioned_wrappers(name):
    from marljoint.run.errors import RunError
    from marljoint.run.spec import RunSpec

    with pytest.raises(RunError, match=f"supersuit has no wrapper '{name}'; some it has: action_lambda_v1"):
        RunSpec.from_dict({"wrappers": [name]})
    assert RunSpec.from_dict({"wrappers": ["color_reduction_v0"]}).wrappers == ("color_reduction_v0",)


def test_resuming_several_seeds_refuses_a_crafted_config_of_any_of_them(own_run, tmp_path, capsys):
    out, marker = _crafted_run(own_run, tmp_path, "unsigned")
    runs = tmp_path / "seeds"
    runs.mkdir()
    out.rename(runs / "seed_0")
    capsys.readouterr()
    args = ["train", "--out", str(runs), "--seeds", "0", "--resume", "--total-steps", "192", "--quiet"]
    assert run_cli(args) == 2
    assert re.search(r"seed_0.*env = 'os:system' names a function to call.*--trust-run", _one_line(capsys))
    assert not marker.exists()
    run_cli([*args, "--trust-run", "--jobs", "1"])
    assert marker.exists()


def test_a_resume_reports_an_unsafe_key_as_itself_not_as_a_checkpoint_that_does_not_fit(tmp_path, monkeypatch, capsys):
    from marljoint import trust

    out = tmp_path / "bundled"
    args = [*_train(out, "--total-steps", "128")]
    args[args.index(FACTORY)] = "bucket_brigade_v0"
    assert run_cli(args) == 0
    key = tmp_path / "home" / "snapshot.key"
    key.parent.mkdir()
    key.write_bytes(trust.user_key())
    key.chmod(0o644)
    monkeypatch.setenv(trust.HOME_VARIABLE, str(key.parent))
    monkeypatch.setattr(trust, "_keys", {})
    capsys.readouterr()
    assert run_cli(["train", "--out", str(out), "--resume", "--total-steps", "192", "--quiet"]) == 2
    err = _one_line(capsys)
    assert re.search(r"the key file .*snapshot.key has mode 0644, open to other users: .*chmod 600", err), err
    assert "does not fit" not in err and "refused to resume" not in err, err
    args[args.index(str(out))] = str(tmp_path / "new")  # a new run signs its config.toml: refused before it starts
    assert run_cli(args) == 2
    assert "snapshot.key has mode 0644" in _one_line(capsys)
    assert not (tmp_path / "new").exists()
