"""The PPO update on data-parallel ranks: every rank computes its share of each minibatch's rows, and the gradients
summed over the ranks are the one-process gradient.

Every rank holds the whole rollout (:class:`~marljoint.collect.ranks.RankCollector`), so it computes GAE, the value
normaliser's update, the explained variance, the observation statistics and the minibatch permutation exactly as one
process does (global statistics with no communication). A decoupled update's proximal log-probs (policy lag 1,
``uniform_mix``) are computed in shares of the same chunks and gathered once per update. Then, per minibatch of
``m`` units (rows, or sequence chunks of a recurrent policy):

- rank r takes units ``row_shares(m, K)[r]`` (contiguous, rank order; :func:`~marljoint.distributed.ranks.row_shares`);
- advantage normalisation uses the whole minibatch's statistics (computed from the rows every rank holds);
- every per-agent mean of the loss (surrogate, value loss, entropy, a regulariser's KL, the diagnostics) is taken over
  the rank's rows and multiplied by ``c_r / c``, the agent's valid rows on the rank over those of the minibatch, so
  the per-rank terms SUM over the ranks to the one-process term (masked rows counted globally);
- a cross-agent auxiliary loss (the redundancy penalty) sees every row's features in one-process order, gathered
  with a differentiable all-gather (:meth:`~marljoint.distributed.ranks.RankGroup.gather_rows`): every rank computes
  the same loss and keeps the gradient of its own rows, so it enters the summed gradient once;
- one backward; every parameter's gradient and the minibatch's loss terms are summed over the ranks in ONE
  all-reduce (one flat buffer); then the one-process per-network clipping, divergence check and optimizer steps run
  on identical numbers on every rank, so the parameters stay bitwise identical across ranks;
- with ``target_kl``, the approximate KL is summed over the ranks before the early-stop decision, so every rank
  stops at the same minibatch.

The result equals one process's update up to float rounding (sums taken in another order); the metrics are the
one-process metrics (a regulariser sums its own over the ranks: :attr:`RegularizerBatch.sum_over_ranks
<marljoint.ppo.regularizer.RegularizerBatch.sum_over_ranks>`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from marljoint.auxiliary import AuxOutput
from marljoint.distributed.ranks import RankGroup, row_shares
from marljoint.ppo.learner import _Batch, _MinibatchLoss
from marljoint.ppo.losses import PolicyLossTerms, masked_mean, normalize_advantages, policy_loss, value_loss
from marljoint.ppo.regularizer import RegularizerBatch

__all__ = ["RankShares"]


class RankShares:
    """How one rank takes part in each minibatch of the learner's update (see the module docstring).

    Args:
        ranks: the run's process group.
    """

    def __init__(self, ranks: RankGroup) -> None:
        self.ranks = ranks
        self._sum: _StepSum | None = None

    def minibatch_loss(
        self,
        learner: Any,
        batch: _Batch,
        picked: torch.Tensor,
        call_aux: Callable[..., AuxOutput] | None,
    ) -> _MinibatchLoss:
        """This rank's share of the joint loss of the minibatch ``picked`` (units of ``batch``): its terms sum over
        the ranks to the one-process terms; the aux loss is the whole minibatch's (the same on every rank)."""
        cfg = learner.config.ppo
        policy = learner.joint_policy
        rows = _Rows(batch, picked, self.ranks)
        idx, outputs = learner._replay(batch, rows.mine)
        mb_valid, mb_alive = rows.valid_of(idx), batch.alive[idx]
        log_prob, entropy, features = policy.evaluate(
            outputs, [a[idx] for a in batch.actions], [None if m is None else m[idx] for m in batch.masks]
        )
        mb_adv = rows.advantages(cfg.normalize_advantages, idx=idx)
        count = rows.counts.clamp_min(1.0)  # [N]: every mean is over the whole minibatch's valid rows
        mb_weights = None if batch.row_weights is None else batch.row_weights[idx]
        if batch.proximal is None:
            pg = policy_loss(log_prob, batch.log_probs[idx], mb_adv, cfg.clip_range, mb_valid, mb_weights, count)
        else:  # policy lag 1 or a behaviour policy: decoupled PPO, as in one process
            proximal = batch.proximal[idx]
            weights = (proximal - batch.log_probs[idx]).exp()
            if mb_weights is not None:
                weights = weights * mb_weights
            pg = policy_loss(log_prob, proximal, mb_adv, cfg.clip_range, mb_valid, weights, count)
        if cfg.target_kl is not None:  # the early stop is decided on the whole minibatch's KL, on every rank alike
            kl = pg.approx_kl.clone()
            self.ranks.all_reduce_sum_([kl])
            pg = PolicyLossTerms(pg.loss, pg.clip_fraction, kl)
        new_values = policy.agent_columns(o.values for o in outputs)
        vl = value_loss(new_values, batch.values[idx], batch.returns[idx], cfg.clip_range_vf, mb_valid, count)
        ent = masked_mean(entropy, mb_valid, count)
        joint = (pg.loss + cfg.vf_coef * vl - cfg.ent_coef * ent).sum()
        if learner.regularizer is not None:
            masks = [None if m is None else m[idx] for m in batch.masks]
            share = mb_valid.sum(0).to(count.dtype) / count  # [N]: c_r / c, carried by the regulariser's weights
            shared = share.expand_as(mb_valid) if mb_weights is None else mb_weights * share
            joint = joint + learner.regularizer(
                RegularizerBatch(
                    policy,
                    outputs,
                    [o[idx] for o in batch.obs],
                    mb_alive,
                    masks,
                    mb_valid,
                    mb_adv,
                    shared,
                    rows.advantages(cfg.normalize_advantages, whole=True),
                    rows.valid,
                    self._sum_over_ranks,
                )
            )
        aux = None
        if call_aux is not None:
            aux = call_aux(*rows.gather_features(features, mb_alive))
            joint = joint + aux.loss
        return _MinibatchLoss(joint, pg, vl, ent, aux)

    def _sum_over_ranks(self, x: torch.Tensor) -> torch.Tensor:
        total = x.detach().clone()
        self.ranks.all_reduce_sum_([total])
        return total

    @torch.no_grad()
    def proximal_log_probs(self, learner: Any, batch: _Batch) -> torch.Tensor:
        """``[R, N]`` the taken actions' log-probs under the weights the update starts from (a decoupled update's
        proximal policy): each rank evaluates its share of every chunk the one-process computation takes, and the
        shares are gathered once."""
        units, size = learner._minibatch_shape(batch)
        proximal = batch.log_probs.clone()
        mine, rows_of = [], [[] for _ in range(self.ranks.world_size)]
        for picked in torch.arange(units, device=learner.device).split(size):
            shares = row_shares(picked.shape[0], self.ranks.world_size)
            for rank, (start, stop) in enumerate(shares):
                rows_of[rank].append(_unit_rows(batch, picked[start:stop]))
            start, stop = shares[self.ranks.rank]
            if stop > start:
                idx, outputs = learner._replay(batch, picked[start:stop])
                actions = [a[idx] for a in batch.actions]
                log_prob, _, _ = learner.joint_policy.evaluate(
                    outputs, actions, [None if m is None else m[idx] for m in batch.masks]
                )
                mine.append(log_prob)
        local = torch.cat(mine) if mine else proximal[:0]
        sizes = [sum(rows.shape[0] for rows in parts) for parts in rows_of]
        gathered = self.ranks.gather_rows(local, sizes)
        proximal[torch.cat([rows for parts in rows_of for rows in parts])] = gathered
        return proximal

    def reduce_(self, loss: _MinibatchLoss, parameters: Sequence[torch.Tensor], kl_summed: bool) -> _MinibatchLoss:
        """After the backward: every parameter's gradient and the loss terms summed over the ranks, in one
        all-reduce of one preallocated buffer (:class:`_StepSum`); returns the minibatch's one-process loss terms
        (detached).

        Args:
            loss: this rank's share (:meth:`minibatch_loss`).
            parameters: every trained parameter, in the same order at every call. A parameter without a gradient on
                this rank sends zeros; one without a gradient on every rank keeps none (its optimizer skips it, as in
                one process).
            kl_summed: the approximate KL was already summed (``target_kl``).
        """
        aux = None if loss.aux is None else loss.aux.loss.detach()
        partial = loss.joint.detach() - aux if aux is not None else loss.joint.detach()
        n = loss.value.shape[0]
        terms = [loss.pg.loss, loss.value, loss.entropy, loss.pg.clip_fraction, partial.reshape(1)]
        if not kl_summed:
            terms.append(loss.pg.approx_kl)
        width = 4 * n + 1 + (0 if kl_summed else n)
        if self._sum is None or not self._sum.fits(parameters, width):
            self._sum = _StepSum(parameters, width)
        stats = self._sum.sum_(self.ranks, terms)
        pg_loss, value, entropy, clip_fraction, joint = stats[: 4 * n + 1].split([n, n, n, n, 1])
        approx_kl = loss.pg.approx_kl if kl_summed else stats[4 * n + 1 :]
        joint = joint.reshape(()) if aux is None else joint.reshape(()) + aux
        return _MinibatchLoss(joint, PolicyLossTerms(pg_loss, clip_fraction, approx_kl), value, entropy, loss.aux)


