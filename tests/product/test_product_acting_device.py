"""``acting_device`` in ``marljoint train``: config.toml holds the device chosen and why, an explicit value wins,
a resume may change it, and a bad value gets one line and exit status 2."""

from __future__ import annotations

import pytest
from _product_helpers import resume_args, run_cli, tiny_config, train_args

from marljoint.run.train import load_run_spec


def test_config_toml_holds_the_acting_device_and_why(tmp_path):
    out = tmp_path / "run"
    assert run_cli(train_args(out, tiny_config(tmp_path), 64)) == 0
    text = (out / "config.toml").read_text()
    assert "# derived from this machine (cpu: the learner's device is the CPU); set it to override" in text
    assert '\nacting_device = "cpu"\n' in text


def test_an_explicit_acting_device_is_kept_and_a_resume_may_set_it_again(tmp_path):
    out = tmp_path / "run"
    assert run_cli(train_args(out, tiny_config(tmp_path), 64, "--set", "acting_device=cpu")) == 0
    text = (out / "config.toml").read_text()
    assert '\nacting_device = "cpu"\n' in text and "derived from this machine (cpu:" not in text
    assert run_cli(resume_args(out, 128, "--set", "acting_device=auto")) == 0
    assert load_run_spec(out).trainer.acting_device == "cpu"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("gpu", "acting_device must be auto or name a torch device such as 'cpu', 'cuda' or 'cuda:1', got 'gpu'"),
        ("meta", "acting_device must be 'auto', 'cpu' or the learner's device 'cpu', got 'meta'"),
    ],
)
def test_a_bad_acting_device_gets_one_line_and_exit_2(value, message, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli(train_args(out, tiny_config(tmp_path), 64, "--set", f"acting_device={value}")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err
    assert not out.exists()


def test_a_resume_on_another_device_chooses_the_acting_device_again(tmp_path):
    from _product_helpers import tiny_spec

    from marljoint.run.train import resume_spec, write_config

    (tmp_path / "run").mkdir()
    spec = tiny_spec(2, device="cuda", acting_device="cuda")
    write_config(spec, tmp_path / "run" / "config.toml")
    moved = resume_spec(tmp_path / "run", {"device": "cpu"})
    assert (moved.trainer.device, moved.trainer.acting_device) == ("cpu", "auto")
    kept = resume_spec(tmp_path / "run", {"device": "cpu", "acting_device": "cpu"})
    assert kept.trainer.acting_device == "cpu"
    assert resume_spec(tmp_path / "run", {"device": "cuda"}).trainer.acting_device == "cuda"


def test_a_run_that_acted_on_a_gpu_loads_on_the_cpu(tmp_path):
    from marljoint import load_run

    out = tmp_path / "run"
    assert run_cli(train_args(out, tiny_config(tmp_path), 64)) == 0
    config = out / "config.toml"
    text = config.read_text().replace('\ndevice = "cpu"\n', '\ndevice = "cuda"\n')
    config.write_text(text.replace('\nacting_device = "cpu"\n', '\nacting_device = "cuda"\n'))
    assert load_run_spec(out).trainer.acting_device == "cuda"
    run = load_run(out)
    try:
        assert (run.trainer.config.device, run.trainer.config.acting_device) == ("cpu", "cpu")
    finally:
        run.close()
