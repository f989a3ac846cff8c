"""Neural Fictitious Self-Play (NFSP; Heinrich and Silver, 2016) with PPO best responses.

Every agent has two policies:

- a **best response**, trained by PPO through the joint trainer (one network per agent,
  ``share_parameters=False``), and
- an **average policy**, a small network trained by supervised learning (cross-entropy, summed over the
  heads of a MultiDiscrete action) on a :class:`~marljoint.best_response.reservoir.ReservoirBuffer` of the
  agent's own best-response actions.

At the start of every episode of every env copy each agent independently plays its best response with
probability ``anticipatory`` (η), else its average policy, for the whole episode
(:class:`~marljoint.best_response.opponents.AnticipatoryAssigner`). PPO is on-policy, so each agent's best
response trains only on the episodes it played itself: rows its average policy played are marked not
``acting`` by the :class:`~marljoint.best_response.opponents.PopulationEnv` and so are invalid in the rollout.
They are excluded from that agent's PPO loss, advantage normalisation, value normaliser and explained variance;
GAE credits their rewards to the agent's previous valid row within the same episode, and since an agent's
controller is fixed per episode such an episode holds no valid row of that agent at all: its rewards reach no
advantage (see ``opponents.py``). Those same rows are the only ones added to the reservoir.

Evaluation uses the average policies (:meth:`NFSP.average_policy`, :meth:`NFSP.exploitability`). Every episode
is seeded differently: the env copies draw each new episode's seed from their own generators, and one trainer
runs for the whole training, so its env is reset (with the configured seed) exactly once.

Example:
    >>> from marljoint import JointTrainerConfig
    >>> from marljoint.best_response import NFSP, NfspConfig
    >>> from marljoint.best_response.games import KuhnGame
    >>> from marljoint_envs import kuhn_poker_v0
    >>> config = NfspConfig(trainer=JointTrainerConfig(num_envs=8, rollout_steps=8, minibatch_size=64))
    >>> nfsp = NFSP(kuhn_poker_v0.raw_env, config, game=KuhnGame())
    >>> row = nfsp.step()
    >>> sorted(k for k in row if not k.startswith(("sl_", "br_", "reservoir")))[:4]
    ['env_steps', 'episodes', 'exploitability', 'iteration']
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from marljoint.best_response.games import KnownGame
from marljoint.best_response.opponents import AnticipatoryAssigner, PopulationEnv
from marljoint.best_response.oracles import (
    GAIN_DEFAULTS,
    GAIN_METRICS,
    check_current_format,
    check_gain_settings,
    gain_metrics,
    run_trainer_config,
)
from marljoint.best_response.reservoir import ReservoirBuffer
from marljoint.checkpoint import atomic_torch_save, load_checkpoint
from marljoint.collect.config import CollectionConfig
from marljoint.collect.settings import SHARED_DEFAULTS
from marljoint.env.pettingzoo import PettingZooJointEnv
from marljoint.env.spaces import ActionLayout, ObservationLayout
from marljoint.policies.distributions import make_distribution
from marljoint.policies.layers import StackedLinear, StackedMLP
from marljoint.ppo.build import check_device_available
from marljoint.ppo.config import JointTrainerConfig, known_fields
from marljoint.ppo.trainer import JointMultiAgentTrainer

__all__ = ["NFSP", "NfspConfig", "AveragePolicy", "NFSP_METRICS"]

CHECKPOINT_NAME = "nfsp.pt"

NFSP_METRICS: dict[str, str] = {
    "iteration": "NFSP iteration (a block of rollouts_per_iteration rollouts and updates)",
    "wall_time": "seconds since the run started (loaded runs continue the count)",
    "env_steps": "env steps taken so far",
    "episodes": "episodes finished so far",
    "exploitability": "exact exploitability of the average policies; NaN without a known game",
    "nash_conv": "exact NashConv of the average policies; NaN without a known game",
    "br_exploitability": "exact exploitability of the best responses themselves; NaN without a known game",
    "sl_loss/<agent>": "mean cross-entropy of the average policy on its reservoir minibatches this iteration",
    "reservoir/<agent>": "rows in the agent's reservoir",
    "br_explained_var/<agent>": "explained variance of the best response's critic at its last update",
    "br_return/<agent>": "mean return of the agent in the episodes its best response played this iteration",
    "br_regret/<agent>": "exact best-response value against the others' average policies minus the best "
    "response's value there; NaN without a known game",
    **GAIN_METRICS,
}
"""Every column NFSP reports, with its meaning (pinned by a test)."""


@dataclass(frozen=True)
class NfspConfig:
    """Settings of :class:`NFSP`.

    Example:
        >>> NfspConfig(anticipatory=0.2).anticipatory
        0.2
    """

    anticipatory: float = 0.1
    """η: per episode, each agent plays its best response with this probability, else its average policy."""
    reservoir_capacity: int = 200_000
    """Rows kept per agent in its reservoir of best-response actions."""
    sl_learning_rate: float = 1e-3
    """Adam learning rate of the average policies."""
    sl_batch_size: int = 256
    """Reservoir rows per supervised minibatch."""
    sl_steps_per_rollout: int = 2
    """Supervised steps of each average policy after every rollout."""
    sl_hidden_sizes: tuple[int, ...] = (64,)
    """Hidden layer widths of the average policies."""
    min_reservoir_size: int = 256
    """An average policy starts training once its reservoir holds this many rows."""
    rollouts_per_iteration: int = 10
    """Rollouts (each followed by a PPO update) per reported iteration."""
    trainer: JointTrainerConfig = field(default_factory=lambda: JointTrainerConfig(share_parameters=False))
    """PPO settings of the best responses (``share_parameters`` is forced to False, ``seed`` derived, ``device``
    is :attr:`device`)."""
    seed: int = SHARED_DEFAULTS["seed"]
    """Seed of everything (networks, env, mixing draws, reservoirs, minibatches)."""
    gain_every: int = GAIN_DEFAULTS["gain_every"]
    """Every this many iterations (0: never), estimate the average policies' exploitability with fresh PPO best
    responses (:func:`~marljoint.best_response.oracles.best_response_gain`): the columns ``best_response_gain`` and
    ``best_response_gain_ci``. For envs without a known game, where ``exploitability`` is NaN."""
    gain_steps: int = GAIN_DEFAULTS["gain_steps"]
    """Env steps of best-response training per estimate (with :attr:`gain_every`)."""
    gain_episodes: int = GAIN_DEFAULTS["gain_episodes"]
    """Episodes simulated per estimate, for the profile and for each best response (with :attr:`gain_every`)."""
    device: str = SHARED_DEFAULTS["device"]
    """Torch device of every network of the run: the best responses (acting and training), the average policies
    (acting, supervised training, tabulation). The reservoirs stay in host memory; losses, tables and exploitability
    come back to the CPU, and ``nfsp.pt`` loads on any device. ``trainer.device`` may stay ``"cpu"`` or name the
    same device."""

    def __post_init__(self) -> None:
        if isinstance(self.trainer, Mapping):
            object.__setattr__(self, "trainer", JointTrainerConfig.from_dict(self.trainer))
        if not isinstance(self.trainer, JointTrainerConfig):
            raise ValueError(f"trainer must be a JointTrainerConfig, got {type(self.trainer).__name__}")
        if self.trainer.anneal_lr is None:  # the agent-count rule: NFSP has no run end to anneal towards
            object.__setattr__(self, "trainer", self.trainer.replace(anneal_lr=False))
        if self.trainer.anneal_lr:
            raise ValueError(
                "trainer.anneal_lr=True decays the best responses' learning rate to 0 at a run's end, but NFSP runs "
                "for as many iterations as it is asked; set anneal_lr=False"
            )
        object.__setattr__(self, "sl_hidden_sizes", tuple(int(h) for h in self.sl_hidden_sizes))
        if (
            isinstance(self.anticipatory, bool)
            or not isinstance(self.anticipatory, (int, float))
            or not (0.0 < self.anticipatory <= 1.0)
        ):
            raise ValueError(
                f"anticipatory must be in (0, 1], got {self.anticipatory!r} (0.1 is NFSP's usual value; at 0 the "
                "best responses would never play)"
            )
        check_gain_settings(self.gain_every, self.gain_steps, self.gain_episodes)
        run_trainer_config(self.device, self.trainer)
        for name in ("reservoir_capacity", "sl_batch_size", "rollouts_per_iteration", "min_reservoir_size"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.sl_steps_per_rollout, (int, np.integer)) or self.sl_steps_per_rollout < 0:
            raise ValueError(f"sl_steps_per_rollout must be a non-negative integer, got {self.sl_steps_per_rollout!r}")
        if isinstance(self.sl_learning_rate, bool) or not self.sl_learning_rate > 0:
            raise ValueError(f"sl_learning_rate must be > 0, got {self.sl_learning_rate!r} (e.g. 1e-3)")
        if not self.sl_hidden_sizes or min(self.sl_hidden_sizes) < 1:
            raise ValueError(f"sl_hidden_sizes must be positive widths, got {self.sl_hidden_sizes}")
        if not isinstance(self.seed, (int, np.integer)) or isinstance(self.seed, bool):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")

    def replace(self, **changes: Any) -> NfspConfig:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain Python values (the trainer config as a dict)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["trainer"] = self.trainer.to_dict()
        out["sl_hidden_sizes"] = list(self.sl_hidden_sizes)
        return out

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> NfspConfig:
        """Builds a config from :meth:`to_dict` output.

        Raises:
            ValueError: naming unknown keys.
        """
        return cls(**known_fields(cls, values))


class AveragePolicy(nn.Module):
    """A policy-only MLP for one agent: flattened observation → logits → (masked) categorical heads.

    It follows the :class:`~marljoint.best_response.population.FrozenPolicy` protocol, so it can play in a
    :class:`~marljoint.best_response.opponents.PopulationEnv` and be tabulated by a known game.

    Args:
        observation: the agent's observation layout (image observations are flattened).
        action: the agent's action layout (Discrete or MultiDiscrete).
        hidden_sizes: hidden layer widths.
        generator: source of the initial weights.

    Raises:
        ValueError: a Box action layout.
    """

    def __init__(
        self,
        observation: ObservationLayout,
        action: ActionLayout,
        hidden_sizes: Sequence[int] = (64,),
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if action.kind == "box":
            raise ValueError("NFSP's average policy needs categorical actions (Discrete or MultiDiscrete), got a Box")
        self.observation = observation
        self.action = action
        self.input_size = int(np.prod(observation.shape))
        self.encoder = StackedMLP(1, self.input_size, hidden_sizes, generator=generator)
        self.head = StackedLinear(1, self.encoder.out_features, action.logits_size, 0.01, generator=generator)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``[B, *obs_shape]`` → ``[B, logits_size]`` logits."""
        flat = obs.reshape(obs.shape[0], self.input_size).float().unsqueeze(0)
        return self.head.forward_member_major(self.encoder.forward_member_major(flat))[0]

    def distribution(self, obs: torch.Tensor, mask: torch.Tensor | None = None) -> Any:
        """The action distribution for ``[B, *obs_shape]`` observations and a ``[B, sum(nvec)]`` mask."""
        return make_distribution(self.action, self(obs), None, mask)

    @torch.no_grad()
    def action_probs(self, obs: torch.Tensor, mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Per head, ``[B, n_k]`` action probabilities."""
        return list(self.distribution(obs, mask).head_probs())

    @torch.no_grad()
    def act(
        self,
        obs: torch.Tensor,
        generator: torch.Generator,
        mask: torch.Tensor | None = None,
        deterministic: bool = False,
    ) -> torch.Tensor:
        """Samples (or takes the mode of) actions, ``[B, *action_shape]``."""
        dist = self.distribution(obs, mask)
        return dist.mode() if deterministic else dist.sample(generator)

    def loss(self, obs: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Mean cross-entropy of the stored actions: ``-log pi(a | s)``, the sum of the heads' cross-entropies."""
        return -self.distribution(obs, mask).log_prob(actions).mean()


def _on_cpu(value: Any) -> Any:
    """``value`` with every tensor in its dicts, lists and tuples copied to the CPU (containers keep their types,
    and a module state's ``_metadata``)."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        out = type(value)((key, _on_cpu(item)) for key, item in value.items())
        if hasattr(value, "_metadata"):
            out._metadata = value._metadata  # type: ignore[attr-defined]
        return out
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_on_cpu(item) for item in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cpu(item) for item in value)
    return value


def _derived_seed(seed: int, tag: int) -> int:
    return int(np.random.SeedSequence([int(seed) % 2**63, tag]).generate_state(1)[0])


class NFSP:
    """Neural Fictitious Self-Play with PPO best responses and supervised average policies.

    Args:
        env_fn: builds one PettingZoo env (a factory or a ``marljoint_envs`` module).
        config: the settings.
        game: the env's known game (Kuhn poker, a matrix game), for exact exploitability.
        **policy_kwargs: passed to the best responses' networks (``JointMultiAgentTrainer.from_env``).

    Attributes:
        trainer: the joint PPO trainer of the best responses.
        average_policies: one :class:`AveragePolicy` per agent (live; see :meth:`average_policy` for a copy).
        reservoirs: one :class:`~marljoint.best_response.reservoir.ReservoirBuffer` per agent.
        iteration: iterations completed.
        history: one metrics dict per iteration (see :data:`NFSP_METRICS`).

    Raises:
        ValueError: a game whose number of players differs from the env's, Box actions, or a ``device`` this machine
            does not have.
    """

    def __init__(
        self, env_fn: Any, config: NfspConfig | None = None, game: KnownGame | None = None, **policy_kwargs: Any
    ) -> None:
        config = config or NfspConfig()
        check_device_available(config.device)
        self.config = config
        self.game = game
        self.env_fn = env_fn
        self.env = PettingZooJointEnv(env_fn, num_envs=config.trainer.num_envs, seed=config.seed)
        self._gain_env: PettingZooJointEnv | None = None
        spec = self.env.spec
        self.spec = spec
        self.num_players = spec.num_agents
        if game is not None and game.num_players != self.num_players:
            raise ValueError(
                f"the game {game!r} has {game.num_players} players but the env has {self.num_players} agents; pass "
                "the game that matches the env"
            )
        generator = torch.Generator().manual_seed(_derived_seed(config.seed, 1))
        # Initialised on the CPU from the run's generator: the same initial weights on every device.
        self.average_policies = [
            AveragePolicy(spec.observations[i], spec.actions[i], config.sl_hidden_sizes, generator).to(config.device)
            for i in range(self.num_players)
        ]
        self.optimizers = [
            torch.optim.Adam(policy.parameters(), lr=config.sl_learning_rate) for policy in self.average_policies
        ]
        self.reservoirs = []
        for i in range(self.num_players):
            g, _ = spec.group_of(i)
            group = spec.groups[g]
            self.reservoirs.append(
                ReservoirBuffer(
                    config.reservoir_capacity,
                    tuple(group.observation.shape),
                    tuple(group.action.shape),
                    group.action.mask_size,
                    obs_dtype=torch.from_numpy(np.zeros(0, group.observation.dtype)).dtype,
                    seed=_derived_seed(config.seed, 10 + i),
                )
            )
        self.population_env = PopulationEnv(
            self.env,
            [[policy] for policy in self.average_policies],
            AnticipatoryAssigner(config.anticipatory, self.num_players),
            _derived_seed(config.seed, 2),
        )
        trainer_config = run_trainer_config(config.device, config.trainer).replace(
            seed=_derived_seed(config.seed, 3), share_parameters=False, num_envs=self.env.num_envs
        )
        self.trainer = JointMultiAgentTrainer.from_env(self.population_env, trainer_config, **policy_kwargs)
        self._sl_generator = torch.Generator().manual_seed(_derived_seed(config.seed, 4))
        self.iteration = 0
        self.episodes = 0
        self.history: list[dict[str, Any]] = []
        self._elapsed_before = 0.0
        self._start = time.perf_counter()

    # ------------------------------------------------------------------ training
    def _learners_of(self, rollout: Any) -> torch.Tensor:
        """Stores the rollout's best-response moves in the reservoirs; returns the ``[N]`` seats to train.

        A seat whose best response played no episode has nothing to learn from this rollout.
        """
        self._add_to_reservoirs(rollout)
        return rollout.valid.reshape(-1, self.num_players).any(dim=0)

    def step(self) -> dict[str, Any]:
        """One iteration: ``rollouts_per_iteration`` × (rollout, reservoir insertion, PPO update, supervised steps).

        Returns:
            The iteration's metrics (see :data:`NFSP_METRICS`).
        """
        n = self.num_players
        sl_losses = [[] for _ in range(n)]
        br_returns: list[list[float]] = [[] for _ in range(n)]
        stats = None
        for _ in range(self.config.rollouts_per_iteration):
            _, stats, _ = self.trainer.iterate(active=self._learners_of)
            for episode in self.population_env.drain_log():
                self.episodes += 1
                for seat in np.flatnonzero(episode.controllers < 0):
                    br_returns[seat].append(float(episode.returns[seat]))
            for seat in range(n):
                sl_losses[seat].extend(self._train_average_policy(seat))
        self.iteration += 1
        row: dict[str, Any] = {
            "iteration": self.iteration,
            "wall_time": self.wall_time,
            "env_steps": self.trainer.env_steps,
            "episodes": self.episodes,
        }
        regrets = [math.nan] * n
        if self.game is not None:
            average_tables = self.game.tables(self.average_policies)
            nash_conv = self.game.nash_conv(average_tables)
            row["exploitability"] = nash_conv / n
            row["nash_conv"] = nash_conv
            br_tables = self.game.tables([self.trainer.agent_policy(seat) for seat in range(n)])
            row["br_exploitability"] = self.game.nash_conv(br_tables) / n
            for seat in range(n):
                played = list(average_tables)
                played[seat] = br_tables[seat]
                best_value, _ = self.game.best_response(average_tables, seat)
                regrets[seat] = best_value - float(self.game.values(played)[seat])
        else:
            row["exploitability"] = row["nash_conv"] = row["br_exploitability"] = math.nan
        for seat, agent in enumerate(self.spec.agents):
            row[f"sl_loss/{agent}"] = float(np.mean(sl_losses[seat])) if sl_losses[seat] else math.nan
            row[f"reservoir/{agent}"] = len(self.reservoirs[seat])
            row[f"br_explained_var/{agent}"] = float(stats.explained_var[seat]) if stats is not None else math.nan
            row[f"br_return/{agent}"] = float(np.mean(br_returns[seat])) if br_returns[seat] else math.nan
            row[f"br_regret/{agent}"] = regrets[seat]
        every = self.config.gain_every
        if every and self.iteration % every == 0:
            row.update(self._gain())
        self.history.append(row)
        return row

    def _gain(self) -> dict[str, float]:
        """The estimated exploitability of the average policies (see :attr:`NfspConfig.gain_every`), on an env of
        its own so that the run's env copies continue undisturbed."""
        if self._gain_env is None:
            self._gain_env = PettingZooJointEnv(
                self.env_fn, num_envs=self.config.trainer.num_envs, seed=_derived_seed(self.config.seed, 7)
            )
        trainer = run_trainer_config(self.config.device, self.config.trainer).replace(
            share_parameters=False, collection=CollectionConfig()
        )
        return gain_metrics(
            self._gain_env,
            list(self.average_policies),
            trainer,
            self.config.gain_steps,
            self.config.gain_episodes,
            _derived_seed(self.config.seed, 1000 + self.iteration),
        )

    def run(
        self,
        iterations: int | None = None,
        max_seconds: float | None = None,
        callback: Callable[[dict[str, Any]], bool | None] | None = None,
    ) -> list[dict[str, Any]]:
        """Runs iterations until ``iterations`` in total are done or ``max_seconds`` of wall time have passed.

        Args:
            iterations: the total to reach (``None``: no limit; then ``max_seconds`` is required).
            max_seconds: wall-time budget, checked between iterations.
            callback: called with each iteration's metrics; returning ``False`` stops.

        Returns:
            The whole :attr:`history`.

        Raises:
            ValueError: neither ``iterations`` nor ``max_seconds`` given.
        """
        if iterations is None and max_seconds is None:
            raise ValueError("pass iterations=..., max_seconds=..., or both; NFSP has no natural end")
        while iterations is None or self.iteration < iterations:
            if max_seconds is not None and self.wall_time >= max_seconds:
                break
            metrics = self.step()
            if callback is not None and callback(metrics) is False:
                break
        return self.history

    def _add_to_reservoirs(self, rollout: Any) -> None:
        """Adds every agent's own best-response rows (its valid rows) to its reservoir (in host memory)."""
        valid = rollout.valid
        for seat in range(self.num_players):
            g, slot = self.spec.group_of(seat)
            rows = valid[:, :, seat]
            if not bool(rows.any()):
                continue
            masks = rollout.action_masks[g]
            self.reservoirs[seat].add(
                rollout.obs[g][:, :, slot][rows].cpu(),
                rollout.actions[g][:, :, slot][rows].cpu(),
                None if masks is None else masks[:, :, slot][rows].cpu(),
            )

    def _train_average_policy(self, seat: int) -> list[float]:
        reservoir = self.reservoirs[seat]
        if len(reservoir) < self.config.min_reservoir_size:
            return []
        policy, optimizer = self.average_policies[seat], self.optimizers[seat]
        losses = []
        for _ in range(self.config.sl_steps_per_rollout):
            batch = reservoir.sample(self.config.sl_batch_size, self._sl_generator)
            device = self.config.device
            masks = None if batch.masks is None else batch.masks.to(device)
            loss = policy.loss(batch.obs.to(device), batch.actions.to(device), masks)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        return losses

    # ------------------------------------------------------------------ results
    @property
    def wall_time(self) -> float:
        """Seconds of training so far (loaded runs continue the count)."""
        return self._elapsed_before + time.perf_counter() - self._start

    def average_policy(self, agent: int | str) -> AveragePolicy:
        """A frozen copy of ``agent``'s average policy (later training does not change it)."""
        policy = copy.deepcopy(self.average_policies[self._index(agent)]).eval()
        for parameter in policy.parameters():
            parameter.requires_grad_(False)
        return policy

    def action_marginal_for(
        self, agent: int | str, obs: np.ndarray | torch.Tensor, mask: np.ndarray | torch.Tensor | None = None
    ) -> list[np.ndarray]:
        """The average policy's action distribution for one observation (or a batch), every head.

        Args:
            agent: index or name.
            obs: ``[*obs_shape]`` (or ``[B, *obs_shape]``).
            mask: ``[sum(nvec)]`` (or ``[B, sum(nvec)]``) bool, or ``None``.

        Returns:
            Per head, ``[n_k]`` probabilities (``[B, n_k]`` for a batch), float64.

        Raises:
            ValueError: an unknown agent or an observation of the wrong shape.
        """
        seat = self._index(agent)
        shape = tuple(self.spec.observations[seat].shape)
        tensor = torch.as_tensor(np.asarray(obs)).float()
        single = tuple(tensor.shape) == shape
        if not single and tuple(tensor.shape[1:]) != shape:
            raise ValueError(
                f"obs of shape {tuple(tensor.shape)} does not fit agent {self.spec.agents[seat]!r}, whose "
                f"observations have shape {shape}; pass one observation or a batch [B, {', '.join(map(str, shape))}]"
            )
        batch = (tensor.unsqueeze(0) if single else tensor).to(self.config.device)
        mask_tensor = None
        if mask is not None:
            mask_tensor = torch.as_tensor(np.asarray(mask)).bool()
            mask_tensor = (mask_tensor.unsqueeze(0) if single else mask_tensor).to(self.config.device)
        probs = [p.cpu() for p in self.average_policies[seat].action_probs(batch, mask_tensor)]
        return [p[0].double().numpy() if single else p.double().numpy() for p in probs]

    def nash_conv(self) -> float:
        """Exact NashConv of the average policies.

        Raises:
            ValueError: without a known game (estimate it with ``best_response_gain``).
        """
        if self.game is None:
            raise ValueError("exact NashConv needs a known game; pass game=... to NFSP, or use best_response_gain()")
        return self.game.nash_conv(self.game.tables(self.average_policies))

    def exploitability(self) -> float:
        """Exact exploitability of the average policies; see :meth:`nash_conv`."""
        return self.nash_conv() / self.num_players

    def _index(self, agent: int | str) -> int:
        if isinstance(agent, str):
            if agent not in self.spec.agents:
                raise ValueError(f"unknown agent {agent!r}; agents are {list(self.spec.agents)}")
            return self.spec.agents.index(agent)
        if not 0 <= int(agent) < self.num_players:
            raise ValueError(f"agent index {agent!r} out of range for agents {list(self.spec.agents)}")
        return int(agent)

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Networks, optimizers, reservoirs, counters and history, as CPU tensors whatever :attr:`NfspConfig.device`
        (a checkpoint of a GPU run loads on a machine without one)."""
        state = {
            "config": self.config.to_dict(),
            "agents": list(self.spec.agents),
            "trainer": self.trainer.state_dict(),
            "average_policies": [p.state_dict() for p in self.average_policies],
            "optimizers": [o.state_dict() for o in self.optimizers],
            "reservoirs": [r.state_dict() for r in self.reservoirs],
            "sl_generator": self._sl_generator.get_state(),
            "iteration": self.iteration,
            "episodes": self.episodes,
            "history": [dict(row) for row in self.history],
            "wall_time": self.wall_time,
        }
        return state if torch.device(self.config.device).type == "cpu" else _on_cpu(state)

    def save(self, directory: str | Path) -> Path:
        """Writes :meth:`state_dict` to ``directory/nfsp.pt`` atomically; returns the file's path."""
        path = Path(directory) / CHECKPOINT_NAME
        atomic_torch_save(self.state_dict(), path)
        return path

    @classmethod
    def load(
        cls,
        directory: str | Path,
        env_fn: Any,
        game: KnownGame | None = None,
        device: str | None = None,
        **policy_kwargs: Any,
    ) -> NFSP:
        """Restores a run saved by :meth:`save` from ``directory/nfsp.pt``, as :meth:`from_state`.

        A checkpoint of an earlier format is read through :func:`marljoint.run.migrations.read_nfsp_checkpoint`
        (then :meth:`from_state`), which converts it.

        Raises:
            marljoint.checkpoint.CheckpointError: a missing or unreadable file, or one holding Python objects other
                than tensors, arrays and plain values (which could run code), refused unread.
            ValueError: as :meth:`from_state`.
        """
        state = load_checkpoint(Path(directory) / CHECKPOINT_NAME)
        return cls.from_state(state, env_fn, game, device, **policy_kwargs)

    @classmethod
    def from_state(
        cls,
        state: Mapping[str, Any],
        env_fn: Any,
        game: KnownGame | None = None,
        device: str | None = None,
        **policy_kwargs: Any,
    ) -> NFSP:
        """Restores a run from its :meth:`state_dict`, in the current format.

        Training continues from the saved networks, reservoirs and counters; episodes that were in progress at
        the save start afresh (a PettingZoo env's state is not saved), so a continued run is not bit-identical
        to an uninterrupted one.

        Args:
            state: a saved :meth:`state_dict`.
            env_fn: the same env factory as the saved run.
            game: the same known game, if any.
            device: the device to continue on (:attr:`NfspConfig.device`), whichever the saved run used; the saved
                run's when ``None``.
            **policy_kwargs: as for the constructor.

        Raises:
            ValueError: a state of an earlier format (naming the reader that converts it), the env's agents differ
                from the saved run's, or a ``device`` this machine does not have.
        """
        check_current_format(state["config"], (), "nfsp")
        config = NfspConfig.from_dict(state["config"])
        if device is not None:
            config = config.replace(device=device)
        nfsp = cls(env_fn, config, game, **policy_kwargs)
        if list(state["agents"]) != list(nfsp.spec.agents):
            raise ValueError(
                f"the checkpoint's agents {state['agents']} differ from this env's {list(nfsp.spec.agents)}"
            )
        nfsp.trainer.load_state_dict(state["trainer"])
        for policy, saved in zip(nfsp.average_policies, state["average_policies"]):
            policy.load_state_dict(saved)
        for optimizer, saved in zip(nfsp.optimizers, state["optimizers"]):
            optimizer.load_state_dict(saved)
        for reservoir, saved in zip(nfsp.reservoirs, state["reservoirs"]):
            reservoir.load_state_dict(saved)
        nfsp._sl_generator.set_state(state["sl_generator"])
        nfsp.iteration = int(state["iteration"])
        nfsp.episodes = int(state["episodes"])
        nfsp.history = [dict(row) for row in state["history"]]
        nfsp._elapsed_before = float(state["wall_time"])
        nfsp._start = time.perf_counter()
        return nfsp

    def __repr__(self) -> str:
        return f"NFSP(iteration={self.iteration}, agents={list(self.spec.agents)}, eta={self.config.anticipatory})"
