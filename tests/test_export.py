"""Exported policies choose exactly the actions ``load_run`` chooses greedily, in TorchScript and in ONNX."""

from __future__ import annotations

import doctest
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from marljoint import export_run, load_run
from marljoint.cli import main
from marljoint.env.spaces import ActionLayout, GroupSpec, ObservationLayout
from marljoint.policies import ActorCritic
from marljoint.run.export import GreedyPolicy, greedy_policies

ROOT = Path(__file__).resolve().parents[1]

TINY = "rollout_steps = 16\nminibatch_size = 32\nn_epochs = 1\nhidden_sizes = [16, 16]\n"

RUNS = {
    # name: (env, env kwargs, extra settings)
    "spread": ("mpe2.simple_spread_v3", {"max_cycles": 25}, ["normalize_observations=false"]),
    "spread_normalized": (
        "mpe2.simple_spread_v3",
        {"max_cycles": 25},
        ["normalize_observations=true", "centralized_critic=true"],
    ),
    "kuhn": ("kuhn_poker_v0", {}, ["normalize_observations=true"]),
    "bucket_brigade": (
        "bucket_brigade_v0",
        {"scenario": "easy", "num_houses": 5, "num_agents": 3, "max_nights": 20},
        ["share_parameters=false", "normalize_observations=true"],
    ),
    "identity_box": ("identity_v0", {"action_type": "box", "num_agents": 2, "box_dim": 3}, []),
    "memory_gru": ("memory_v0", {"num_agents": 2}, ["recurrent='gru'"]),
    "memory_lstm_stacked": (
        "memory_v0",
        {"num_agents": 2},
        ["recurrent='lstm'", "share_parameters=false", "centralized_critic=true"],
    ),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Tiny runs (two iterations of 2 env copies × 16 steps) of every env above, trained once for the module."""
    root = tmp_path_factory.mktemp("export_runs")
    (root / "tiny.toml").write_text(TINY)
    for name, (env, kwargs, settings) in RUNS.items():
        sets = [arg for setting in settings for arg in ("--set", setting)]
        args = ["train", "--env", env, "--env-kwargs", json.dumps(kwargs), "--num-envs", "2", "--total-steps", "64"]
        args += ["--config", str(root / "tiny.toml"), "--out", str(root / name), "--quiet", *sets]
        assert main(args) == 0, name
    return root


def _export(run_dir, fmt, out=None):
    """``export_run``; ONNX cases are skipped where the onnx packages (the dev and export extras) are missing."""
    if fmt == "onnx":
        for package in ("onnx", "onnxscript", "onnxruntime"):
            pytest.importorskip(package)
    return export_run(run_dir, fmt, out=out)


def _observations(run_dir, rows, seed=0):
    """Per group, ``(obs, agent, mask, greedy env action)`` of at least ``rows`` present agents, from episodes
    played with sampled actions; the greedy actions are ``load_run``'s."""
    run = load_run(run_dir, num_envs=4, seed=seed)
    spec = run.trainer.spec
    parts = [[] for _ in spec.groups]
    state, count = run.env.reset(seed=seed), 0
    while count < rows:
        greedy = run.act(state)
        for g, group in enumerate(spec.groups):
            for j, agent in enumerate(group.agent_indices):
                present = state.alive[:, agent]
                mask = state.action_masks[g]
                start = np.asarray(group.action.start or 0)
                action = greedy[g][present, j] + (start if group.action.kind != "box" else 0)
                rows_mask = None if mask is None else mask[present, j]
                parts[g].append((state.obs[g][present, j], np.full(present.sum(), j), rows_mask, action))
                count += int(present.sum())
        state = run.env.step(run.trainer.act(state, deterministic=False))
    run.close()
    return [_stack(group_parts) for group_parts in parts]


def _stack(parts):
    obs, agent, mask, action = zip(*parts)
    stacked_mask = None if mask[0] is None else np.concatenate(mask).astype(bool)
    return (
        np.concatenate(obs).astype(np.float32),
        np.concatenate(agent).astype(np.int64),
        stacked_mask,
        np.concatenate(action),
    )


def _inputs(obs, agent, mask):
    return (obs, agent) if mask is None else (obs, agent, mask)


def _torchscript_actions(path, obs, agent, mask):
    module = torch.jit.load(str(path))
    with torch.no_grad():
        return module(*(torch.from_numpy(x) for x in _inputs(obs, agent, mask))).numpy()


def _onnx_session(path):
    ort = pytest.importorskip("onnxruntime")  # in the dev and export extras
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _onnx_actions(path, obs, agent, mask):
    session = _onnx_session(path)
    names = [i.name for i in session.get_inputs()]
    return session.run(["action"], dict(zip(names, _inputs(obs, agent, mask))))[0]


ACTIONS = {"torchscript": _torchscript_actions, "onnx": _onnx_actions}


@pytest.mark.parametrize("fmt", sorted(ACTIONS))
@pytest.mark.parametrize("name", ["spread", "spread_normalized", "kuhn", "bucket_brigade", "identity_box"])
def test_exported_policies_choose_load_runs_greedy_actions(runs, name, fmt, tmp_path):
    result = _export(runs / name, fmt, out=tmp_path)
    groups = _observations(runs / name, rows=1000)
    assert sum(len(agent) for _, agent, _, _ in groups) >= 1000
    for path, (obs, agent, mask, expected) in zip(result.files, groups):
        actions = ACTIONS[fmt](path, obs, agent, mask)
        assert actions.shape == expected.shape
        if expected.dtype.kind == "f":
            np.testing.assert_allclose(actions, expected, rtol=0, atol=1e-6)
        else:
            assert actions.dtype == np.int64
            assert (actions == expected).all(), f"{(actions != expected).sum()} of {len(expected)} actions differ"


def test_kuhn_masks_decide_the_action(runs, tmp_path):
    # Only the allowed action is chosen, whichever the network prefers.
    path = _export(runs / "kuhn", "torchscript", out=tmp_path).files[0]
    obs, agent, _, _ = _observations(runs / "kuhn", rows=50)[0]
    for allowed in (0, 1):
        mask = np.zeros((len(agent), 2), bool)
        mask[:, allowed] = True
        assert (_torchscript_actions(path, obs, agent, mask) == allowed).all()


def _recurrent_episode_actions(run_dir, fmt, out, steps=24):
    """Greedy actions of ``load_run`` and of the exported file over ``steps`` joint steps, carrying each agent's
    state as ``load_run`` does (zeros where its copy's episode restarts)."""
    step = _stepper(_export(run_dir, fmt, out=out).files[0], fmt)
    run = load_run(run_dir, num_envs=3, seed=1)
    group = run.trainer.spec.groups[0]
    copies, agents = 3, group.size
    state = run.env.reset(seed=1)
    hidden = None
    expected, got = [], []
    for _ in range(steps):
        greedy = run.act(state)[0]
        obs = state.obs[0].reshape(copies * agents, -1).astype(np.float32)
        agent = np.tile(np.arange(agents), copies).astype(np.int64)
        mask = state.action_masks[0].reshape(copies * agents, -1)
        if hidden is None or state.reset_envs.any():
            width = json.loads((out / "manifest.json").read_text())["groups"][0]["inputs"]["state"]["shape"][1]
            fresh = np.zeros((copies * agents, width), np.float32)
            hidden = fresh if hidden is None else np.where(np.repeat(state.reset_envs, agents)[:, None], fresh, hidden)
        actions, hidden = step(obs, agent, mask, hidden)
        expected.append(greedy.reshape(-1))
        got.append(actions)
        state = run.env.step([greedy])
    run.close()
    return np.concatenate(expected), np.concatenate(got)


def _stepper(path, fmt):
    """``step(obs, agent, mask, state) -> (action, next_state)`` of an exported recurrent file."""
    if fmt == "torchscript":
        module = torch.jit.load(str(path))

        def step(*inputs):
            with torch.no_grad():
                actions, hidden = module(*(torch.from_numpy(x) for x in inputs))
            return actions.numpy(), hidden.numpy()

        return step
    session = _onnx_session(path)
    names = ("obs", "agent", "action_mask", "state")
    return lambda *inputs: tuple(session.run(["action", "next_state"], dict(zip(names, inputs))))


@pytest.mark.parametrize("fmt", sorted(ACTIONS))
@pytest.mark.parametrize("name", ["memory_gru", "memory_lstm_stacked"])
def test_recurrent_policies_carry_their_state_as_inputs_and_outputs(runs, name, fmt, tmp_path):
    expected, got = _recurrent_episode_actions(runs / name, fmt, tmp_path)
    assert (expected == got).all(), f"{(expected != got).sum()} of {len(expected)} actions differ"
    assert len(expected) == 24 * 3 * 2


def test_the_manifest_lists_agents_files_inputs_and_spaces(runs, tmp_path):
    result = _export(runs / "kuhn", "onnx", out=tmp_path)
    manifest = json.loads(result.manifest.read_text())
    assert manifest["format"] == "onnx" and manifest["agents"] == ["player_0", "player_1"]
    (group,) = manifest["groups"]
    assert group["file"] == "group_0.onnx" and (tmp_path / group["file"]).is_file()
    assert group["agents"] == ["player_0", "player_1"]
    assert group["inputs"] == {
        "obs": {"dtype": "float32", "shape": ["B", 9]},
        "agent": {"dtype": "int64", "shape": ["B"]},
        "action_mask": {"dtype": "bool", "shape": ["B", 2]},
    }
    assert group["outputs"] == {"action": {"dtype": "int64", "shape": ["B"]}}
    assert group["action_space"] == {"kind": "discrete", "nvec": [2], "start": [0]}
    assert group["observation"] == {"size": 9, "action_mask_in_observation": True, "normalized": True}
    session = _onnx_session(result.files[0])
    assert [i.name for i in session.get_inputs()] == ["obs", "agent", "action_mask"]


def test_one_row_batches_work(runs, tmp_path):
    # The files were traced with two rows; a batch of one must not be specialised away.
    for fmt, act in ACTIONS.items():
        path = _export(runs / "bucket_brigade", fmt, out=tmp_path / fmt).files[0]
        obs, agent, mask, expected = _observations(runs / "bucket_brigade", rows=3)[0]
        assert (act(path, obs[:1], agent[:1], mask[:1]) == expected[:1]).all()


def test_a_torchscript_file_runs_with_torch_alone(runs, tmp_path):
    path = _export(runs / "spread", "torchscript", out=tmp_path).files[0]
    script = (
        "import sys, torch\n"
        f"m = torch.jit.load({str(path)!r})\n"
        "a = m(torch.zeros(4, 18), torch.tensor([0, 1, 2, 0]), torch.ones(4, 5, dtype=torch.bool))\n"
        "assert a.shape == (4,) and a.dtype == torch.int64, a\n"
        "assert not any(name.startswith('marljoint') for name in sys.modules)\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def _image_network():
    obs = ObservationLayout("image", (4, 4, 1), np.dtype(np.uint8))
    action = ActionLayout("discrete", (2,), (), start=(0,))
    group = GroupSpec("a", (0,), ("a",), obs, action)
    return ActorCritic(
        obs, action, num_agents=1, share_parameters=True, generator=torch.Generator().manual_seed(0)
    ), group


def test_image_observations_are_refused_by_name():
    network, group = _image_network()
    with pytest.raises(ValueError, match=r"observes images \(4, 4, 1\); export handles flat observations only"):
        GreedyPolicy(network, group)


def test_other_activations_are_refused_by_name():
    obs = ObservationLayout("flat", (3,), np.dtype(np.float32))
    action = ActionLayout("discrete", (2,), (), start=(0,))
    group = GroupSpec("a", (0,), ("a",), obs, action)
    network = ActorCritic(obs, action, 1, True, activation=torch.relu, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="uses the activation .*relu.*; export handles the default tanh only"):
        GreedyPolicy(network, group)


def test_an_obs_shape_of_the_wrong_size_is_refused():
    obs = ObservationLayout("flat", (6,), np.dtype(np.float32))
    action = ActionLayout("discrete", (2,), (), start=(0,))
    group = GroupSpec("a", (0,), ("a",), obs, action)
    network = ActorCritic(obs, action, 1, True, generator=torch.Generator().manual_seed(0))
    assert GreedyPolicy(network, group, (2, 3)).obs_shape == (2, 3)
    with pytest.raises(ValueError, match=r"obs_shape \(4,\) holds 4 values, but the group's network reads 6"):
        GreedyPolicy(network, group, (4,))


def test_greedy_policies_are_copies(runs):
    run = load_run(runs / "spread")
    (policy,) = greedy_policies(run.trainer.joint_policy)
    before = policy.head.weight.clone()
    with torch.no_grad():
        run.trainer.joint_policy.networks[0].actor_head.weight.add_(1.0)
    run.close()
    assert torch.equal(policy.head.weight, before)
    assert policy.obs_shape == (18,) and policy.input_names == ("obs", "agent", "action_mask")


@pytest.mark.parametrize("fmt", sorted(ACTIONS))
def test_random_masks_with_blocked_heads_match_the_masked_distributions_mode(runs, fmt, tmp_path):
    # Bucket brigade's heads (5, 2, 2) differ in size; some rows block a whole head, which training leaves unmasked.
    path = _export(runs / "bucket_brigade", fmt, out=tmp_path).files[0]
    run = load_run(runs / "bucket_brigade")
    policy = run.trainer.joint_policy
    run.close()
    generator = torch.Generator().manual_seed(0)
    batch, agents, size = 400, 3, policy.spec.groups[0].observation.size
    obs = torch.rand(batch, agents, size, generator=generator)
    mask = torch.rand(batch, agents, 9, generator=generator) < 0.5
    mask[::7, :, 5:7] = False
    with torch.no_grad():
        outputs = policy.forward([obs], torch.ones(batch, agents, dtype=torch.bool))
        (expected,), _ = policy.sample(outputs, [mask], deterministic=True)
    agent = torch.arange(agents).repeat(batch)
    got = ACTIONS[fmt](path, obs.reshape(-1, size).numpy(), agent.numpy(), mask.reshape(-1, 9).numpy())
    assert (got == expected.reshape(-1, 3).numpy()).all()


def test_the_docs_examples_run(runs):
    pytest.importorskip("onnxruntime")
    _export(runs / "kuhn", "onnx")
    _export(runs / "spread", "torchscript")
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "export.md").read_text(), re.S)
    assert len(blocks) == 2
    for block in blocks:
        namespace: dict = {}
        exec(block.replace('"runs/', f'"{runs}/'), namespace)
        assert namespace["action"].shape in ((1,), (3,))


def test_the_modules_examples_run():
    import marljoint.cli.export
    import marljoint.run.export

    for module in (marljoint.run.export, marljoint.cli.export):
        assert doctest.testmod(module).failed == 0


def test_the_runs_cover_files_with_and_without_observation_statistics(runs, tmp_path):
    normalized = {
        name: json.loads(_export(runs / name, "torchscript", out=tmp_path / name).manifest.read_text())["groups"][0][
            "observation"
        ]["normalized"]
        for name in ("spread", "spread_normalized")
    }
    assert normalized == {"spread": False, "spread_normalized": True}
