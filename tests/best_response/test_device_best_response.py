"""PSRO and NFSP run every network on their config's ``device``.

Without a GPU, torch's ``meta`` device stands in for one (its tensors hold no data, and mixing them with CPU tensors
raises): the runs are built on it and every network is checked to live there, the trainers each run builds are
recorded instead of trained (training reads values back to the host, which data-less tensors cannot give), and the
places where frozen policies meet the CPU (simulation, tabulation, stacking, checkpoints) are checked with policies
that live on it. The tests marked ``gpu`` run short runs on CUDA and compare them with the CPU's.
"""

import csv
import math
import re

import numpy as np
import pytest
import torch
from torch import nn

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.best_response import NFSP, PSRO, NfspConfig, PsroConfig
from marljoint.best_response.games import KuhnGame
from marljoint.best_response.members import member_from_plain, member_to_plain
from marljoint.best_response.opponents import simulate_profiles
from marljoint.best_response.population import UniformPolicy, policy_device
from marljoint.checkpoint import list_checkpoints, load_checkpoint
from marljoint.cli import main
from marljoint.policies import ActorCritic, AgentPolicy
from marljoint.policies.stack import PolicyStack
from marljoint_envs import kuhn_poker_v0

TRAINER = JointTrainerConfig(
    num_envs=8, rollout_steps=8, minibatch_size=64, n_epochs=1, hidden_sizes=(16,), share_parameters=False
)
KUHN_CLI = ["--env", "kuhn_poker_v0", "--num-envs", "8", "--quiet"]
# Columns that measure time, the only ones two runs of the same computation may differ in.
TIMES = ("wall_time", "sps", "br_seconds", "iteration_seconds")


def run_cli(args):
    try:
        return main(args)
    except SystemExit as exc:
        return int(exc.code or 0)


def read_rows(path):
    with open(path, newline="") as handle:
        return [{k: v for k, v in row.items() if k not in TIMES} for row in csv.DictReader(handle)]


def without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def parameter_devices(modules):
    return {p.device.type for module in modules for p in module.parameters()}


class _Stop(Exception):
    """Raised in place of training, once the trainer's settings are recorded."""


def record_trainers(monkeypatch):
    """From now on, the trainers built raise :class:`_Stop` instead; returns the list their devices go to."""
    devices = []

    def record(cls, env, config, **kwargs):
        devices.append(config.device)
        raise _Stop

    monkeypatch.setattr(JointMultiAgentTrainer, "from_env", classmethod(record))
    return devices


# ---------------------------------------------------------------------------------------------------- settings
@pytest.mark.parametrize("config", [PsroConfig, NfspConfig])
def test_a_device_that_is_no_torch_device_is_refused(config):
    with pytest.raises(ValueError, match=r"device must name a torch device such as 'cpu', 'cuda'.*got 'gpu'"):
        config(trainer=TRAINER, device="gpu")
    with pytest.raises(ValueError, match=r"device must name a torch device .* got 1"):
        config(trainer=TRAINER, device=1)


@pytest.mark.parametrize("config", [PsroConfig, NfspConfig])
def test_the_trainer_may_not_name_another_device_than_the_run(config):
    with pytest.raises(ValueError, match=r"trainer.device='meta' but device='cpu'.*set device='meta'"):
        config(trainer=TRAINER.replace(device="meta"), device="cpu")
    assert config(trainer=TRAINER.replace(device="meta"), device="meta").device == "meta"
    assert config(trainer=TRAINER, device="meta").replace(device="cpu").device == "cpu"


def test_ray_tasks_are_refused_a_device_they_cannot_reach():
    with pytest.raises(ValueError, match=r"device='cuda' with task_split=2 and engine='ray'.*engine='local'"):
        PsroConfig(task_split=2, device="cuda")
    assert PsroConfig(task_split=2, engine="local", device="cuda").device == "cuda"


@pytest.mark.parametrize("run", [PSRO, NFSP])
def test_a_device_this_machine_lacks_is_refused_before_anything_runs(run, monkeypatch):
    without_cuda(monkeypatch)
    built_trainers = record_trainers(monkeypatch)
    config = PsroConfig if run is PSRO else NfspConfig
    with pytest.raises(ValueError, match=r"device='cuda', but this torch build sees no CUDA GPU.*use device='cpu'"):
        run(kuhn_poker_v0.raw_env, config(trainer=TRAINER, device="cuda"), KuhnGame())
    assert built_trainers == []


