"""A trained run's acting policies as standalone files: TorchScript (runs with torch alone) or ONNX (runs with
onnxruntime), one file per agent group, with a JSON manifest.

Each file holds everything between an agent's observation and its env action: the reshape of a Box observation to
the flat vector the network reads, the run's observation statistics when it normalises observations, the actor's
trunk (and recurrent core), the action head, and the greedy choice that ``marljoint eval`` makes (the most likely
choice of every categorical head, honouring the action mask; the mean of a Box action, clipped to its bounds). The
critic is left out: acting does not read it. ``docs/export.md`` gives the input and output contract.

Example:
    >>> result = export_run("runs/spread", "onnx")  # doctest: +SKIP
    >>> result.files  # doctest: +SKIP
    (PosixPath('runs/spread/export/onnx/group_0.onnx'),)
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from marljoint.env.spaces import GroupSpec
from marljoint.policies.actor_critic import ActorCritic
from marljoint.policies.joint import JointPolicy
from marljoint.policies.layers import tanh
from marljoint.policies.recurrent import StackedRecurrentCell
from marljoint.run.algorithms import acting_policy_of
from marljoint.run.errors import ExportRefused, RunError
from marljoint.run.evaluate import load_run
from marljoint.run.rundir import run_path

__all__ = [
    "EXPORT_FORMATS",
    "MANIFEST_FILE",
    "ExportResult",
    "GreedyPolicy",
    "export_run",
    "greedy_policies",
]

EXPORT_FORMATS: tuple[str, ...] = ("torchscript", "onnx")
"""The formats :func:`export_run` writes: ``"torchscript"`` (``.pt``) and ``"onnx"`` (``.onnx``)."""

MANIFEST_FILE = "manifest.json"
"""The manifest beside the exported files: agents, groups, files, inputs, outputs and spaces."""

EXPORT_DIR = "export"
"""Where :func:`export_run` writes by default: ``RUN_DIR/export/<format>/``."""

ONNX_OPSET = 18
"""The ONNX operator set of exported files (onnxruntime 1.17 and later run it)."""

_SUFFIX = {"torchscript": ".pt", "onnx": ".onnx"}
_FLOAT32_MIN = float(torch.finfo(torch.float32).min)
# The clamp of marljoint's log-softmax (policies.distributions): kept so the log-probabilities compared by argmax
# are those of the training code, ties included.
_EXP_FLOOR = math.log(torch.finfo(torch.float32).tiny) + 2.0


class _StackedAffine(nn.Module):
    """M affine maps on member-major rows, ``[M, B, in]`` → ``[M, B, out]`` (weights are buffers: no gradients)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("weight", weight.detach().to(torch.float32).clone())
        self.register_buffer("bias", bias.detach().to(torch.float32).clone().unsqueeze(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class _RecurrentCore(nn.Module):
    """One step of a stacked GRU or LSTM cell (the equations of :mod:`marljoint.policies.recurrent`)."""

    def __init__(self, cell: StackedRecurrentCell) -> None:
        super().__init__()
        self.lstm = cell.kind == "lstm"
        self.hidden_size = cell.hidden_size
        self.input = _StackedAffine(cell.weight_ih, cell.bias_ih)
        self.hidden = _StackedAffine(cell.weight_hh, cell.bias_hh)

    def forward(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.hidden_size
        gates_x = self.input(x)
        hidden = state[..., :h]
        gates_h = self.hidden(hidden)
        if self.lstm:
            gates = gates_x + gates_h
            i, f, g, o = gates[..., :h], gates[..., h : 2 * h], gates[..., 2 * h : 3 * h], gates[..., 3 * h :]
            c = torch.sigmoid(f) * state[..., h:] + torch.sigmoid(i) * torch.tanh(g)
            new_h = torch.sigmoid(o) * torch.tanh(c)
            return new_h, torch.cat((new_h, c), dim=-1)
        r = torch.sigmoid(gates_x[..., :h] + gates_h[..., :h])
        z = torch.sigmoid(gates_x[..., h : 2 * h] + gates_h[..., h : 2 * h])
        n = torch.tanh(gates_x[..., 2 * h :] + r * gates_h[..., 2 * h :])
        new_h = n + z * (hidden - n)
        return new_h, new_h


class GreedyPolicy(nn.Module):
    """The greedy acting policy of one agent group as plain tensor operations, ready for ``torch.jit.script`` and
    ``torch.onnx.export``.

    Built by :func:`greedy_policies`; one subclass per kind of action and memory, whose ``forward`` takes the
    inputs named in :attr:`input_names` and returns those in :attr:`output_names`:

    - categorical actions: ``forward(obs, agent, action_mask) -> action``;
    - Box actions: ``forward(obs, agent) -> action``;
    - recurrent policies take ``state`` last and also return ``next_state``.

    Inputs: ``obs`` ``[B, *obs_shape]`` float32 (:attr:`obs_shape`: a Box observation's own shape, else the
    flattened vector ``gymnasium.spaces.flatten`` gives); ``agent`` ``[B]`` int64, each row's position in the
    group's agent list (the manifest's ``agents``); ``action_mask`` ``[B, sum(nvec)]`` bool, True = allowed (a head
    whose entries are all False is left unmasked, as in training); ``state`` ``[B, S]`` float32, zeros at the
    agent's first decision of an episode, then the ``next_state`` of its previous decision.

    Output ``action``: the env action of each row, int64 ``[B]`` for Discrete (with the space's ``start`` added),
    int64 ``[B, K]`` for MultiDiscrete, float32 ``[B, *action_shape]`` for Box (the mean, clipped to the bounds).

    Args:
        network: the group's network (its actor, observation statistics and agent one-hots are copied).
        group: the group the network serves.
        obs_shape: the shape of one raw observation the file takes (``network.observation.shape`` when ``None``);
            it must hold ``network.observation.size`` values.

    Raises:
        ValueError: for what cannot be exported yet: image observations, an activation other than tanh, or an
            ``obs_shape`` of the wrong size.
    """

    def __init__(self, network: ActorCritic, group: GroupSpec, obs_shape: Sequence[int] | None = None) -> None:
        super().__init__()
        _check_exportable(network, group)
        self.obs_shape = tuple(int(s) for s in (obs_shape if obs_shape is not None else network.observation.shape))
        if math.prod(self.obs_shape) != network.observation.size:
            raise ValueError(
                f"obs_shape {self.obs_shape} holds {math.prod(self.obs_shape)} values, but the group's network reads "
                f"{network.observation.size}; pass the raw observation's shape or None"
            )
        self.obs_size = network.observation.size
        self.members = network.members
        self.num_agents = group.size
        self.register_buffer(
            "member_of_agent", torch.tensor([network.member_of_agent(j) for j in range(group.size)], dtype=torch.long)
        )
        self.share = network.share_parameters
        self.register_buffer("agent_ids", torch.eye(group.size) if self.share else torch.zeros(group.size, 0))
        normalizer = network.obs_normalizer
        self.normalize = normalizer is not None
        self.clip = 0.0 if normalizer is None else normalizer.clip
        mean = torch.zeros(self.members, 1) if normalizer is None else normalizer.mean.unsqueeze(1)
        scale = torch.ones(self.members, 1) if normalizer is None else (normalizer.var + normalizer.eps).rsqrt()
        self.register_buffer("obs_mean", mean.to(torch.float32).reshape(self.members, 1, -1))
        self.register_buffer("obs_scale", scale.to(torch.float32).reshape(self.members, 1, -1))
        self.layers = nn.ModuleList(_StackedAffine(layer.weight, layer.bias) for layer in network.encoder.layers)
        self.head = _StackedAffine(network.actor_head.weight, network.actor_head.bias)
        self.state_size = network.actor_state_size
        self.input_names: tuple[str, ...] = ("obs", "agent")
        self.output_names: tuple[str, ...] = ("action",)

    def _features(self, obs: torch.Tensor, agent: torch.Tensor) -> torch.Tensor:
        """Member-major trunk features ``[M, B, d]`` of ``[B, *obs_shape]`` observations (every member, every row)."""
        x = obs.reshape(-1, self.obs_size).to(torch.float32).unsqueeze(0).expand(self.members, -1, -1)
        if self.normalize:
            x = ((x - self.obs_mean) * self.obs_scale).clamp(-self.clip, self.clip)
        if self.share:
            x = torch.cat((x, self.agent_ids[agent].unsqueeze(0)), dim=-1)
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x

    def _select(self, rows: torch.Tensor, agent: torch.Tensor) -> torch.Tensor:
        """``[M, B, k]`` → ``[B, k]``: each row from the member that acts for its agent."""
        if self.members == 1:
            return rows[0]
        index = self.member_of_agent[agent].view(1, -1, 1).expand(1, -1, rows.shape[-1])
        return rows.gather(0, index).squeeze(0)

    def example_inputs(self, batch: int = 2) -> tuple[torch.Tensor, ...]:
        """Inputs of ``batch`` rows (zero observations, agents ``0, 1, ...`` cycling), in :attr:`input_names`
        order: what tracing and shape checks need."""
        return self._example(batch)

    def _example(self, batch: int) -> tuple[torch.Tensor, ...]:
        obs = torch.zeros(batch, *self.obs_shape)
        agent = torch.arange(batch, dtype=torch.long) % self.num_agents
        return obs, agent


class _Categorical(GreedyPolicy):
    """Discrete and MultiDiscrete actions: the most likely allowed choice of every head."""

    def __init__(self, network: ActorCritic, group: GroupSpec, obs_shape: Sequence[int] | None = None) -> None:
        super().__init__(network, group, obs_shape)
        action = network.action
        nvec = action.nvec
        width = max(nvec)
        # Heads of different sizes are padded to the widest with a masked entry (index sum(nvec), appended).
        positions = {
            k * width + j: offset + j for k, offset in enumerate(np.cumsum((0, *nvec[:-1]))) for j in range(nvec[k])
        }
        padding = [positions.get(p, action.mask_size) for p in range(len(nvec) * width)]
        self.register_buffer("padding", torch.tensor(padding, dtype=torch.long))
        self.heads = len(nvec)
        self.width = width
        self.discrete = action.kind == "discrete"
        self.register_buffer("start", torch.tensor(action.start or (0,) * len(nvec), dtype=torch.long))
        self.fill = _FLOAT32_MIN
        self.floor = _EXP_FLOOR
        self.mask_size = action.mask_size
        self.input_names = ("obs", "agent", "action_mask")

    def _choose(self, logits: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
        """``[B, K]`` (``[B]`` for Discrete) env actions from ``[B, sum(nvec)]`` logits and the mask."""
        padded = torch.cat((logits, torch.full_like(logits[:, :1], self.fill)), dim=-1)
        logits3 = padded[:, self.padding].reshape(-1, self.heads, self.width)
        mask = action_mask.to(torch.bool)
        mask3 = torch.cat((mask, torch.zeros_like(mask[:, :1])), dim=-1)[:, self.padding]
        mask3 = mask3.reshape(-1, self.heads, self.width)
        blocked = mask3.logical_not() & mask3.any(-1, keepdim=True)
        logits3 = logits3.masked_fill(blocked, self.fill)
        shifted = logits3 - logits3.amax(-1, keepdim=True)
        log_p = shifted - shifted.clamp(min=self.floor).exp().sum(-1, keepdim=True).log()
        actions = log_p.argmax(-1) + self.start
        if self.discrete:
            return actions[:, 0]
        return actions

    def forward(self, obs: torch.Tensor, agent: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
        logits = self._select(self.head(self._features(obs, agent)), agent)
        return self._choose(logits, action_mask)

    def _example(self, batch: int) -> tuple[torch.Tensor, ...]:
        obs, agent = super()._example(batch)
        return obs, agent, torch.ones(batch, self.mask_size, dtype=torch.bool)


class _Box(GreedyPolicy):
    """Box actions: the mean, clipped to the bounds and shaped as the env's action."""

    def __init__(self, network: ActorCritic, group: GroupSpec, obs_shape: Sequence[int] | None = None) -> None:
        super().__init__(network, group, obs_shape)
        action = network.action
        self.register_buffer("low", torch.as_tensor(action.low, dtype=torch.float32))
        self.register_buffer("high", torch.as_tensor(action.high, dtype=torch.float32))
        self.action_shape = [int(s) for s in (action.env_shape or action.shape)]

    def _clip(self, mean: torch.Tensor) -> torch.Tensor:
        # np.clip's order (the max with the low bound first), so a run's bounds give the same numbers.
        clipped = torch.minimum(torch.maximum(mean, self.low), self.high)
        return clipped.reshape([-1] + self.action_shape)

    def forward(self, obs: torch.Tensor, agent: torch.Tensor) -> torch.Tensor:
        return self._clip(self._select(self.head(self._features(obs, agent)), agent))


class _RecurrentCategorical(_Categorical):
    """Categorical actions of a recurrent policy: ``state`` in, ``next_state`` out."""

    def __init__(self, network: ActorCritic, group: GroupSpec, obs_shape: Sequence[int] | None = None) -> None:
        super().__init__(network, group, obs_shape)
        assert network.core is not None
        self.core = _RecurrentCore(network.core)
        self.input_names = ("obs", "agent", "action_mask", "state")
        self.output_names = ("action", "next_state")

    def forward(
        self, obs: torch.Tensor, agent: torch.Tensor, action_mask: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        members = state.to(torch.float32).unsqueeze(0).expand(self.members, -1, -1)
        features, next_state = self.core(self._features(obs, agent), members)
        logits = self._select(self.head(features), agent)
        return self._choose(logits, action_mask), self._select(next_state, agent)

    def _example(self, batch: int) -> tuple[torch.Tensor, ...]:
        return (*super()._example(batch), torch.zeros(batch, self.state_size))


class _RecurrentBox(_Box):
    """Box actions of a recurrent policy: ``state`` in, ``next_state`` out."""

    def __init__(self, network: ActorCritic, group: GroupSpec, obs_shape: Sequence[int] | None = None) -> None:
        super().__init__(network, group, obs_shape)
        assert network.core is not None
        self.core = _RecurrentCore(network.core)
        self.input_names = ("obs", "agent", "state")
        self.output_names = ("action", "next_state")

    def forward(self, obs: torch.Tensor, agent: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        members = state.to(torch.float32).unsqueeze(0).expand(self.members, -1, -1)
        features, next_state = self.core(self._features(obs, agent), members)
        mean = self._select(self.head(features), agent)
        return self._clip(mean), self._select(next_state, agent)

    def _example(self, batch: int) -> tuple[torch.Tensor, ...]:
        return (*super()._example(batch), torch.zeros(batch, self.state_size))


def _check_exportable(network: ActorCritic, group: GroupSpec) -> None:
    """Refuses, naming the reason, what :class:`GreedyPolicy` cannot compute yet."""
    if network.observation.kind == "image":
        raise ValueError(
            f"group {list(group.agents)} observes images {network.observation.shape}; export handles flat "
            "observations only (train on flattened observations to export)"
        )
    if network.encoder.activation not in (tanh, torch.tanh):
        raise ValueError(
            f"group {list(group.agents)} uses the activation {network.encoder.activation!r}; export handles the "
            "default tanh only"
        )
    if network.num_agents != group.size:
        raise ValueError(
            f"group {list(group.agents)} is served by several networks; export needs one network per group (the "
            "networks marljoint train builds)"
        )


def greedy_policies(
    policy: JointPolicy, observation_spaces: Sequence[gymnasium.Space] | None = None
) -> list[GreedyPolicy]:
    """The greedy acting policy of every agent group, in ``policy.spec.groups`` order.

    Args:
        policy: the run's :class:`~marljoint.JointPolicy` (``load_run(...).trainer.acting_policy()``).
        observation_spaces: the agents' raw observation spaces (``env.observation_spaces``); a group whose agents
            observe a Box (or the ``"observation"`` Box of PettingZoo's masked Dict) then takes observations of the
            Box's own shape. ``None``: every group takes flat ``[B, obs_size]`` observations.

    Returns:
        One :class:`GreedyPolicy` per group (copies: later training does not change them).

    Raises:
        ValueError: for a policy :class:`GreedyPolicy` cannot export (see there).
    """
    out = []
    for g, group in enumerate(policy.spec.groups):
        slots = [k for k, slot in enumerate(policy.slots) if slot.group == g]
        network = policy.networks[slots[0]]
        if len(slots) != 1:
            raise ValueError(
                f"group {list(group.agents)} is served by {len(slots)} networks; export needs one network per "
                "group (the networks marljoint train builds)"
            )
        shape = None if observation_spaces is None else _raw_shape(observation_spaces[group.agent_indices[0]])
        box = group.action.kind == "box"
        if network.core is None:
            kind: type[GreedyPolicy] = _Box if box else _Categorical
        else:
            kind = _RecurrentBox if box else _RecurrentCategorical
        out.append(kind(network, group, shape).eval())
    return out


def _raw_shape(space: gymnasium.Space) -> tuple[int, ...] | None:
    """The shape of a raw Box observation (also inside PettingZoo's masked Dict); ``None`` for other spaces."""
    if isinstance(space, spaces.Dict) and "observation" in space.spaces and "action_mask" in space.spaces:
        space = space.spaces["observation"]
    return tuple(int(s) for s in space.shape) if isinstance(space, spaces.Box) else None


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_run` wrote.

    Attributes:
        directory: the directory holding the files and the manifest.
        format: ``"torchscript"`` or ``"onnx"``.
        files: one file per agent group, in group order.
        manifest: the JSON manifest (:data:`MANIFEST_FILE`).
        checkpoint: the checkpoint exported.
    """

    directory: Path
    format: str
    files: tuple[Path, ...]
    manifest: Path
    checkpoint: Path


def export_run(
    run_dir: str | os.PathLike[str],
    format: str = "torchscript",
    out: str | os.PathLike[str] | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    trust_run: bool = False,
) -> ExportResult:
    """Writes a run's greedy acting policies as standalone files, one per agent group, and a JSON manifest.

    A TorchScript file (``.pt``) loads with ``torch.jit.load`` alone, without marljoint; an ONNX file (``.onnx``)
    runs with onnxruntime. Both choose the actions ``marljoint eval`` chooses (deterministic). Files an earlier
    export wrote to ``out`` are replaced; any other file of the same name is refused, never overwritten, and so is
    a symbolic link at one of those names (or at ``RUN_DIR/export`` or ``RUN_DIR/export/<format>`` when ``out`` is
    not given): nothing is written through it.

    Args:
        run_dir: a run directory written by ``marljoint train``.
        format: ``"torchscript"`` or ``"onnx"`` (needs ``pip install "marljoint[export]"``).
        out: the directory to write (``RUN_DIR/export/<format>`` when ``None``).
        checkpoint: a checkpoint file instead of the run's newest.
        trust_run: export a run whose ``config.toml`` is not yours (see :func:`~marljoint.run.evaluate.load_run`).

    Returns:
        An :class:`ExportResult`.

    Raises:
        RunError: for an unknown format, a missing onnx package, a directory without a run or checkpoint, a
            damaged checkpoint, a policy that cannot be exported yet (image observations, an activation other
            than tanh), or a symbolic link where a file would be written.
        ExportRefused: for a run whose algorithm acts with something else (its Q networks, its own actors).
    """

    if format not in EXPORT_FORMATS:
        raise RunError(f"unknown export format {format!r}; choose one of {', '.join(EXPORT_FORMATS)}")
    if format == "onnx":
        _require_onnx()
    run = load_run(run_dir, checkpoint, trust_run=trust_run)
    try:
        policies = greedy_policies(acting_policy_of(run.trainer), run.env.observation_spaces)
    except ExportRefused as exc:  # the algorithm acts with something else: the reason, and what to use instead
        raise ExportRefused(f"cannot export {run_dir}: {exc}") from None
    except ValueError as exc:
        raise RunError(f"cannot export {run_dir}: {exc}") from None
    finally:
        run.close()
    # torch, onnx and the manifest would write through a link: every path is checked before anything is written.
    directory = Path(out) if out is not None else run_path(run_dir, EXPORT_DIR, format)
    files = [run_path(directory, f"group_{g}{_SUFFIX[format]}") for g in range(len(policies))]
    manifest = run_path(directory, MANIFEST_FILE)
    _refuse_overwriting(directory, [manifest, *files])
    directory.mkdir(parents=True, exist_ok=True)
    for policy, path in zip(policies, files):
        (_write_onnx if format == "onnx" else _write_torchscript)(policy, path)
    entries = [
        _group_entry(group, policy, path) for group, policy, path in zip(run.trainer.spec.groups, policies, files)
    ]
    manifest.write_text(json.dumps(_manifest(run, format, entries), indent=2, default=str) + "\n")
    return ExportResult(directory, format, tuple(files), manifest, run.checkpoint)


def _refuse_overwriting(directory: Path, paths: list[Path]) -> None:
    """Refuses to replace files in ``directory`` unless an earlier export wrote them: its ``manifest.json`` is a
    marljoint manifest listing them. A directory of the user's that merely holds a file of the same name (a
    ``manifest.json`` of their own) is never overwritten.

    Raises:
        RunError: naming the directory, the files in the way and the fix.
    """
    taken = [path for path in paths if os.path.lexists(path)]
    if not taken:
        return
    ours = _exported_files(directory / MANIFEST_FILE)
    if ours is None:
        foreign = [path.name for path in taken]
    else:
        foreign = [path.name for path in taken if path.name != MANIFEST_FILE and path.name not in ours]
    if foreign:
        names = ", ".join(sorted(foreign))
        raise RunError(
            f"export --out {directory} already holds {names}, which no marljoint export wrote there; choose a new "
            "or empty directory (files of an earlier export to the same directory are replaced)"
        )


def _exported_files(manifest: Path) -> set[str] | None:
    """The file names a marljoint manifest lists, or ``None`` when ``manifest`` is missing or not one."""
    try:
        values = json.loads(manifest.read_text(encoding="utf-8"))
        files = {Path(group["file"]).name for group in values["groups"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(values, dict) or values.get("format") not in EXPORT_FORMATS:
        return None
    return files


def _manifest(run: Any, format: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The contents of ``manifest.json``: the run's env, checkpoint and agents, and one entry per group."""
    return {
        "format": format,
        "env": run.spec.env,
        "env_kwargs": dict(run.spec.env_kwargs),
        "checkpoint": str(run.checkpoint),
        "agents": list(run.trainer.spec.agents),
        "turn_based": bool(run.trainer.spec.turn_based),
        "groups": entries,
    }


def _require_onnx() -> None:
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as exc:
        raise RunError(
            f"exporting to ONNX needs the onnx and onnxscript packages ({exc.name} is missing): "
            'pip install "marljoint[export]"'
        ) from None


def _write_torchscript(policy: GreedyPolicy, path: Path) -> None:
    with warnings.catch_warnings():
        # torch.jit.script is deprecated in favour of torch.export, but a scripted module is still the one format
        # that torch alone loads and runs (torch.jit.load), which is what this file is for.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        scripted = torch.jit.script(policy)
    scripted.save(str(path))


def _write_onnx(policy: GreedyPolicy, path: Path) -> None:
    import logging

    batch = torch.export.Dim("batch")
    example = policy.example_inputs(2)
    dynamic = tuple({0: batch} for _ in example)
    onnx_logger = logging.getLogger("torch.onnx")
    level = onnx_logger.level
    # The exporter logs one line per torchvision operator it cannot register; nothing here uses them.
    onnx_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                policy,
                example,
                dynamo=True,
                input_names=list(policy.input_names),
                output_names=list(policy.output_names),
                dynamic_shapes=dynamic,
                opset_version=ONNX_OPSET,
                external_data=False,
                verbose=False,
            )
    finally:
        onnx_logger.setLevel(level)
    assert program is not None
    program.save(str(path), external_data=False)


def _group_entry(group: GroupSpec, policy: GreedyPolicy, path: Path) -> dict[str, Any]:
    """The manifest's description of one group's file: agents, inputs, outputs and spaces."""
    rows = "B"
    inputs: dict[str, Any] = {
        "obs": {"dtype": "float32", "shape": [rows, *policy.obs_shape]},
        "agent": {"dtype": "int64", "shape": [rows]},
    }
    action = group.action
    if action.kind != "box":
        inputs["action_mask"] = {"dtype": "bool", "shape": [rows, action.mask_size]}
    if policy.state_size:
        inputs["state"] = {"dtype": "float32", "shape": [rows, policy.state_size]}
    if action.kind == "box":
        output = {"dtype": "float32", "shape": [rows, *(action.env_shape or action.shape)]}
        space: dict[str, Any] = {"kind": "box", "low": action.low.tolist(), "high": action.high.tolist()}
    else:
        output = {"dtype": "int64", "shape": [rows] if action.kind == "discrete" else [rows, len(action.nvec)]}
        space = {"kind": action.kind, "nvec": list(action.nvec), "start": list(action.start)}
    outputs = {"action": output}
    if policy.state_size:
        outputs["next_state"] = {"dtype": "float32", "shape": [rows, policy.state_size]}
    return {
        "file": path.name,
        "agents": list(group.agents),
        "inputs": inputs,
        "outputs": outputs,
        "action_space": space,
        "observation": {
            "size": group.observation.size,
            "action_mask_in_observation": group.observation.has_mask,
            "normalized": policy.normalize,
        },
        "recurrent": bool(policy.state_size),
    }
