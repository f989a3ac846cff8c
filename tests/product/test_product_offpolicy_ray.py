"""marljoint train --algorithm vdn|qmix|masac|maddpg --ray: Ray actors collect the rollouts, the run is the
in-process run bit for bit and resumes exactly; --policy-lag and --balance are refused in one line, and
--env-workers auto chooses no policy lag for them."""

from __future__ import annotations

import pytest
from _product_helpers import newest_checkpoint, run_cli
from rollout_checks import same_state

from marljoint.run.collection import with_auto_workers
from marljoint.run.spec import RunSpec

CONFIG = "\n".join(
    ["rollout_steps = 16", "hidden_sizes = [16]", "checkpoint_every = 2", "[offpolicy]", "learning_starts = 64"]
    + ["batch_size = 32", ""]
)


def vdn_args(out, config, total_steps, *extra):
    """A tiny vdn run on mock_v0: 4 env copies x 16 steps per iteration."""
    env = ["--env", "mock_v0", "--env-kwargs", '{"max_cycles": 5}', "--num-envs", "4"]
    run = ["--algorithm", "vdn", "--config", str(config), "--total-steps", str(total_steps)]
    return ["train", *env, *run, "--out", str(out), "--quiet", *extra]


def snapshot_workers(run_dir):
    """How many Ray actors the newest checkpoint's collector state holds snapshots of (0: none)."""
    return len(newest_checkpoint(run_dir)["env"].get("workers", []))


@pytest.mark.usefixtures("ray_local")
def test_a_vdn_run_on_ray_actors_is_the_in_process_run_and_resumes_bit_identically(tmp_path):
    config = tmp_path / "vdn.toml"
    config.write_text(CONFIG)
    assert run_cli(vdn_args(tmp_path / "local", config, 4 * 64)) == 0
    assert run_cli(vdn_args(tmp_path / "ray", config, 2 * 64, "--ray", "--num-workers", "2")) == 0
    assert 'collection = {backend = "ray", workers = 2}' in (tmp_path / "ray" / "config.toml").read_text()
    assert newest_checkpoint(tmp_path / "ray")["env_state_saved"]
    assert snapshot_workers(tmp_path / "ray") == 2  # the copies stepped in 2 Ray actors
    resume = ["train", "--out", str(tmp_path / "ray"), "--resume", "--total-steps", str(4 * 64), "--quiet"]
    assert run_cli(resume) == 0  # the resumed run collects on fresh Ray actors again
    local, ray = newest_checkpoint(tmp_path / "local")["trainer"], newest_checkpoint(tmp_path / "ray")["trainer"]
    assert ray["env_steps"] == 4 * 64 and ray["gradient_steps"] > 0
    for key in ("algorithm", "optimizers", "buffer", "generator", "env_steps", "gradient_steps"):
        assert same_state(local[key], ray[key]), key
    assert run_cli(["eval", str(tmp_path / "ray"), "--episodes", "2"]) == 0  # evaluation plays in-process


REFUSED = {
    "policy-lag": ["--ray", "--policy-lag", "1"],
    "balance": ["--env-workers", "2", "--balance"],
}


@pytest.mark.parametrize("algorithm", ["qmix", "maddpg"])
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_policy_lag_and_balance_are_refused_in_one_line(algorithm, case, tmp_path, capsys):
    args = ["train", "--env", "mock_v0", "--algorithm", algorithm, "--out", str(tmp_path / "run"), "--quiet"]
    assert run_cli([*args, *REFUSED[case]]) == 2
    err = capsys.readouterr().err
    expected = f"{algorithm} collects every rollout with the weights of its last gradient steps, so there is no"
    assert err.count("\n") == 1 and "Traceback" not in err and expected in err, err
    assert "drop --policy-lag and --balance" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("algorithm,lag", [("vdn", 0), ("maddpg", 0), ("mappo", 1)])
def test_env_workers_auto_collects_without_lag_for_off_policy_runs(algorithm, lag):
    spec = with_auto_workers(RunSpec.from_dict({"env": "mock_v0", "algorithm": algorithm, "num_envs": 4}), cores=4)
    assert spec.trainer.collection.backend == "subprocess" and spec.trainer.collection.policy_lag == lag


def test_a_lost_env_worker_ends_the_run_with_one_line_and_status_2(tmp_path, monkeypatch, capsys):
    from marljoint.collect import WorkerLostError
    from marljoint.offpolicy import OffPolicyTrainer

    def lost(self):
        raise WorkerLostError("env worker 1 (the Ray actor stepping env copies 2..3) died (RayActorError)")

    monkeypatch.setattr(OffPolicyTrainer, "collect", lost)
    config = tmp_path / "vdn.toml"
    config.write_text(CONFIG)
    assert run_cli(vdn_args(tmp_path / "run", config, 4 * 64)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "env worker 1 (the Ray actor stepping env copies 2..3) died" in err[0]
