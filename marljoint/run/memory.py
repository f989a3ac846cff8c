"""How much memory a training run needs, estimated before anything large is built, and how much is available.

A run holds three large things: the rollout storage (preallocated ``[T, E, N, ...]`` tensors), the update's working
set (the flattened rows' targets and one minibatch's activations and gradients), and the ``E`` env copies. The first
two follow from the spaces of one env copy and the sizes in the config; the env copies from the memory one copy
allocates (measured with :mod:`tracemalloc` while building and resetting it, which sees Python objects and numpy
arrays, not what native extensions allocate on their own). The sum is compared with the memory available
(``MemAvailable`` of ``/proc/meminfo``, or ``os.sysconf`` where that file does not exist) before the env copies are
built, so an impossible run is refused at once rather than swapping for minutes.
"""

from __future__ import annotations

import math
import os
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marljoint.collect.rollout import storage_bytes
from marljoint.env.spaces import JointSpec
from marljoint.ppo.config import JointTrainerConfig

__all__ = [
    "MemoryEstimate",
    "OffPolicyMemory",
    "available_device_memory",
    "available_memory",
    "estimate_memory",
    "estimate_offpolicy_memory",
    "format_bytes",
    "measure_env_copy",
]

_UPDATE_TARGETS = 6
"""``[R, N]`` float32 tensors the update builds from a rollout: advantages, returns, normalised values and returns,
the behaviour log-probs' proximal copy and the masks (an upper bound)."""
_ACTIVATION_COPIES = 4
"""float32 values a hidden unit of a minibatch row keeps through the backward pass: its pre-activation, its
activation and their gradients."""


@dataclass(frozen=True)
class MemoryEstimate:
    """The memory a run needs, in bytes.

    Attributes:
        rollout: the rollout storage (twice, when collection overlaps the update with policy lag 1).
        update: the update's working set: the rows' targets and one minibatch's activations and gradients.
        env_copies: the env copies (``num_envs`` × ``per_copy``; 0 for copies that live in Ray actors).
        per_copy: what one env copy allocated when it was built and reset.
        on_device: the device the rollout and update live on (``"cpu"``: the host's memory).
    """

    rollout: int
    update: int
    env_copies: int
    per_copy: int
    on_device: str = "cpu"

    @property
    def host(self) -> int:
        """Bytes needed in the host's memory."""
        return self.env_copies + (self.rollout + self.update if self.on_device == "cpu" else 0)

    @property
    def device(self) -> int:
        """Bytes needed on an accelerator (0 on the CPU)."""
        return 0 if self.on_device == "cpu" else self.rollout + self.update


def estimate_memory(spec: JointSpec, config: JointTrainerConfig, per_copy: int = 0) -> MemoryEstimate:
    """The memory of a run of ``config`` on an env whose spaces ``spec`` describes.

    Args:
        spec: the env's :class:`~marljoint.JointSpec` (one copy is enough to know it).
        config: the trainer's settings (``rollout_steps`` T, ``num_envs`` E, minibatches, ``hidden_sizes``).
        per_copy: bytes one env copy allocates (:func:`measure_env_copy`).

    Returns:
        A :class:`MemoryEstimate`.
    """
    steps, copies = config.rollout_steps, config.num_envs
    rollout = storage_bytes(spec, steps, copies) * (2 if config.collection.policy_lag else 1)
    rows = steps * copies
    minibatch = min(rows, config.minibatch_rows(rows))
    hidden = sum(config.hidden_sizes) * 2  # an actor and a critic
    per_row = 0
    for group in spec.groups:
        obs = math.prod(group.observation.shape)
        per_row += group.size * 4 * (2 * obs + _ACTIVATION_COPIES * hidden)
    update = rows * spec.num_agents * 4 * _UPDATE_TARGETS + minibatch * per_row
    env_copies = 0 if config.collection.backend == "ray" else copies * per_copy
    device = str(config.device).split(":")[0]
    return MemoryEstimate(rollout, update, env_copies, per_copy, "cpu" if device == "cpu" else str(config.device))


_PARAMETER_COPIES = 5
"""float32 values an off-policy network's parameter takes: itself, its target copy, its gradient and Adam's two
moments (an upper bound for networks without a target)."""


