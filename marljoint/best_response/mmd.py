"""Magnetic mirror descent (MMD) self-play: PPO of both seats plus a reverse KL to a magnet policy.

Sokota et al. (2022, arXiv 2206.05825) show that mirror descent regularised towards a *magnet* policy ρ converges
in its last iterate to the regularised equilibrium of a two-player zero-sum game; with the magnet moved to the
current policy every few updates (or the regularisation annealed) the iterates approach a Nash equilibrium. Its deep
form is PPO with one more term. Each seat i maximises, per update t,

    E[ clipped surrogate of A ]  −  α_t · E_{s ~ visited}[ KL(π_θ(·|s) ‖ ρ(·|s)) ]

with ``KL(π ‖ ρ) = Σ_a π(a|s) (log π(a|s) − log ρ(a|s))`` summed exactly over the legal actions (the actions are
discrete), on the states the seat moved at in the rollout. The terms of both seats enter the one joint loss, so the
update keeps its one backward. The schedule (:class:`MmdConfig`): ``α_t = α · f(t)`` and the step size (the
learning rate) ``η_t = η · f(t)`` with ``f(t) = 1 / sqrt(1 + t / τ)`` (``"inverse_sqrt"``) or ``f = 1``
(``"constant"``); the magnet is a frozen copy of the policy refreshed every ``K`` updates (``"moving"``), a
frozen copy whose parameters move a fraction β of the way to the policy's after every update (``"ema"``), or the
uniform policy over the legal actions (``"uniform"``, which makes the term an entropy bonus).

The ``"ema"`` magnet is the deep-RL form of the paper's magnet update ``ρ_{t+1} ∝ ρ_t^{1−η̃} π_{t+1}^{η̃}``, a
geometric step of the magnet towards the latest policy: at the start of every update t > 0 each network parameter
becomes ``p_ρ ← (1 − β)·p_ρ + β·p_π`` (β = ``magnet_rate``; the step acts on the parameters, not on the
distributions), and the buffers (observation statistics, agent codes) are copied
(:meth:`~marljoint.policies.JointPolicy.move_weights_towards`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from marljoint.collect.rollout import JointRollout
from marljoint.policies import AgentPolicy
from marljoint.policies.joint import JointPolicy
from marljoint.ppo.losses import masked_mean
from marljoint.ppo.regularizer import RegularizerBatch

__all__ = [
    "ALPHA_UNITS",
    "MAGNETS",
    "SCHEDULES",
    "SELF_PLAY_KINDS",
    "MmdConfig",
    "MmdRegularizer",
    "OpponentReach",
    "magnet_kl",
    "mmd_regularizer",
]

MAGNETS = ("moving", "uniform", "ema")
"""Kinds of magnet: a copy of the policy refreshed every ``magnet_every`` updates, the uniform policy, or a copy
whose parameters move a fraction ``magnet_rate`` towards the policy's after every update."""
SCHEDULES = ("inverse_sqrt", "constant")
"""How α and the learning rate decay with the update count t: ``1 / sqrt(1 + t / τ)``, or not at all."""
ALPHA_UNITS = ("payoff", "advantage_std")
"""The units of α: those of the advantages (the game's payoffs), or one standard deviation of the seat's advantages
on the minibatch (the same α then means the same relative weight in a game of any payoff scale)."""
SELF_PLAY_KINDS = ("ppo", "mmd")
"""The self-play of the joint trainer: plain PPO of both seats, or PPO with the KL to a magnet (MMD)."""