def test_loading_onto_a_device_this_machine_lacks_is_refused(tmp_path, monkeypatch):
    PSRO(kuhn_poker_v0.raw_env, PsroConfig(oracle="exact", iterations=1), KuhnGame()).save(tmp_path)
    NFSP(kuhn_poker_v0.raw_env, NfspConfig(trainer=TRAINER), KuhnGame()).save(tmp_path)
    without_cuda(monkeypatch)
    with pytest.raises(ValueError, match=r"device='cuda', but this torch build sees no CUDA GPU"):
        PSRO.load(tmp_path, kuhn_poker_v0.raw_env, KuhnGame(), device="cuda")
    with pytest.raises(ValueError, match=r"device='cuda:1', but this torch build sees no CUDA GPU"):
        NFSP.load(tmp_path, kuhn_poker_v0.raw_env, KuhnGame(), device="cuda:1")


# ---------------------------------------------------------------------------------------------------- the CLI
@pytest.mark.parametrize("command", ["psro", "nfsp"])
@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("cuda", r"device='cuda', but this torch build sees no CUDA GPU \(torch.cuda.is_available\(\) is False\)"),
        ("gpu", r"device must name a torch device such as 'cpu', 'cuda' or 'cuda:1', got 'gpu'"),
    ],
)
def test_the_cli_refuses_a_bad_device_in_one_line_and_writes_nothing(
    command, device, message, tmp_path, capsys, monkeypatch
):
    without_cuda(monkeypatch)
    out = tmp_path / "new"
    assert run_cli([command, *KUHN_CLI, "--iterations", "1", "--device", device, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"marljoint {command}: error: ")
    assert re.search(message, err), err
    assert not out.exists()


def test_the_cli_refuses_a_device_with_ray_tasks(tmp_path, capsys):
    out = tmp_path / "new"
    args = ["psro", *KUHN_CLI, "--device", "cuda", "--task-split", "2", "--out", str(out)]
    assert run_cli(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Ray hides the GPUs from tasks" in err
    assert not out.exists()


def test_the_cli_refuses_to_resume_on_a_device_this_machine_lacks(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    assert run_cli(["nfsp", *KUHN_CLI, "--iterations", "1", "--out", str(out)]) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    without_cuda(monkeypatch)
    assert run_cli(["nfsp", *KUHN_CLI, "--iterations", "2", "--resume", "--device", "cuda", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sees no CUDA GPU" in err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize(
    ("command", "extra"),
    [("psro", ["--iterations", "2", "--br-steps", "256"]), ("nfsp", ["--iterations", "1"])],
)
def test_device_cpu_is_the_default_bit_for_bit(command, extra, tmp_path):
    default, cpu = tmp_path / "default", tmp_path / "cpu"
    assert run_cli([command, *KUHN_CLI, *extra, "--out", str(default)]) == 0
    assert run_cli([command, *KUHN_CLI, *extra, "--device", "cpu", "--out", str(cpu)]) == 0
    assert read_rows(default / "metrics.csv") == read_rows(cpu / "metrics.csv")
    saved = [load_checkpoint(list_checkpoints(run / "checkpoints")[-1])["trainer"] for run in (default, cpu)]
    weights = [_tensors(state["policies" if command == "psro" else "trainer"]) for state in saved]
    assert len(weights[0]) > 0 and len(weights[0]) == len(weights[1])
    assert all(torch.equal(a, b) for a, b in zip(*weights))


def _tensors(tree):
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict):
        return [t for key in sorted(tree, key=str) for t in _tensors(tree[key])]
    if isinstance(tree, (list, tuple)):
        return [t for item in tree for t in _tensors(item)]
    return []


# ---------------------------------------------------------------------------------------------------- the networks
def test_nfsp_builds_every_network_on_its_device():
    nfsp = NFSP(kuhn_poker_v0.raw_env, NfspConfig(trainer=TRAINER, device="meta"), KuhnGame())
    assert parameter_devices(nfsp.trainer.policies) == {"meta"}
    assert parameter_devices(nfsp.average_policies) == {"meta"}
    assert {p.device.type for o in nfsp.optimizers for g in o.param_groups for p in g["params"]} == {"meta"}
    assert nfsp.trainer.value_normalizer.mean.device.type == "meta"
    assert [policy_device(p).type for p in nfsp.population_env.members[0]] == ["meta"]


def test_nfsp_estimates_its_gain_with_trainers_on_its_device(monkeypatch):
    nfsp = NFSP(kuhn_poker_v0.raw_env, NfspConfig(trainer=TRAINER, device="meta"), KuhnGame())
    built_trainers = record_trainers(monkeypatch)
    with pytest.raises(_Stop):
        nfsp._gain()
    assert built_trainers == ["meta"]


def test_psro_trains_every_best_response_on_its_device(monkeypatch):
    built_trainers = record_trainers(monkeypatch)
    config = PsroConfig(trainer=TRAINER, br_steps=64, device="meta", evaluation="simulation", episodes_per_entry=2)
    psro = PSRO(kuhn_poker_v0.raw_env, config, KuhnGame())
    assert psro.oracle.config.device == "meta"
    with pytest.raises(_Stop):
        psro.step()
    with pytest.raises(_Stop):
        PSRO(kuhn_poker_v0.raw_env, config.replace(gain_every=1), KuhnGame())
    with pytest.raises(_Stop):
        PSRO(kuhn_poker_v0.raw_env, config.replace(initial_policy="network"), KuhnGame())
    split = PSRO(kuhn_poker_v0.raw_env, config.replace(task_split=1, engine="local"), KuhnGame())
    with pytest.raises(_Stop):
        split.step()
    assert built_trainers == ["meta"] * 4


class _Probe(nn.Module):
    """A frozen policy on the meta device that records where its inputs are and answers on the CPU."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1, device="meta"), requires_grad=False)
        self.seen = []

    def action_probs(self, obs, mask=None):
        self.seen.append(obs.device.type)
        return [torch.full((obs.shape[0], 2), 0.5)]

    def act(self, obs, generator, mask=None, deterministic=False):
        self.seen += [obs.device.type, mask.device.type]
        return torch.zeros(obs.shape[0], dtype=torch.int64)


def test_frozen_policies_get_their_inputs_on_their_device():
    probe = _Probe()
    env = PettingZooJointEnv(kuhn_poker_v0.raw_env, num_envs=4, seed=0)
    uniform = UniformPolicy(env.spec.actions[1])
    means, _ = simulate_profiles(env, [[probe], [uniform]], np.zeros((1, 2), np.int64), 6, seed=3)
    assert np.isfinite(means).all() and probe.seen and set(probe.seen) == {"meta"}
    probe.seen.clear()
    table = KuhnGame().table(probe, 0)
    assert probe.seen == ["meta"] and np.allclose(table, 0.5)


def _network_policy(seed, slot=0):
    env = PettingZooJointEnv(kuhn_poker_v0.raw_env, num_envs=1, seed=0)
    spec = env.spec
    network = ActorCritic(
        spec.observations[0],
        spec.actions[0],
        num_agents=2,
        share_parameters=False,
        hidden_sizes=(8,),
        generator=torch.Generator().manual_seed(seed),
    )
    return AgentPolicy(network, slot)


def test_members_stack_on_their_device_and_act_there():
    members = [_network_policy(seed).to("meta") for seed in range(3)]
    assert PolicyStack.stackable(members)
    assert not PolicyStack.stackable([_network_policy(0), members[1]])  # one device per stack
    stack = PolicyStack(members)
    obs = torch.zeros(3, members[0].network.observation.size)
    actions = stack.act(torch.tensor([0, 2, 1]), obs, torch.Generator().manual_seed(0))
    assert stack.device.type == "meta" and actions.device.type == "meta" and actions.shape == (3,)


def test_checkpointed_members_hold_cpu_weights_and_load_onto_any_device():
    member = _network_policy(0, slot=1)
    plain = member_to_plain(member)
    assert {t.device.type for t in plain["network"]["weights"].values()} == {"cpu"}
    placed = member_from_plain(plain, "meta")
    assert isinstance(placed, AgentPolicy) and placed.slot == 1
    assert parameter_devices([placed]) == {"meta"}
    assert parameter_devices([member_from_plain(plain)]) == {"cpu"}


# Loading weights into data-less meta tensors keeps nothing, as torch warns; what is checked is where they go.
@pytest.mark.filterwarnings("ignore:.*to a meta parameter in the current model")
def test_a_cpu_run_resumes_on_another_device(tmp_path):
    config = PsroConfig(trainer=TRAINER, initial_policy="network", evaluation="simulation", episodes_per_entry=2)
    PSRO(kuhn_poker_v0.raw_env, config).save(tmp_path / "psro")
    psro = PSRO.load(tmp_path / "psro", kuhn_poker_v0.raw_env, device="meta")
    assert psro.config.device == "meta" and psro.oracle.config.device == "meta"
    assert {policy_device(p).type for population in psro.populations for p in population} == {"meta"}
    NFSP(kuhn_poker_v0.raw_env, NfspConfig(trainer=TRAINER), KuhnGame()).save(tmp_path / "nfsp")
    nfsp = NFSP.load(tmp_path / "nfsp", kuhn_poker_v0.raw_env, KuhnGame(), device="meta")
    assert nfsp.config.device == "meta"
    assert parameter_devices([*nfsp.trainer.policies, *nfsp.average_policies]) == {"meta"}


# ---------------------------------------------------------------------------------------------------- on a GPU
def _short_psro(device, out=None):
    config = PsroConfig(trainer=TRAINER.replace(num_envs=32), br_steps=2048, iterations=3, seed=1, device=device)
    psro = PSRO(kuhn_poker_v0.raw_env, config, KuhnGame())
    psro.run()
    if out is not None:
        psro.save(out)
    return psro


def _short_nfsp(device, out=None):
    config = NfspConfig(trainer=TRAINER.replace(num_envs=32), rollouts_per_iteration=4, seed=1, device=device)
    nfsp = NFSP(kuhn_poker_v0.raw_env, config, KuhnGame())
    nfsp.run(iterations=3)
    if out is not None:
        nfsp.save(out)
    return nfsp


@pytest.mark.gpu
def test_psro_on_cuda_matches_the_cpu_and_resumes_on_it(tmp_path):
    cuda, cpu = _short_psro("cuda", tmp_path), _short_psro("cpu")
    assert {policy_device(p).type for p in cuda.populations[0][1:]} == {"cuda"}
    assert math.isfinite(cuda.exploitability())
    assert abs(cuda.exploitability() - cpu.exploitability()) < 0.1
    resumed = PSRO.load(tmp_path, kuhn_poker_v0.raw_env, KuhnGame(), device="cpu")
    assert resumed.exploitability() == pytest.approx(cuda.exploitability(), abs=1e-5)
    resumed.run(iterations=4)
    assert len(resumed.history) == 5


@pytest.mark.gpu
def test_nfsp_on_cuda_matches_the_cpu_and_resumes_on_it(tmp_path):
    cuda, cpu = _short_nfsp("cuda", tmp_path), _short_nfsp("cpu")
    assert parameter_devices(cuda.average_policies) == {"cuda"}
    assert {t.device.type for t in _tensors(cuda.state_dict())} == {"cpu"}
    assert abs(cuda.exploitability() - cpu.exploitability()) < 0.1
    resumed = NFSP.load(tmp_path, kuhn_poker_v0.raw_env, KuhnGame(), device="cpu")
    assert resumed.exploitability() == pytest.approx(cuda.exploitability(), abs=1e-5)
    resumed.run(iterations=4)
    back = NFSP.load(tmp_path, kuhn_poker_v0.raw_env, KuhnGame(), device="cuda")
    back.run(iterations=4)
    assert len(resumed.history) == len(back.history) == 4


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("command", "extra"),
    [("psro", ["--iterations", "2", "--br-steps", "512"]), ("nfsp", ["--iterations", "2"])],
)
def test_the_cli_runs_on_cuda_and_resumes_on_the_cpu(command, extra, tmp_path):
    out = str(tmp_path / "run")
    assert run_cli([command, *KUHN_CLI, *extra, "--device", "cuda", "--out", out]) == 0
    more = ["--iterations", "3"]
    assert run_cli([command, *KUHN_CLI, *extra[2:], *more, "--resume", "--device", "cpu", "--out", out]) == 0
    rows = read_rows(tmp_path / "run" / "metrics.csv")
    assert all(0.0 <= float(row["exploitability"]) < 1.0 for row in rows)