@dataclass(frozen=True)
class OffPolicyMemory:
    """The memory an off-policy run (vdn, qmix, masac, maddpg) needs, in bytes; it trains on the CPU.

    Attributes:
        replay: the replay buffer of ``buffer_size`` joint transitions, twice (a checkpoint copies the stored
            transitions while it is written).
        networks: every network's parameters with their targets, gradients and Adam moments.
        batch: one gradient step's activations and their gradients (online and target passes over ``batch_size``
            transitions).
        env_copies: the env copies (``num_envs`` × ``per_copy``; 0 for copies that live in Ray actors).
        per_copy: what one env copy allocated when it was built and reset.
        transition: the bytes of one stored joint transition.
    """

    replay: int
    networks: int
    batch: int
    env_copies: int
    per_copy: int
    transition: int

    @property
    def host(self) -> int:
        """Bytes needed in the host's memory."""
        return self.replay + self.networks + self.batch + self.env_copies


def estimate_offpolicy_memory(spec: JointSpec, config: Any, per_copy: int = 0, ray: bool = False) -> OffPolicyMemory:
    """The memory of an off-policy run of ``config`` (an :class:`~marljoint.offpolicy.OffPolicyConfig`) on an env
    whose spaces ``spec`` describes, before anything large is allocated: the networks are built on PyTorch's
    ``meta`` device (shapes only) to count their parameters and layer widths.

    Args:
        spec: the env's :class:`~marljoint.JointSpec`.
        config: the off-policy settings (``buffer_size``, ``batch_size``, widths, the mixer's sizes).
        per_copy: bytes one env copy allocates (:func:`measure_env_copy`).
        ray: the env copies live in Ray actors (not in this process).

    Returns:
        An :class:`OffPolicyMemory`.
    """
    import torch

    from marljoint.offpolicy.trainer import build_algorithm
    from marljoint.offpolicy.transitions import transition_layout

    transition = 0
    for layout in transition_layout(spec).values():
        for shape, dtype in layout if isinstance(layout, list) else [layout]:
            transition += math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    with torch.device("meta"):
        algorithm = build_algorithm(spec, config, torch.Generator())
    networks = list(algorithm.networks)
    parameters = sum(p.numel() for network in networks for p in network.parameters())
    # A layer's outputs per batch row: its bias's entries (stacked per-agent members included).
    widths = sum(p.numel() for n in networks for name, p in n.named_parameters() if name.endswith("bias"))
    batch = 2 * config.batch_size * 4 * _ACTIVATION_COPIES * widths
    return OffPolicyMemory(
        replay=2 * config.buffer_size * transition,
        networks=parameters * 4 * _PARAMETER_COPIES,
        batch=batch,
        env_copies=0 if ray else config.num_envs * per_copy,
        per_copy=per_copy,
        transition=transition,
    )


def measure_env_copy(env_fn: Callable[[], Any], seed: int = 0) -> tuple[int, float]:
    """Builds and resets one env copy, then closes it: ``(bytes it allocated, seconds it took)``.

    The bytes are those :mod:`tracemalloc` sees (Python objects and numpy arrays); call it after one copy was
    built already, so that imports and caches of the first build are not counted as the copy's.
    """
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tick = time.perf_counter()
        env = env_fn()
        env.reset(seed=seed)
        seconds = time.perf_counter() - tick
        allocated = tracemalloc.get_traced_memory()[0] - before
    finally:
        if not tracing:
            tracemalloc.stop()
    close = getattr(env, "close", None)
    if close is not None:
        close()
    return max(allocated, 0), seconds


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation without swapping: ``MemAvailable`` from ``/proc/meminfo``,
    else the free physical pages ``os.sysconf`` reports, else ``None`` (unknown: no check is made)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def available_device_memory(device: str) -> int | None:
    """Free bytes on a CUDA device (``torch.cuda.mem_get_info``), or ``None`` for other devices."""
    import torch

    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    try:
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    except (RuntimeError, ValueError):
        return None


def format_bytes(size: float) -> str:
    """``1536`` -> ``'1.5 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