class _StepSum:
    """The one all-reduce of a minibatch step, in a buffer allocated once per learner: every parameter's gradient,
    a has-a-gradient flag per parameter, then the minibatch's loss terms. After the all-reduce the parameters'
    gradients are views of the buffer (nothing is copied back); the next backward makes new gradients.

    Args:
        parameters: every trained parameter, in the order of every later call.
        width: the loss terms' count.
    """

    def __init__(self, parameters: Sequence[torch.Tensor], width: int) -> None:
        self.parameters = list(parameters)
        sizes = [p.numel() for p in self.parameters]
        count, first = sum(sizes), self.parameters[0]
        self.flat = torch.zeros(count + len(sizes) + width, dtype=first.dtype, device=first.device)
        self.grads = self.flat[:count]
        self.present = self.flat[count : count + len(sizes)]
        self.stats = self.flat[count + len(sizes) :]
        self.views = [v.view_as(p) for v, p in zip(self.grads.split(sizes), self.parameters)]

    def fits(self, parameters: Sequence[torch.Tensor], width: int) -> bool:
        """Whether the buffer was laid out for these parameters and loss terms."""
        return (
            width == self.stats.numel()
            and len(parameters) == len(self.parameters)
            and all(p is q for p, q in zip(parameters, self.parameters))
        )

    def sum_(self, ranks: RankGroup, terms: Sequence[torch.Tensor]) -> torch.Tensor:
        """Sums the parameters' gradients and ``terms`` (flattened, concatenated) over the ranks; the gradients
        become the sums (``None`` where no rank had one); returns the summed terms (a copy)."""
        grads = [p.grad for p in self.parameters]
        if all(g is not None for g in grads):
            torch._foreach_copy_(self.views, grads)
            self.present.fill_(1.0)
        else:
            for view, grad in zip(self.views, grads):
                if grad is None:
                    view.zero_()
                else:
                    view.copy_(grad)
            self.present.copy_(torch.tensor([g is not None for g in grads], dtype=self.flat.dtype))
        torch.cat([t.detach().reshape(-1).to(self.flat.dtype) for t in terms], out=self.stats)
        ranks.all_reduce_sum_([self.flat])
        anywhere = self.present.tolist()
        for p, view, present in zip(self.parameters, self.views, anywhere):
            p.grad = view if present else None
        return self.stats.clone()  # the buffer is the next step's