@dataclass(frozen=True)
class MmdConfig:
    """The settings of magnetic mirror descent self-play (the paper's notation in brackets).

    The defaults are those measured on OpenSpiel's Kuhn and Leduc poker (``docs/best_response.md``).
    """

    alpha: float = 0.5
    """α, the weight of KL(π ‖ ρ) at update 0 (> 0), in ``alpha_units``."""
    alpha_units: str = "payoff"
    """``"payoff"``: α is in the units of the advantages (the game's payoffs); ``"advantage_std"``: in standard
    deviations of the seat's advantages on each minibatch, so that it weighs the KL against the surrogate the same
    way whatever the game's payoff scale."""
    magnet: str = "uniform"
    """ρ: ``"moving"`` (a frozen copy of the policy, refreshed every ``magnet_every`` updates), ``"uniform"``, or
    ``"ema"`` (a frozen copy whose parameters move ``magnet_rate`` of the way to the policy's after every update)."""
    magnet_every: int = 10
    """Updates between two refreshes of a moving magnet (≥ 1)."""
    magnet_rate: float = 0.05
    """β of the ``"ema"`` magnet, in (0, 1]: the fraction of the way its parameters move towards the policy's per
    update (1 makes it the policy of the previous update)."""
    schedule: str = "inverse_sqrt"
    """``"inverse_sqrt"``: α_t = α / sqrt(1 + t / τ); ``"constant"``: α_t = α."""
    decay_updates: float = 100.0
    """τ of ``"inverse_sqrt"``, in updates (> 0)."""
    alpha_min: float = 0.0
    """The floor of α_t (≥ 0, in ``alpha_units``; 0: none): α_t = max(α_min, α·f(t)). The iterates then approach
    the regularised equilibrium of α_min (a bias the docs tabulate) instead of jittering ever more as α_t falls; the
    step size keeps following f(t)."""
    anneal_step_size: bool = True
    """Also scale the learning rate (the step size η) by the schedule's factor."""
    opponent_reach: bool = False
    """Weight each of a seat's rows, in the surrogate and in the KL, so that an information state weighs as much as
    the seat's own probability of reaching it, whatever the opponents' and chance's (:class:`OpponentReach`; for
    observations that identify the information state). Sampled play visits a state as often as the opponents and
    chance lead there, so a plain update moves the policy there at that rate, and the states an opponent rarely
    leads to, where a best response against the seat may well go, learn slowest; the tabular update MMD comes from
    moves every state alike. The price: noisier updates where the weights are large."""
    max_weight: float = 10.0
    """The cap of an ``opponent_reach`` weight, in multiples of the seat's mean weight (≥ 1)."""

    def __post_init__(self) -> None:
        _positive_number("alpha", self.alpha, "e.g. alpha=0.05")
        _positive_number("decay_updates", self.decay_updates, "e.g. decay_updates=100")
        floor = self.alpha_min
        if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 0.0 <= floor <= self.alpha:
            raise ValueError(
                f"alpha_min must be a number from 0 to alpha ({self.alpha}), got {floor!r}; e.g. alpha_min=0.2, or 0 "
                "for no floor"
            )
        if self.magnet not in MAGNETS:
            raise ValueError(f"magnet must be one of {MAGNETS}, got {self.magnet!r}")
        if self.alpha_units not in ALPHA_UNITS:
            raise ValueError(f"alpha_units must be one of {ALPHA_UNITS}, got {self.alpha_units!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if isinstance(self.magnet_every, bool) or not isinstance(self.magnet_every, int) or self.magnet_every < 1:
            raise ValueError(f"magnet_every must be a positive integer (updates), got {self.magnet_every!r}")
        rate = self.magnet_rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 < rate <= 1.0:
            raise ValueError(f"magnet_rate must be a number in (0, 1], got {rate!r}; e.g. magnet_rate=0.05")
        if not isinstance(self.anneal_step_size, bool):
            raise ValueError(f"anneal_step_size must be true or false, got {self.anneal_step_size!r}")
        if not isinstance(self.opponent_reach, bool):
            raise ValueError(f"opponent_reach must be true or false, got {self.opponent_reach!r}")
        cap = self.max_weight
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not math.isfinite(cap) or cap < 1:
            raise ValueError(f"max_weight must be a finite number ≥ 1, got {cap!r}; e.g. max_weight=10")

    def factor(self, update: int) -> float:
        """The schedule's factor f(t) at update ``t`` (0-based): ``1 / sqrt(1 + t / τ)``, or 1."""
        if self.schedule == "constant":
            return 1.0
        return 1.0 / math.sqrt(1.0 + update / self.decay_updates)

    def alpha_at(self, update: int) -> float:
        """α_t, the KL weight of update ``t``: ``max(alpha_min, α · f(t))``."""
        return max(self.alpha_min, self.alpha * self.factor(update))

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain mapping (a TOML table of ``config.toml``)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> MmdConfig:
        """The config of a mapping of its fields (missing ones take their defaults).

        Raises:
            ValueError: for an unknown field (listing the valid ones) or an invalid value.
        """
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise ValueError(f"unknown mmd setting(s) {unknown}; valid settings: {names}")
        return cls(**dict(values))


def _positive_number(name: str, value: Any, example: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}; {example}")


def magnet_kl(
    logits: torch.Tensor, magnet_logits: torch.Tensor | None, mask: torch.Tensor | None, nvec: Sequence[int]
) -> torch.Tensor:
    """KL(π ‖ ρ) per row, exact over the legal actions and summed over the heads.

    Args:
        logits: ``[..., sum(nvec)]`` the policy's logits (heads concatenated).
        magnet_logits: ``[..., sum(nvec)]`` the magnet's logits; ``None`` for the uniform magnet.
        mask: ``[..., sum(nvec)]`` bool, True where an action is legal; ``None`` allows every action. A head with
            no legal action counts as all legal (as the action distributions treat it).
        nvec: choices per head.

    Returns:
        ``[...]`` the divergence, with its gradient with respect to ``logits`` (the magnet's is not followed).

    Example:
        >>> import torch
        >>> round(float(magnet_kl(torch.tensor([0.0, 0.0]), None, None, (2,))), 6)
        0.0
    """
    if mask is None:
        mask = torch.ones_like(logits, dtype=torch.bool)
    if magnet_logits is None:
        magnet_logits = torch.zeros_like(logits)
    # Illegal actions get the most negative finite logit, not -inf: their terms are exactly 0 and no inf - inf
    # puts a NaN into the gradient.
    fill = torch.finfo(logits.dtype).min
    sizes = [int(n) for n in nvec]
    total = logits.new_zeros(logits.shape[:-1])
    for head, ref, legal in zip(logits.split(sizes, -1), magnet_logits.split(sizes, -1), mask.split(sizes, -1)):
        legal = legal | ~legal.any(-1, keepdim=True)
        log_p = head.masked_fill(~legal, fill).log_softmax(-1)
        log_rho = ref.detach().masked_fill(~legal, fill).log_softmax(-1)
        total = total + (log_p.exp() * (log_p - log_rho) * legal).sum(-1)
    return total


class OpponentReach:
    """The row weights of :attr:`MmdConfig.opponent_reach` and what they carry from one rollout to the next.

    Seat i's rows at an information state I come from histories h ∈ I with probability ∝ r_i(I)·Q_i(h), r_i its
    own probability of the moves leading to I and Q_i(h) the opponents' and chance's; in expectation an update
    holds n·r_i(I)·Q_i(I) rows of I. A row's weight is ``r_i(I) / c(I)``, c(I) the number of the seat's rows of
    the update that observe I, then divided by the seat's mean weight and capped at ``max_weight``: the total
    weight at I becomes ∝ r_i(I), the opponents' and chance's share of the visits removed, while every row of one
    state keeps the same weight (the rows within I keep the distribution over the hidden histories that the
    opponents' play implies; a weight per history would erase it). The seat's observation identifies the
    information state: games with perfect-recall observations (OpenSpiel's information-state tensors, the bundled
    Kuhn poker); with observations that never repeat every row counts once. r_i runs across rollouts: per env copy
    and seat, the log-probability of the seat's moves so far in the running episode is carried to the next
    rollout, and so is that of each move deferred to it (:attr:`~marljoint.collect.JointRollout.deferred`); both are
    part of :meth:`state_dict`.

    Args:
        max_weight: the cap of a weight after the division by the mean (≥ 1).
    """

    def __init__(self, max_weight: float) -> None:
        self.max_weight = float(max_weight)
        self.own_log_prob: torch.Tensor | None = None
        """``[E, N]`` float64: each seat's log-probability of its own moves so far in each env copy's episode."""
        self.pending: torch.Tensor | None = None
        """``[E, N]`` float64: the log-probability r_i before each seat's move carried to the next rollout (its pending
        move; a move orphaned by a truncation is deferred too, but not carried)."""

    def __call__(self, rollout: JointRollout, carried: int) -> torch.Tensor:
        """The weights of an extended rollout's rows (its first ``carried`` rows are the moves carried in).

        Args:
            rollout: :meth:`~marljoint.collect.JointRollout.extended` of the update's rollout.
            carried: the rows carried in at its start (0 when none).

        Returns:
            ``[T', E, N]`` float32 on the rollout's device; 1 on the rows a seat does not train on.

        Raises:
            ValueError: a rollout with another number of env copies or seats than the ones before it.
        """
        own_before = self._own_log_reach(rollout, carried)  # [T', E, N]
        trained = rollout.trainable.cpu()
        weights = torch.ones(own_before.shape, dtype=torch.float64)
        for g, group in enumerate(rollout.spec.groups):
            for k, seat in enumerate(group.agent_indices):
                rows = trained[..., seat]
                if not bool(rows.any()):
                    continue
                obs = rollout.obs[g][:, :, k].cpu()[rows].reshape(int(rows.sum()), -1)
                _, state, counts = torch.unique(obs, dim=0, return_inverse=True, return_counts=True)
                raw = own_before[..., seat][rows].exp() / counts[state].to(torch.float64)
                weights[..., seat][rows] = (raw / raw.mean()).clamp(max=self.max_weight)
        return weights.to(rollout.log_probs.device, torch.float32)

    def _own_log_reach(self, rollout: JointRollout, carried: int) -> torch.Tensor:
        """``[T', E, N]`` float64: log r_i, each seat's log-probability of its own earlier moves in the row's
        episode; advances the carry to the end of the rollout."""
        log_probs = rollout.log_probs.detach().to("cpu", torch.float64)
        steps, envs, seats = log_probs.shape
        if self.own_log_prob is None or self.pending is None:
            self.own_log_prob = torch.zeros(envs, seats, dtype=torch.float64)
            self.pending = torch.zeros(envs, seats, dtype=torch.float64)
        if tuple(self.own_log_prob.shape) != (envs, seats):
            raise ValueError(
                f"a rollout of {envs} env copies and {seats} seats after rollouts of "
                f"{tuple(self.own_log_prob.shape)}: the opponent-reach weights follow one run's env copies"
            )
        moved = rollout.valid.cpu()
        ended = rollout.terminated | rollout.truncated | rollout.truncated_waiting
        continues = (rollout.alive & ~ended).any(-1).cpu()  # [T', E]: the episode goes on after the row
        before = torch.zeros(steps, envs, seats, dtype=torch.float64)
        before[:carried] = self.pending
        own = self.own_log_prob.clone()
        for t in range(carried, steps):
            before[t] = own
            own += torch.where(moved[t], log_probs[t], 0.0)
            own[~continues[t]] = 0.0
        self.own_log_prob = own
        self.pending = torch.zeros(envs, seats, dtype=torch.float64)
        if rollout.deferred is not None:
            # A seat's deferred rows are its pending move, always its last, and the moves its truncated episodes
            # orphaned before it, which are not carried: the carry is the last row's reach, never a sum of them.
            rows = torch.arange(steps).view(steps, 1, 1)
            last = torch.where(rollout.deferred.cpu(), rows, -1).amax(0)  # [E, N]
            reach = before.gather(0, last.clamp_min(0).unsqueeze(0)).squeeze(0)
            self.pending = torch.where(last >= 0, reach, self.pending)
        return before

    def state_dict(self) -> dict[str, Any]:
        """The carried log-probabilities (tensors; ``None`` before the first rollout)."""
        own, pending = self.own_log_prob, self.pending
        return {
            "own_log_prob": None if own is None else own.clone(),
            "pending": None if pending is None else pending.clone(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`."""
        own, pending = state.get("own_log_prob"), state.get("pending")
        self.own_log_prob = None if own is None else torch.as_tensor(own, dtype=torch.float64).clone()
        self.pending = None if pending is None else torch.as_tensor(pending, dtype=torch.float64).clone()


class MmdRegularizer:
    """The MMD term of the joint loss (a :class:`~marljoint.ppo.regularizer.PolicyRegularizer`) and its schedule.

    Args:
        policy: the joint policy being trained (its copy is the moving magnet).
        config: the settings.
    """

    def __init__(self, policy: JointPolicy, config: MmdConfig) -> None:
        self.config = config
        self.magnet = policy.copy_to(policy.device) if config.magnet in ("moving", "ema") else None
        if self.magnet is not None:
            self.magnet.train(False)
        self.updates = 0
        """Updates begun so far (t of the next one)."""
        self.alpha = config.alpha_at(0)
        """α of the update in progress."""
        self.reach = OpponentReach(config.max_weight) if config.opponent_reach else None
        """The ``opponent_reach`` weights, or ``None``."""
        self._kl_sum = 0.0
        self._kl_count = 0
        self._scale_sum = 0.0
        self._weight_max = math.nan

    def begin_update(self, learner: Any) -> None:
        """Refreshes a moving magnet every ``magnet_every`` updates (moves an ``"ema"`` one ``magnet_rate`` of the
        way to the policy at every update t > 0) and sets α_t (and η_t) of update t."""
        t = self.updates
        if self.magnet is not None and t > 0:
            if self.config.magnet == "ema":
                self.magnet.move_weights_towards(learner.joint_policy, self.config.magnet_rate)
            elif t % self.config.magnet_every == 0:
                self.magnet.copy_weights_from(learner.joint_policy)
        self.alpha = self.config.alpha_at(t)
        if self.config.anneal_step_size:
            learner.set_learning_rate_scale(self.config.factor(t))
        self.updates = t + 1

    def magnet_policy(self, agent: int | str) -> AgentPolicy:
        """A frozen copy of ``agent``'s magnet ρ, a policy of its own: with an ``"ema"`` magnet the exponential
        moving average of the policy's parameters, which smooths the iterates' noise and is often less exploitable
        than the last iterate; with a ``"moving"`` one the policy of its last refresh.

        Raises:
            ValueError: for a ``"uniform"`` magnet, which has no network.
        """
        if self.magnet is None:
            raise ValueError(
                "a uniform magnet has no network (it is the uniform policy over the legal actions); "
                "use magnet='ema' or 'moving'"
            )
        network, slot = self.magnet.network_of(agent)
        return AgentPolicy(network, slot)

    def row_weights(self, rollout: JointRollout, carried: int) -> torch.Tensor | None:
        """The ``opponent_reach`` weights of the update's rows (:class:`OpponentReach`), or ``None`` without them.

        Args:
            rollout: the extended rollout of the update.
            carried: its rows carried in.

        Returns:
            ``[T', E, N]``, or ``None``.
        """
        if self.reach is None:
            return None
        weights = self.reach(rollout, carried)
        trained = rollout.trainable.to(weights.device)
        self._weight_max = float(weights[trained].max()) if bool(trained.any()) else math.nan
        return weights

    def __call__(self, batch: RegularizerBatch) -> torch.Tensor:
        """α_t · Σ_seats s_i · (mean over the seat's rows of KL(π ‖ ρ)), with s_i = 1 (``alpha_units="payoff"``)
        or the standard deviation of seat i's advantages on its rows of the minibatch (``"advantage_std"``); each
        row's KL carries its weight where the batch has row weights (``opponent_reach``)."""
        policy = batch.policy
        magnet_outputs = None
        if self.magnet is not None:
            with torch.no_grad():
                magnet_outputs = self.magnet.forward(list(batch.obs), batch.alive)
        columns = []
        for k, (network, out) in enumerate(zip(policy.networks, batch.outputs)):
            ref = None if magnet_outputs is None else magnet_outputs[k].head
            columns.append(magnet_kl(out.head, ref, policy.network_masks(k, batch.masks), network.action.nvec))
        rows = policy.agent_columns(columns)  # [B, N]
        kl = masked_mean(rows if batch.weights is None else rows * batch.weights, batch.valid)  # [N]
        scale = None
        if self.config.alpha_units == "advantage_std":  # over the whole minibatch, also on data-parallel ranks
            whole = batch.minibatch_advantages is not None and batch.minibatch_valid is not None
            scale = advantage_scale(
                batch.minibatch_advantages if whole else batch.advantages,
                batch.minibatch_valid if whole else batch.valid,
            )
        total = kl.detach().sum()  # on data-parallel ranks this rank's share: summed over the ranks
        self._kl_sum += float(total if batch.sum_over_ranks is None else batch.sum_over_ranks(total))
        self._scale_sum += 1.0 if scale is None else float(scale.mean())
        self._kl_count += 1
        return self.alpha * (kl.sum() if scale is None else (scale * kl).sum())

    def metrics(self) -> dict[str, float]:
        """``mmd/alpha``, ``mmd/kl`` (the KL summed over the seats, row-weighted with ``opponent_reach``) and
        ``mmd/scale`` (the units of α: 1, or the seats' mean advantage standard deviation), means over the
        minibatches since the last call; the means restart after each call. With ``opponent_reach`` also
        ``mmd/weight_max``, the largest scaled row weight of the last update."""
        count = self._kl_count
        kl = self._kl_sum / count if count else math.nan
        scale = self._scale_sum / count if count else math.nan
        self._kl_sum, self._scale_sum, self._kl_count = 0.0, 0.0, 0
        out = {"mmd/alpha": self.alpha, "mmd/kl": kl, "mmd/scale": scale}
        if self.reach is not None:
            out["mmd/weight_max"] = self._weight_max
        return out

    def state_dict(self) -> dict[str, Any]:
        """The update count, the magnet's weights and the ``opponent_reach`` carry (for checkpoints)."""
        state = {"updates": self.updates, "magnet": None if self.magnet is None else self.magnet.weights()}
        if self.reach is not None:
            state["reach"] = self.reach.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`."""
        self.updates = int(state["updates"])
        self.alpha = self.config.alpha_at(max(self.updates - 1, 0))
        if self.magnet is not None and state.get("magnet") is not None:
            self.magnet.load_weights(state["magnet"])
        if self.reach is not None and state.get("reach") is not None:
            self.reach.load_state_dict(state["reach"])


def advantage_scale(advantages: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Each seat's standard deviation of its advantages over its valid rows, detached (a seat with fewer than two
    rows, or advantages all equal, gets the smallest positive normal float instead of 0).

    Args:
        advantages: ``[B, N]``.
        valid: ``[B, N]`` bool.

    Returns:
        ``[N]``.

    Example:
        >>> import torch
        >>> advantage_scale(torch.tensor([[1.0, 2.0], [3.0, 2.0]]), torch.ones(2, 2, dtype=torch.bool))
        tensor([1.4142e+00, 1.1755e-38])
    """
    weights = valid.to(advantages.dtype)
    count = weights.sum(0)
    mean = (advantages * weights).sum(0) / count.clamp_min(1.0)
    variance = ((advantages - mean).square() * weights).sum(0) / (count - 1.0).clamp_min(1.0)
    tiny = torch.finfo(advantages.dtype).tiny
    return variance.detach().sqrt().clamp_min(tiny)


def mmd_regularizer(config: MmdConfig) -> Callable[[JointPolicy, Any], MmdRegularizer]:
    """The ``regularizer`` argument that makes a joint trainer's updates MMD updates: it builds
    :class:`MmdRegularizer` from the trainer's joint policy and resolved config (a
    :data:`~marljoint.ppo.regularizer.RegularizerFactory`).

    Example:
        >>> from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
        >>> from marljoint_envs import kuhn_poker_v0
        >>> env = PettingZooJointEnv(kuhn_poker_v0.raw_env, num_envs=2, seed=0)
        >>> config = JointTrainerConfig(num_envs=2, rollout_steps=8, minibatch_size=8)
        >>> trainer = JointMultiAgentTrainer.from_env(env, config, regularizer=mmd_regularizer(MmdConfig()))
        >>> type(trainer.regularizer).__name__
        'MmdRegularizer'

    Args:
        config: the MMD settings.

    Returns:
        ``build(policy, trainer_config)``, which raises ``ValueError`` when the env does not have exactly two
        agents, an agent's actions are not categorical, the networks are recurrent, ``anneal_lr`` would fight the
        MMD step-size schedule, or ``opponent_reach`` meets ``uniform_mix``.
    """

    def build(policy: JointPolicy, trainer_config: Any) -> MmdRegularizer:
        _check_trainer(policy.spec, trainer_config, config)
        return MmdRegularizer(policy, config)

    return build


def _check_trainer(spec: Any, trainer_config: Any, config: MmdConfig) -> None:
    """Refuses (``ValueError``) a trainer the MMD term cannot regularise (see :func:`mmd_regularizer`)."""
    if spec.num_agents != 2:
        raise ValueError(
            f"self_play='mmd' is for two-player zero-sum games; this env has {spec.num_agents} agents "
            f"{list(spec.agents)}; use self_play='ppo' (or leave it unset)"
        )
    kinds = {group.action.kind for group in spec.groups}
    if "box" in kinds:
        raise ValueError(
            "self_play='mmd' needs categorical (Discrete or MultiDiscrete) actions; this env has Box actions"
        )
    if trainer_config.recurrent is not None:
        raise ValueError(f"self_play='mmd' needs feed-forward networks, got recurrent={trainer_config.recurrent!r}")
    if trainer_config.anneal_lr and config.anneal_step_size:
        raise ValueError(
            "anneal_lr=True and mmd anneal_step_size=True would both set the learning rate; set anneal_lr=False "
            "(the MMD schedule anneals it) or mmd anneal_step_size=false"
        )
    if config.opponent_reach and trainer_config.ppo.uniform_mix:
        raise ValueError(
            f"mmd opponent_reach = true computes each seat's own reach from the rollout's log-probs, which "
            f"uniform_mix = {trainer_config.ppo.uniform_mix} makes those of the behaviour policy, not the seat's; set "
            "one of them off"
        )
