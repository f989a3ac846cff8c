"""The learner: the optimizers of a :class:`~marljoint.policies.JointPolicy` and the one-backward PPO update.

Every agent's PPO loss and the optional cross-agent auxiliary loss are summed into ONE scalar; ONE backward pass
runs; each network's gradient is clipped to a global L2 norm on its own and each agent's optimizer steps. The update
is three steps: flatten the rollout into rows (GAE, the value normaliser, ``(t, e)`` into rows), the joint loss of
a minibatch, and the step.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import nn

from marljoint.auxiliary import AuxOutput
from marljoint.collect.rollout import JointRollout
from marljoint.env.spaces import JointSpec
from marljoint.policies import ActorCritic, BehaviourPolicy, clip_member_grads_
from marljoint.policies.actor_critic import PolicyOutput
from marljoint.policies.joint import JointPolicy, NetworkSlot
from marljoint.policies.normalizer import RunningNormalizer
from marljoint.policies.recurrent import resolve_replay
from marljoint.ppo.config import JointTrainerConfig
from marljoint.ppo.divergence import DivergenceError, all_finite, first_non_finite, non_finite_parameter
from marljoint.ppo.gae import compute_gae
from marljoint.ppo.losses import (
    explained_variance,
    masked_mean,
    masked_moments,
    normalize_advantages,
    policy_loss,
    value_loss,
)
from marljoint.ppo.ppo_settings import PpoConfig
from marljoint.ppo.regularizer import PolicyRegularizer, RegularizerBatch
from marljoint.ppo.sequences import SequenceChunks, chunk_rows, pad_row

__all__ = ["JointStats", "Learner", "is_decoupled"]


@dataclass
class JointStats:
    """Diagnostics of one :meth:`JointMultiAgentTrainer.update`, averaged over its minibatch steps.

    Per-agent fields are lists of N floats in ``possible_agents`` order. Frozen agents are reported too.

    Attributes:
        policy_loss: clipped-surrogate loss per agent.
        value_loss: value loss per agent (in normalised units when value normalisation is on).
        entropy: policy entropy per agent (sum over heads).
        clip_fraction: fraction of ratios outside the clip range, per agent.
        approx_kl: approximate KL(old ‖ new) per agent.
        explained_var: explained variance of the rollout's value estimates w.r.t. the returns, per agent.
        advantage_std: standard deviation of the rollout's advantages per agent, over its valid rows, before any
            normalisation (the scale of each agent's learning signal, in its reward's units).
        aux_loss: mean auxiliary loss (0 without ``aux_fn``).
        total_loss: mean joint loss (Σ agents' losses + aux).
        num_mb_steps: optimizer steps taken (minibatches processed).
        grad_norm: gradient L2 norm of each network before clipping (mean over steps), keyed
            ``"<part>/<network>"``: part ``actor``, ``critic`` (separate networks) or ``actor_critic`` (a shared
            trunk); network the agent's name, or the names joined by ``+`` for one network shared by several.
        aux_metrics: mean of every metric the aux function reported.
    """

    policy_loss: list[float]
    value_loss: list[float]
    entropy: list[float]
    clip_fraction: list[float]
    approx_kl: list[float]
    explained_var: list[float]
    advantage_std: list[float]
    aux_loss: float
    total_loss: float
    num_mb_steps: int
    grad_norm: dict[str, float] = field(default_factory=dict)
    aux_metrics: dict[str, float] = field(default_factory=dict)


class _Batch(NamedTuple):
    """An update's rows, ``(t, e)`` flattened into ``R`` rows: per group ``[R, n_g, ...]``, per agent ``[R, N]``."""

    rows: int
    obs: list[torch.Tensor]
    actions: list[torch.Tensor]
    masks: list[torch.Tensor | None]
    alive: torch.Tensor
    valid: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    explained_var: torch.Tensor
    advantage_std: torch.Tensor
    """``[N]`` the standard deviation of the advantages over the valid rows, before normalisation."""
    sequences: SequenceChunks | None = None
    proximal: torch.Tensor | None = None
    """``[R, N]`` the taken actions' log-probs under the weights the update started from (policy lag 1 only)."""
    row_weights: torch.Tensor | None = None
    """``[R, N]`` the regulariser's weights of the rows' surrogate (``PolicyRegularizer.row_weights``), or ``None``."""


class _MinibatchLoss(NamedTuple):
    """One minibatch's joint loss and its terms (``[N]`` per agent)."""

    joint: torch.Tensor
    pg: Any
    value: torch.Tensor
    entropy: torch.Tensor
    aux: AuxOutput | None


class _Totals:
    """Sums of an update's statistics over its minibatch steps, on the trainer's device until :meth:`stats`."""

    def __init__(self, num_agents: int, device: torch.device) -> None:
        names = ("policy_loss", "value_loss", "entropy", "clip_fraction", "approx_kl")
        self.sums = {k: torch.zeros(num_agents, device=device) for k in names}
        self.grad_norm: dict[str, torch.Tensor] = {}
        self.aux_loss = torch.zeros((), device=device)
        self.total_loss = torch.zeros((), device=device)
        self.aux_metrics: dict[str, Any] = {}
        self.steps = 0

    def add(self, loss: _MinibatchLoss, grad_norms: dict[str, torch.Tensor]) -> None:
        for key, norm in grad_norms.items():
            self.grad_norm[key] = self.grad_norm[key] + norm if key in self.grad_norm else norm
        if loss.aux is not None:
            self.aux_loss += loss.aux.loss.detach()
            for key, value in loss.aux.metrics.items():
                self.aux_metrics[key] = self.aux_metrics.get(key, 0.0) + _detached(value)
        self.steps += 1
        self.sums["policy_loss"] += loss.pg.loss.detach()
        self.sums["value_loss"] += loss.value.detach()
        self.sums["entropy"] += loss.entropy.detach()
        self.sums["clip_fraction"] += loss.pg.clip_fraction
        self.sums["approx_kl"] += loss.pg.approx_kl
        self.total_loss += loss.joint.detach()

    def stats(self, explained_var: torch.Tensor, advantage_std: torch.Tensor) -> JointStats:
        """The means over the steps taken (with the rollout's ``explained_var`` and ``advantage_std``), read to the
        host once."""
        denom = max(self.steps, 1)
        means = _to_host(
            {
                **{k: v / denom for k, v in self.sums.items()},
                "explained_var": explained_var,
                "advantage_std": advantage_std,
                "aux_loss": self.aux_loss / denom,
                "total_loss": self.total_loss / denom,
                "grad_norm": {k: v / denom for k, v in self.grad_norm.items()},
                "aux_metrics": {k: v / denom for k, v in self.aux_metrics.items()},
            }
        )
        return JointStats(num_mb_steps=self.steps, **means)


class NetworkUnit:
    """One network and its optimizers, serving the agents of its :attr:`slot` (a whole group, or one agent).

    Gradients are clipped per network: the actor and the critic each on their own (one network when they share a
    trunk), and per member of stacked per-agent weights. A network shared by several agents is one network: its
    gradient, summed over those agents, is clipped once.

    Args:
        group: index into ``spec.groups`` of the agents' group.
        policy: the network.
        agent_indices: the agents it serves, in ``possible_agents`` order.
        optimizer: steps its actor parameters (and the critic's, unless ``critic_optimizer`` is given).
        critic_optimizer: steps its critic parameters (split critic), or ``None``.
        stacked: the network holds the whole group (a :class:`~marljoint.policies.StackedAdam` steps its
            members); False: it serves one agent, with any torch optimizer.
        agent_names: every agent's name (``possible_agents``), for the metrics' network names.
    """

    def __init__(
        self,
        group: int,
        policy: ActorCritic,
        agent_indices: tuple[int, ...],
        optimizer: Any,
        critic_optimizer: Any | None,
        stacked: bool,
        agent_names: Sequence[str],
    ) -> None:
        self.slot = NetworkSlot(group, tuple(agent_indices), stacked)
        """Which agents the network serves: the description :class:`~marljoint.policies.JointPolicy` takes."""
        self.policy = policy
        self.optimizer = optimizer
        self.critic_optimizer = critic_optimizer
        self.actor_params = list(policy.actor_parameters())
        self.critic_params = list(policy.critic_parameters())
        if getattr(policy, "share_trunk", False):
            self.clip_groups = {"actor_critic": self.actor_params + self.critic_params}
        else:
            self.clip_groups = {"actor": self.actor_params, "critic": self.critic_params}
        self.clip_groups = {part: params for part, params in self.clip_groups.items() if params}
        self.members = len(agent_indices) if stacked and not policy.share_parameters else 1
        names = [agent_names[i] for i in agent_indices]
        # Member m's network name: its agent's, or the agents' joined by "+" for one network shared by several.
        self.network_names = names if self.members == len(names) else ["+".join(names)]

    @property
    def group(self) -> int:
        """Index into ``spec.groups`` of the agents' group."""
        return self.slot.group

    @property
    def agent_indices(self) -> tuple[int, ...]:
        """The agents the network serves, in ``possible_agents`` order."""
        return self.slot.agents

    @property
    def stacked(self) -> bool:
        """The network holds the whole group; False: it serves one agent."""
        return self.slot.whole_group

    def member_active(self, active: torch.Tensor) -> torch.Tensor:
        """``[members]`` bool from the per-agent ``active`` mask; a shared network must be frozen as a whole."""
        mine = active[list(self.agent_indices)]
        if self.members == 1 and len(self.agent_indices) > 1:
            if bool(mine.any()) != bool(mine.all()):
                names = [int(i) for i in self.agent_indices]
                raise ValueError(
                    f"agents {names} share one network, so they cannot be frozen separately (active={mine.tolist()}); "
                    "freeze all of them, or build the trainer with share_parameters=False"
                )
            return mine[:1]
        return mine

    def clip(self, max_norm: float) -> dict[str, torch.Tensor]:
        """Clips every network's gradient to ``max_norm``; returns ``{part: [members] norms before clipping}``."""
        norms = {}
        for part, params in self.clip_groups.items():
            if self.stacked:
                norms[part] = clip_member_grads_(params, max_norm)
            else:
                # With an infinite cap the scale is min(1, inf) = 1: the call only measures the norm.
                norms[part] = nn.utils.clip_grad_norm_(params, max_norm).detach().reshape(1)
        return norms

    def step(self, active: torch.Tensor) -> None:
        """Steps the optimizers of the active members (after :meth:`clip`)."""
        member_active = self.member_active(active)
        for optimizer in self.optimizers():
            if self.stacked:
                optimizer.step(member_active)
            elif bool(member_active.all()):
                optimizer.step()

    def zero_grad(self) -> None:
        """Drops the network's gradients."""
        for p in self.actor_params + self.critic_params:
            p.grad = None

    def optimizers(self) -> list[Any]:
        """The optimizer, then the critic's optimizer if there is one."""
        return [o for o in (self.optimizer, self.critic_optimizer) if o is not None]


class Learner:
    """The optimizers of a joint policy and its PPO update.

    Args:
        config: the trainer's hyperparameters.
        policy: the :class:`~marljoint.policies.JointPolicy` to train.
        units: each network with its optimizers, in the policy's network order.
        generator: the source of the minibatch shuffles (the trainer's generator).
        behaviour: what plays the rollouts in the policy's place (``None``: the policy itself), see :attr:`decoupled`.
        shards: on data-parallel ranks, how this rank takes part in each minibatch (a
            :class:`~marljoint.ppo.sharded.RankShares`: its share of the rows, the gradients summed over the ranks
            before clipping); ``None``: one process.
    """

    def __init__(
        self,
        config: JointTrainerConfig,
        policy: JointPolicy,
        units: Sequence[NetworkUnit],
        generator: torch.Generator,
        behaviour: BehaviourPolicy | None = None,
        shards: Any = None,
    ) -> None:
        self.config = config
        self.shards = shards
        """How this rank takes part in each minibatch on data-parallel ranks, or ``None`` (one process)."""
        self.joint_policy = policy
        self.spec = policy.spec
        self.device = policy.device
        self.value_normalizer: RunningNormalizer | None = policy.value_normalizer
        self.units = list(units)
        """Each network with its optimizers (:class:`NetworkUnit`), in the policy's network order."""
        self._generator = generator
        self.recurrent_replay = resolve_replay(config.network.recurrent_replay, self.device)[0]
        """How a recurrent update replays its chunks: ``"cells"`` or ``"fused"`` (the config's setting, with
        ``"auto"`` resolved for the learner's device)."""
        self.lr_scale = 1.0
        self.decoupled = is_decoupled(config.collection.policy_lag, behaviour)
        """Whether an update is decoupled PPO (:func:`is_decoupled`)."""
        self.regularizer: PolicyRegularizer | None = None
        """A term of the joint loss computed from the policy's outputs (e.g. magnetic mirror descent's KL to the
        magnet), or ``None``."""

    def compute_advantages(self, rollout: JointRollout) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE advantages and returns, ``[T', E, N]`` each, over the rows of ``rollout.extended()``.

        ``T' = T`` unless moves were carried in from the previous rollout (then ``T' = N + T``, the carried rows
        first). The carried moves' targets are complete here; the rollout's own deferred moves get placeholder
        values that nothing trains on (they are complete in the next rollout).
        """
        return self._gae(rollout.extended())

    def _gae(self, rollout: JointRollout) -> tuple[torch.Tensor, torch.Tensor]:
        terminated = rollout.terminated
        if not self.config.ppo.bootstrap_truncation:
            terminated = terminated | rollout.truncated
        return compute_gae(
            rollout.rewards,
            rollout.values,
            terminated,
            rollout.truncated,
            rollout.bootstrap_values,
            self.config.ppo.gamma,
            self.config.ppo.gae_lambda,
            valid=rollout.valid,
            final_values=rollout.final_values,
        )

    def update(
        self,
        rollout: JointRollout,
        aux_fn: Callable[..., AuxOutput | torch.Tensor] | None = None,
        active: Sequence[bool] | torch.Tensor | None = None,
    ) -> JointStats:
        """Runs the PPO epochs on a rollout: one joint loss and one backward per minibatch.

        Args:
            rollout: from :meth:`~marljoint.JointMultiAgentTrainer.collect_rollout` (or built by hand with the same
                shapes).
            aux_fn: optional cross-agent loss called as ``aux_fn(features, alive)`` (a loss of the features alone
                is wrapped once with :func:`~marljoint.auxiliary.features_only`), with
                ``features[i]`` = agent i's encoder features ``[B, d_i]`` on the minibatch rows and ``alive`` the
                ``[B, N]`` mask of the agents present on each row; returns an
                :class:`~marljoint.auxiliary.AuxOutput` or a scalar. Present means in the episode: in
                turn-based games the players waiting for their turn count (their features are computed from what
                they observe while waiting), and frozen agents count as well as trained ones.
            active: ``[N]`` bools; False freezes that agent (its parameters, optimizer state and normaliser stay
                bit-identical; its statistics are still reported).

        Returns:
            :class:`JointStats`.

        Raises:
            ValueError: for a rollout whose shapes disagree, an ``active`` of the wrong length, or an aux loss
                that is not a finite scalar.
            TypeError: for an ``aux_fn`` that does not take ``(features, alive)``, naming
                :func:`~marljoint.auxiliary.features_only`.
            DivergenceError: a minibatch's loss or a gradient is not finite (raised before any optimizer steps on
                it), or a parameter is not finite after the epochs; names the metric and the agent or network.
        """
        self._check_rollout(rollout)
        active_mask = _active_mask(self.spec, active)
        call_aux = _aux_caller(aux_fn) if aux_fn is not None else None
        if self.regularizer is not None:
            self.regularizer.begin_update(self)
        batch = self._flatten(rollout, active_mask)
        if self.decoupled:
            shares = self.shards
            proximal = self._proximal_log_probs(batch) if shares is None else shares.proximal_log_probs(self, batch)
            batch = batch._replace(proximal=proximal)
        totals = _Totals(self.spec.num_agents, self.device)
        self.joint_policy.train()
        active_on_device = active_mask.to(self.device)
        self._epochs(batch, totals, call_aux, active_mask, active_on_device)
        # Losses and gradients were checked before every step; a finite step can still overflow a parameter.
        found = non_finite_parameter(self._networks())
        if found is not None:
            raise DivergenceError(*found)
        # After the epochs: the rollout was collected and trained on with one set of observation statistics, and
        # the next one is collected with statistics that include it.
        rows = rollout.steps * rollout.num_envs
        self.joint_policy.update_observation_statistics(
            [o.reshape(rows, *o.shape[2:]) for o in rollout.obs],
            rollout.alive.reshape(rows, self.spec.num_agents),
            active_on_device,
        )
        return totals.stats(batch.explained_var, batch.advantage_std)

    def _check_rollout(self, rollout: JointRollout) -> None:
        """Refuses a rollout whose shapes disagree or whose agents are not the trainer's (ValueError)."""
        rollout.validate()
        if rollout.spec.agents != self.spec.agents:
            raise ValueError(
                f"rollout agents {list(rollout.spec.agents)} differ from the trainer's {list(self.spec.agents)}"
            )

    def _epochs(
        self,
        batch: _Batch,
        totals: _Totals,
        call_aux: Callable[[list[torch.Tensor], torch.Tensor], AuxOutput] | None,
        active_mask: torch.Tensor,
        active_on_device: torch.Tensor,
    ) -> None:
        """The PPO epochs over ``batch``, stopping early when ``target_kl`` is exceeded."""
        cfg = self.config.ppo
        units, size = self._minibatch_shape(batch)
        if batch.sequences is None and cfg.num_minibatches is None:
            # As many minibatches as the config's rows make. A turn-based rollout's carried rows can make one more,
            # which is left out so that the number of steps per epoch is the config's, whatever a rollout carries.
            count = cfg.minibatches_per_epoch
        else:
            full = math.ceil(units / size) if cfg.num_minibatches is None else min(cfg.num_minibatches, units)
            count = _minibatch_count(full, cfg)
        for _ in range(cfg.n_epochs):
            order = torch.randperm(units, generator=self._generator).to(self.device)
            if cfg.num_minibatches is None:
                minibatches = order.split(size)
            else:  # this many of (nearly) equal size
                minibatches = order.tensor_split(min(cfg.num_minibatches, units))
            for picked in minibatches[:count]:
                if self.shards is None:
                    loss = self._minibatch_loss(batch, picked, call_aux)
                else:
                    loss = self.shards.minibatch_loss(self, batch, picked, call_aux)
                if cfg.target_kl is not None and _too_far(loss.pg.approx_kl[active_on_device], cfg.target_kl):
                    # The policy already moved too far on these rows: stop before stepping on them.
                    return
                totals.add(*self._step(loss, active_mask))

    def _minibatch_shape(self, batch: _Batch) -> tuple[int, int]:
        """``(units, size)``: the update's rows (feed-forward) or sequence chunks (recurrent), and how many of them
        a minibatch takes (at most). With ``num_minibatches`` the units are split into that many; otherwise a
        minibatch holds ``minibatch_size`` rows, or ``max(1, minibatch_size // bptt_length)`` whole chunks."""
        cfg = self.config.ppo
        seq = batch.sequences
        units = batch.rows if seq is None else seq.count
        if seq is None or cfg.num_minibatches is not None:
            return units, cfg.minibatch_rows(units)
        return units, max(1, cfg.minibatch_size // cfg.chunk_length)

    def _flatten(self, rollout: JointRollout, active_mask: torch.Tensor) -> _Batch:
        """The update's rows: GAE on the extended rollout, the normaliser's statistics merged, ``(t, e)`` flattened."""
        n = self.spec.num_agents
        carried = 0 if rollout.carried is None else rollout.carried.steps
        rollout = rollout.extended()
        advantages, returns = self._gae(rollout)
        row_weights = self._row_weights(rollout, carried)
        valid = rollout.trainable
        rows = rollout.steps * rollout.num_envs
        if self.value_normalizer is not None:
            self.value_normalizer.update(returns.reshape(rows, n), valid.reshape(rows, n), active_mask)
        b_valid = valid.reshape(rows, n)
        ev = explained_variance(rollout.values.reshape(rows, n), returns.reshape(rows, n), b_valid)
        b_advantages = advantages.reshape(rows, n)
        _, advantage_std = masked_moments(b_advantages, b_valid)
        b_values = rollout.values.reshape(rows, n)
        b_returns = returns.reshape(rows, n)
        if self.value_normalizer is not None:
            b_values = self.value_normalizer.normalize(b_values)
            b_returns = self.value_normalizer.normalize(b_returns)
        batch = _Batch(
            rows=rows,
            obs=[o.reshape(rows, *o.shape[2:]) for o in rollout.obs],
            actions=[a.reshape(rows, *a.shape[2:]) for a in rollout.actions],
            masks=[None if m is None else m.reshape(rows, *m.shape[2:]) for m in rollout.action_masks],
            alive=rollout.alive.reshape(rows, n),
            valid=b_valid,
            log_probs=rollout.log_probs.reshape(rows, n),
            values=b_values,
            advantages=b_advantages,
            returns=b_returns,
            explained_var=ev,
            advantage_std=advantage_std,
            row_weights=None if row_weights is None else row_weights.reshape(rows, n).to(self.device),
        )
        if rollout.states is None:
            return batch
        return _with_sequences(batch, rollout, carried, self.config.ppo.chunk_length, self.device)

    def _row_weights(self, rollout: JointRollout, carried: int) -> torch.Tensor | None:
        """``[T', E, N]`` the regulariser's row weights of the extended rollout, or ``None`` (no regulariser, or one
        that weights no rows)."""
        weigh = getattr(self.regularizer, "row_weights", None)
        return None if weigh is None else weigh(rollout, carried)

    def _replay(self, batch: _Batch, picked: torch.Tensor) -> tuple[torch.Tensor, list[PolicyOutput]]:
        """The networks on the ``picked`` rows (feed-forward) or chunks (recurrent, replayed from their stored
        states): the rows' indices in the outputs' order and the outputs."""
        policy = self.joint_policy
        seq = batch.sequences
        # A chunk's rows in step order, the chunks side by side: [L, b] flattened (the sequence replay's order).
        idx = picked if seq is None else seq.rows[picked].T.reshape(-1)
        if seq is None:
            return idx, policy.forward([o[idx] for o in batch.obs], batch.alive[idx])
        length, chunks = seq.length, picked.shape[0]

        def steps(x: torch.Tensor) -> torch.Tensor:
            return x[idx].reshape(length, chunks, *x.shape[1:])

        first = seq.rows[picked, 0]
        outputs = policy.forward_sequence(
            [steps(o) for o in batch.obs],
            steps(batch.alive),
            [s[first] for s in seq.states],
            steps(seq.starts),
            steps(seq.advance),
            replay=self.recurrent_replay,
        )
        return idx, outputs

    @torch.no_grad()
    def _proximal_log_probs(self, batch: _Batch) -> torch.Tensor:
        """``[R, N]``: the taken actions' log-probs under the weights this update starts from.

        With policy lag 1 the rollout was collected with the weights one update older. PPO's trust region is then
        centred on these (the proximal policy) and the rows are reweighted by ``π_prox / π_behaviour``, so the
        objective neither moves the policy further than a lag-0 update would nor wastes the rows whose stale ratio
        already lies outside the clip range.
        """
        units, size = self._minibatch_shape(batch)
        proximal = batch.log_probs.clone()
        for picked in torch.arange(units, device=self.device).split(size):
            idx, outputs = self._replay(batch, picked)
            log_prob, _, _ = self.joint_policy.evaluate(
                outputs, [a[idx] for a in batch.actions], [None if m is None else m[idx] for m in batch.masks]
            )
            proximal[idx] = log_prob
        return proximal

    def _minibatch_loss(
        self, batch: _Batch, picked: torch.Tensor, call_aux: Callable[..., AuxOutput] | None
    ) -> _MinibatchLoss:
        """The joint loss on the ``picked`` rows (feed-forward) or chunks (recurrent): every agent's PPO loss plus
        the aux loss on the same rows."""
        cfg = self.config.ppo
        policy = self.joint_policy
        idx, outputs = self._replay(batch, picked)
        mb_valid = batch.valid[idx]
        mb_alive = batch.alive[idx]
        log_prob, entropy, features = policy.evaluate(
            outputs, [a[idx] for a in batch.actions], [None if m is None else m[idx] for m in batch.masks]
        )
        mb_adv = batch.advantages[idx]
        if cfg.normalize_advantages:
            mb_adv = normalize_advantages(mb_adv, mb_valid)
        mb_weights = None if batch.row_weights is None else batch.row_weights[idx]
        if batch.proximal is None:
            pg = policy_loss(log_prob, batch.log_probs[idx], mb_adv, cfg.clip_range, mb_valid, mb_weights)
        else:  # policy lag 1: the trust region around the proximal policy, importance-weighted (decoupled PPO)
            proximal = batch.proximal[idx]
            weights = (proximal - batch.log_probs[idx]).exp()
            if mb_weights is not None:
                weights = weights * mb_weights
            pg = policy_loss(log_prob, proximal, mb_adv, cfg.clip_range, mb_valid, weights)
        new_values = policy.agent_columns(o.values for o in outputs)
        vl = value_loss(new_values, batch.values[idx], batch.returns[idx], cfg.clip_range_vf, mb_valid)
        ent = masked_mean(entropy, mb_valid)
        joint = (pg.loss + cfg.vf_coef * vl - cfg.ent_coef * ent).sum()
        aux = None
        if call_aux is not None:
            # Every present agent's features on the same rows: in turn-based games the waiting players too (a row
            # has one mover), and frozen agents as well as trained ones.
            aux = call_aux(features, mb_alive)
            joint = joint + aux.loss
        if self.regularizer is not None:
            masks = [None if m is None else m[idx] for m in batch.masks]
            joint = joint + self.regularizer(
                RegularizerBatch(
                    policy, outputs, [o[idx] for o in batch.obs], mb_alive, masks, mb_valid, mb_adv, mb_weights
                )
            )
        return _MinibatchLoss(joint, pg, vl, ent, aux)

    def _step(self, loss: _MinibatchLoss, active_mask: torch.Tensor) -> tuple[_MinibatchLoss, dict[str, torch.Tensor]]:
        """One backward (on data-parallel ranks, the gradients and loss terms then summed over the ranks), then each
        network clipped and, when the loss and every gradient norm are finite, the active agents' optimizers
        stepped; returns the minibatch's loss terms and the ``"<part>/<network>"`` gradient norms before clipping.

        Raises:
            DivergenceError: before any optimizer steps, when the loss or a gradient is not finite.
        """
        for unit in self.units:
            unit.zero_grad()
        loss.joint.backward()
        if self.shards is not None:
            parameters = [p for unit in self.units for p in unit.actor_params + unit.critic_params]
            loss = self.shards.reduce_(loss, parameters, self.config.ppo.target_kl is not None)
        norms_by_key = {}
        for unit in self.units:
            for part, norms in unit.clip(self.config.optim.max_grad_norm).items():
                for name, norm in zip(unit.network_names, norms):
                    norms_by_key[f"{part}/{name}"] = norm
        # A non-finite gradient has a non-finite norm: one reduction over the norms the clipping measured anyway.
        if not all_finite([loss.joint.reshape(1), *norms_by_key.values()]):
            raise self._divergence(loss, norms_by_key)
        for unit in self.units:
            unit.step(active_mask)
        for unit in self.units:
            unit.zero_grad()
        return loss, norms_by_key

    def _divergence(self, loss: _MinibatchLoss, norms: dict[str, torch.Tensor]) -> DivergenceError:
        """The first culprit of a non-finite minibatch: a parameter (an earlier step overflowed it), a loss term of
        an agent, the aux loss, then a gradient norm."""
        agents = self.spec.agents
        terms = {"policy_loss": loss.pg.loss, "value_loss": loss.value, "entropy": loss.entropy}
        named = [
            (f"{term} of agent {agents[i]!r}", values[i]) for term, values in terms.items() for i in range(len(agents))
        ]
        if loss.aux is not None:
            named.append(("aux_loss", loss.aux.loss))
        named += [(f"gradient norm of {key}", norm) for key, norm in norms.items()]
        found = non_finite_parameter(self._networks()) or first_non_finite(named)
        return DivergenceError(*(found or ("total_loss", float(loss.joint.detach()))))

    def _networks(self) -> list[tuple[str, nn.Module]]:
        """Each network with its name (its agent, or its agents joined by ``+``)."""
        return [("+".join(unit.network_names), unit.policy) for unit in self.units]

    # ------------------------------------------------------------------ training loop
    def set_learning_rate_scale(self, scale: float) -> None:
        """Sets every optimizer's learning rate to ``scale ×`` its own initial value.

        The initial value is each optimizer's learning rate when this is first called (kept in its param groups
        as ``initial_lr``, so it survives checkpoints): the configured rates for :meth:`from_env`, and whatever
        the optimizers passed to the constructor were built with.
        """
        self.lr_scale = float(scale)
        for unit in self.units:
            for optimizer in unit.optimizers():
                for group in optimizer.param_groups:
                    group.setdefault("initial_lr", group["lr"])
                    group["lr"] = group["initial_lr"] * self.lr_scale


def _with_sequences(batch: _Batch, rollout: JointRollout, carried: int, length: int, device: torch.device) -> _Batch:
    """A recurrent rollout's rows with the padding row appended and their sequence chunks of ``length`` steps on
    ``device``; ``rollout`` is the extended one, whose first ``carried`` steps are moves carried in (each replayed
    as a chunk of its own)."""
    if rollout.states is None or rollout.starts is None:
        raise ValueError("a recurrent update needs the rollout's states and starts; this rollout lacks them")
    rows, n = batch.rows, rollout.spec.num_agents
    chunks = chunk_rows(rollout.steps - carried, rollout.num_envs, length, device, carried)
    if carried:  # the carried rows without a pending move (no agent trained there) make no chunk
        used = torch.ones(len(chunks), dtype=torch.bool, device=device)
        lead = carried * rollout.num_envs
        used[:lead] = batch.valid[chunks[:lead, 0]].any(-1)
        chunks = chunks[used]
    seq = SequenceChunks(
        rows=chunks,
        length=length,
        # The stored states come with the rollout, from wherever it acted; the replay runs on the learner's device.
        states=[pad_row(s.reshape(rows, *s.shape[2:]).to(device)) for s in rollout.states],
        starts=pad_row(rollout.starts.reshape(rows, n).to(device), True),
        advance=pad_row((rollout.alive & rollout.acting).reshape(rows, n), False),
    )
    return _Batch(
        rows=rows,
        obs=[pad_row(o) for o in batch.obs],
        actions=[pad_row(a) for a in batch.actions],
        masks=[None if m is None else pad_row(m, True) for m in batch.masks],
        alive=pad_row(batch.alive, False),
        valid=pad_row(batch.valid, False),
        log_probs=pad_row(batch.log_probs),
        values=pad_row(batch.values),
        advantages=pad_row(batch.advantages),
        returns=pad_row(batch.returns),
        explained_var=batch.explained_var,
        advantage_std=batch.advantage_std,
        sequences=seq,
        row_weights=None if batch.row_weights is None else pad_row(batch.row_weights),
    )


def _active_mask(spec: JointSpec, active: Sequence[bool] | torch.Tensor | None) -> torch.Tensor:
    """``[N]`` bool: the agents an update trains (``active``, or all of ``spec``'s agents)."""
    n = spec.num_agents
    if active is None:
        return torch.ones(n, dtype=torch.bool)
    mask = torch.as_tensor(active, dtype=torch.bool).reshape(-1).cpu()
    if mask.numel() != n:
        raise ValueError(
            f"active has {mask.numel()} entries for {n} agents {list(spec.agents)}; pass one bool per agent"
        )
    return mask


def is_decoupled(policy_lag: int, behaviour: BehaviourPolicy | None) -> bool:
    """Whether a PPO update centres its trust region on the weights it starts from and weights each row by
    ``π_prox / π_behaviour`` (decoupled PPO): exactly when its rollouts are not played by those weights, i.e. when
    they are collected with older weights (``policy_lag`` 1) or by a ``behaviour`` policy (the trainer's
    :attr:`~marljoint.JointMultiAgentTrainer.behaviour`, from ``uniform_mix`` > 0). Otherwise plain PPO against
    the stored log-probs."""
    return bool(policy_lag) or behaviour is not None


def _minibatch_count(full: int, config: PpoConfig) -> int:
    """Minibatch steps per epoch when a full pass takes ``full`` minibatches (the single-minibatch mode and the cap
    applied)."""
    count = full if config.iterate_all_minibatches else 1
    if config.max_minibatches_per_epoch is not None:
        count = min(count, max(1, config.max_minibatches_per_epoch))
    return count


def _too_far(approx_kl: torch.Tensor, target_kl: float) -> bool:
    """Whether an agent's approximate KL exceeds ``1.5 × target_kl`` (the early stop of ``target_kl``)."""
    return bool((approx_kl > 1.5 * target_kl).any())


def _detached(value: Any) -> Any:
    """A metric value without its graph (tensors stay on their device until :func:`_to_host`)."""
    return value.detach() if isinstance(value, torch.Tensor) else float(value)


def _to_host(stats: dict[str, Any]) -> dict[str, Any]:
    """The update's statistics as Python numbers: the one point where they leave the trainer's device.

    ``[N]`` tensors become lists, scalar tensors floats; nested dicts are converted entry by entry.
    """
    out: dict[str, Any] = {}
    for key, value in stats.items():
        if isinstance(value, dict):
            out[key] = {k: float(v) for k, v in value.items()}
        elif isinstance(value, torch.Tensor) and value.dim() > 0:
            out[key] = value.tolist()
        else:
            out[key] = float(value)
    return out


def _aux_caller(aux_fn: Callable[..., Any]) -> Callable[[list[torch.Tensor], torch.Tensor], AuxOutput]:
    """Calls ``aux_fn(features, alive)`` and checks that it returned an :class:`AuxOutput` or a finite scalar."""

    def call(features: list[torch.Tensor], alive: torch.Tensor) -> AuxOutput:
        try:
            result = aux_fn(features, alive)
        except TypeError:
            _refuse_one_argument(aux_fn)
            raise
        if not isinstance(result, AuxOutput):
            result = AuxOutput(result, {})
        loss = result.loss
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ValueError(f"aux_fn must return a scalar tensor (or AuxOutput), got {type(loss).__name__}")
        if not bool(torch.isfinite(loss.detach())):
            raise ValueError(f"aux_fn returned a non-finite loss ({float(loss.detach())})")
        return AuxOutput(loss.reshape(()), result.metrics)

    return call


def _refuse_one_argument(aux_fn: Callable[..., Any]) -> None:
    """Raises a TypeError naming the fix when ``aux_fn`` cannot take ``(features, alive)``; the signature is read
    only after a call failed, so a working ``aux_fn`` costs nothing.

    Raises:
        TypeError: naming :func:`~marljoint.auxiliary.features_only`.
    """
    try:
        inspect.signature(aux_fn).bind(None, None)
    except TypeError:
        raise TypeError(
            f"aux_fn {getattr(aux_fn, '__name__', aux_fn)!r} does not take (features, alive): every aux_fn is "
            "called as aux_fn(features, alive); wrap a loss of the features alone with "
            "marljoint.auxiliary.features_only(fn)"
        ) from None
    except ValueError:  # no signature to read (some builtins): the call's own TypeError stands
        return