class _Rows:
    """The rows of one minibatch as one rank sees them: its own units, the whole minibatch's row indices (in the
    order one process reads them), and where this rank's rows sit among them."""

    def __init__(self, batch: _Batch, picked: torch.Tensor, ranks: RankGroup) -> None:
        self.batch = batch
        self.ranks = ranks
        self.shares = row_shares(picked.shape[0], ranks.world_size)
        start, stop = self.shares[ranks.rank]
        self.empty = start == stop
        """This rank has no unit of the minibatch (fewer units than ranks): it replays the first unit with every row
        masked out, so that it still takes part in the collectives with gradients of zero."""
        self.mine = picked[:1] if self.empty else picked[start:stop]
        seq = batch.sequences
        self.length = 1 if seq is None else seq.length
        self.units = picked.shape[0]
        self.whole = _unit_rows(batch, picked)
        """The minibatch's rows in one-process order: ``[L, m]`` flattened (a chunk's rows in step order)."""
        grid = torch.arange(self.length * self.units, device=picked.device).reshape(self.length, self.units)
        self.positions = grid[:, start:stop].reshape(-1)
        """Where this rank's rows (in its replay's order) sit in :attr:`whole`."""
        self.valid = batch.valid[self.whole]
        self.counts = self.valid.sum(0).to(batch.advantages.dtype)
        """``[N]`` every agent's valid rows in the whole minibatch."""
        self._normalized: torch.Tensor | None = None

    def valid_of(self, idx: torch.Tensor) -> torch.Tensor:
        """``[b, N]`` the valid mask of this rank's replayed rows ``idx`` (all False for an :attr:`empty` share)."""
        valid = self.batch.valid[idx]
        return torch.zeros_like(valid) if self.empty else valid

    def advantages(self, normalize: bool, whole: bool = False, idx: torch.Tensor | None = None) -> torch.Tensor:
        """The advantages of this rank's replayed rows ``idx`` (``whole``: of the whole minibatch), standardised with
        the whole minibatch's statistics when ``normalize``."""
        if self._normalized is None:
            adv = self.batch.advantages[self.whole]
            self._normalized = normalize_advantages(adv, self.valid) if normalize else adv
        if whole:
            return self._normalized
        if self.empty and idx is not None:
            return torch.zeros_like(self.batch.advantages[idx])
        return self._normalized[self.positions]

    def gather_features(
        self, features: Sequence[torch.Tensor], alive: torch.Tensor
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Every agent's features and the alive mask on the whole minibatch's rows, in one-process order (one
        differentiable all-gather of this rank's rows)."""
        widths = [f.shape[1] for f in features]
        mine = torch.cat([*features, alive.to(features[0].dtype)], dim=1)
        if self.empty:
            mine = mine[:0]
        sizes = [self.length * (b - a) for a, b in self.shares]
        gathered = self.ranks.gather_rows(mine, sizes)
        # Rank r's rows are its [L, units_r] block flattened; one process reads [L, m] flattened.
        order = torch.cat(
            [
                torch.arange(offset, offset + size, device=mine.device).reshape(self.length, b - a)
                for offset, size, (a, b) in zip(_offsets(sizes), sizes, self.shares)
            ],
            dim=1,
        ).reshape(-1)
        whole = gathered.index_select(0, order)
        parts = list(whole.split([*widths, alive.shape[1]], dim=1))
        return parts[:-1], parts[-1] > 0.5


def _unit_rows(batch: _Batch, units: torch.Tensor) -> torch.Tensor:
    """The rows of ``units`` in the order the learner's replay gives them: the rows themselves (feed-forward), or
    the chunks' rows step by step, the chunks side by side (recurrent)."""
    seq = batch.sequences
    return units if seq is None else seq.rows[units].T.reshape(-1)


def _offsets(sizes: Sequence[int]) -> list[int]:
    out, total = [], 0
    for size in sizes:
        out.append(total)
        total += size
    return out
