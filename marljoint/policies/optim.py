"""Per-member optimisation of stacked parameters: Adam, gradient norms and clipping, one tensor op per parameter.

A stacked parameter holds M independent networks along its first axis (see :mod:`marljoint.policies.layers`).
These tools treat each member as if it had its own optimizer and its own ``clip_grad_norm_``, without a Python
loop over members.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence

import torch

__all__ = ["StackedAdam", "clip_member_grads_", "member_grad_norms"]

LearningRate = float | Sequence[float] | torch.Tensor


class StackedAdam(torch.optim.Optimizer):
    """Adam over stacked parameters, equivalent to M independent ``torch.optim.Adam`` instances.

    Each member has its own step count (a ``[M]`` tensor per parameter, used for its bias correction), its own
    moments (elementwise anyway) and optionally its own learning rate. :meth:`step` can leave members untouched:
    an inactive member's parameters, moments and step count do not change, so when it resumes it continues
    exactly like an Adam that skipped those steps (this is how frozen agents are handled).

    The arithmetic follows ``torch.optim.Adam``'s single-tensor CPU path operation for operation, so results
    match it bit for bit when the learning rate is given as a Python float (or float64 values).

    Args:
        params: parameters (or parameter groups) whose first dimension is the member axis of size ``members``.
        lr: learning rate: a float for all members, or ``M`` values (one per member).
        betas: coefficients of the running averages of the gradient and its square.
        eps: term added to the denominator for numerical stability.
        members: number of members M.

    Raises:
        ValueError: for a negative or wrongly sized learning rate, betas outside ``[0, 1)``, a negative ``eps``,
            or a parameter whose first dimension is not ``members``.

    Example:
        >>> import torch
        >>> from marljoint.policies.layers import StackedLinear
        >>> layer = StackedLinear(3, 4, 2, generator=torch.Generator().manual_seed(0))
        >>> optimizer = StackedAdam(layer.parameters(), lr=1e-3, members=3)
        >>> layer(torch.ones(5, 3, 4)).sum().backward()
        >>> optimizer.step(active=torch.tensor([True, False, True]))  # member 1 stays frozen
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: LearningRate = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        *,
        members: int,
    ) -> None:
        if isinstance(members, bool) or not isinstance(members, int) or members < 1:
            raise ValueError(f"members must be a positive int, got {members!r}")
        self.members = members
        for name, beta in zip(("betas[0]", "betas[1]"), betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {beta}")
        if eps < 0.0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        super().__init__(params, {"lr": self._check_lr(lr), "betas": tuple(betas), "eps": eps})

    def add_param_group(self, param_group: dict) -> None:
        """Adds a parameter group after checking that every parameter has the member axis first.

        Raises:
            ValueError: if a parameter's first dimension is not ``members``, or the group's ``lr`` is invalid.
        """
        params = param_group["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        for param in params:
            if param.dim() == 0 or param.shape[0] != self.members:
                raise ValueError(
                    f"parameter of shape {tuple(param.shape)} has no member axis of size {self.members} first; "
                    "StackedAdam takes stacked parameters (e.g. from StackedLinear) with members=M."
                )
        if "lr" in param_group:
            param_group["lr"] = self._check_lr(param_group["lr"])
        super().add_param_group(param_group)

    def set_lr(self, lr: LearningRate) -> None:
        """Sets the learning rate of every group: a float for all members or ``M`` per-member values.

        Raises:
            ValueError: if ``lr`` is negative or does not hold ``M`` values.
        """
        lr = self._check_lr(lr)
        for group in self.param_groups:
            group["lr"] = lr

    def load_state_dict(self, state_dict: dict) -> None:
        """Loads a state from :meth:`state_dict`, copying its tensors.

        ``torch.optim.Optimizer`` keeps the given tensors, so an in-memory state dict would alias the source
        optimizer's moments and step counts, and the in-place updates of one would leak into the other.

        Raises:
            ValueError: if the saved state was made for a different number of members.
        """
        for param_state in state_dict["state"].values():
            step = param_state.get("step")
            if step is not None and tuple(step.shape) != (self.members,):
                raise ValueError(
                    f"the saved state has step counts of shape {tuple(step.shape)}, but this optimizer has "
                    f"{self.members} members; load it into a StackedAdam with members={step.shape[0]}."
                )
        super().load_state_dict(copy.deepcopy(state_dict))

    @torch.no_grad()
    def step(self, active: torch.Tensor | None = None) -> None:  # type: ignore[override]
        """Performs one Adam step for the active members.

        Parameters without a gradient are skipped, as in ``torch.optim.Adam``.

        Args:
            active: ``[M]`` bool, the members to update; ``None`` updates all of them.

        Raises:
            ValueError: if ``active`` is not a ``[M]`` bool tensor.
        """
        index = self._active_index(active)
        if index is not None and index.numel() == 0:
            return
        index_list = None if index is None else index.tolist()
        for group in self.param_groups:
            lrs = self._member_lrs(group["lr"])
            if index_list is not None:
                lrs = [lrs[m] for m in index_list]
            beta1, beta2 = group["betas"]
            if index is None and self._step_together(group, lrs):
                continue
            for param in group["params"]:
                if param.grad is None:
                    continue
                if param.grad.is_sparse:
                    raise ValueError(
                        "StackedAdam does not support sparse gradients; use dense parameters "
                        "(e.g. nn.Embedding(sparse=False))."
                    )
                state = self.state[param]
                if not state:
                    state["step"] = torch.zeros(self.members, dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                if index is None:
                    state["step"] += 1
                    _adam_update(
                        param, param.grad, state["exp_avg"], state["exp_avg_sq"], state["step"].tolist(),
                        lrs, beta1, beta2, group["eps"],
                    )  # fmt: skip
                    continue
                # Updating gathered copies and writing them back leaves inactive members' memory untouched.
                on_param = index.to(param.device)
                steps = state["step"].index_select(0, index).add_(1)
                values, exp_avg, exp_avg_sq = (
                    t.index_select(0, on_param) for t in (param, state["exp_avg"], state["exp_avg_sq"])
                )
                grad = param.grad.index_select(0, on_param)
                _adam_update(values, grad, exp_avg, exp_avg_sq, steps.tolist(), lrs, beta1, beta2, group["eps"])
                state["step"].index_copy_(0, index, steps)
                param.index_copy_(0, on_param, values)
                state["exp_avg"].index_copy_(0, on_param, exp_avg)
                state["exp_avg_sq"].index_copy_(0, on_param, exp_avg_sq)

    def _step_together(self, group: dict, lrs: list[float]) -> bool:
        """Steps the whole group with multi-tensor kernels when every member shares one step count and lr.

        That is the usual case (all members active, one learning rate), and one fused pass over all parameters
        costs a fraction of a per-parameter loop. Returns False, changing nothing, when the case does not apply.
        """
        params = [p for p in group["params"] if p.grad is not None]
        if not params or any(p.grad.is_sparse for p in params) or len(set(lrs)) != 1:
            return False
        states = [self.state[p] for p in params]
        if any(not state for state in states):
            return False
        step = states[0]["step"]
        if bool((step != step[0]).any()) or any(not torch.equal(state["step"], step) for state in states[1:]):
            return False
        for state in states:
            state["step"] += 1
        count = float(step[0])
        beta1, beta2 = group["betas"]
        grads = [p.grad for p in params]
        exp_avgs = [state["exp_avg"] for state in states]
        exp_avg_sqs = [state["exp_avg_sq"] for state in states]
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
        step_size = lrs[0] / (1 - beta1**count)
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denom, (1 - beta2**count) ** 0.5)
        torch._foreach_add_(denom, group["eps"])
        torch._foreach_addcdiv_(params, exp_avgs, denom, -step_size)
        return True

    def _active_index(self, active: torch.Tensor | None) -> torch.Tensor | None:
        """Indices of the active members, or ``None`` when all are active."""
        if active is None:
            return None
        if not isinstance(active, torch.Tensor) or active.dtype != torch.bool or active.shape != (self.members,):
            shape = tuple(active.shape) if isinstance(active, torch.Tensor) else type(active).__name__
            raise ValueError(
                f"active must be a bool tensor of shape ({self.members},) (one flag per member), got {shape}"
            )
        if bool(active.all()):
            return None
        # Step counts live on the CPU; each parameter gets its own copy of the index on its device.
        return active.nonzero().squeeze(1).cpu()

    def _check_lr(self, lr: LearningRate) -> float | torch.Tensor:
        if isinstance(lr, (int, float)) and not isinstance(lr, bool):
            if lr < 0.0:
                raise ValueError(f"lr must be >= 0, got {lr}")
            return float(lr)
        values = torch.as_tensor(lr, dtype=torch.float64).detach().cpu()
        if values.shape != (self.members,):
            raise ValueError(
                f"lr must be a float or hold one value per member (shape ({self.members},)), "
                f"got shape {tuple(values.shape)}"
            )
        if bool((values < 0).any()):
            raise ValueError(f"lr must be >= 0 for every member, got {values.tolist()}")
        return values

    def _member_lrs(self, lr: float | torch.Tensor) -> list[float]:
        # param_groups may be edited directly (e.g. lr *= scale), so a 0-d tensor or a float must work here too.
        values = lr.tolist() if isinstance(lr, torch.Tensor) else float(lr)
        if not isinstance(values, list):
            return [values] * self.members
        if len(values) != self.members:
            raise ValueError(
                f"lr holds {len(values)} values but the optimizer has {self.members} members; "
                "use StackedAdam.set_lr with a float or one value per member."
            )
        return values


def _adam_update(
    param: torch.Tensor,
    grad: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    steps: list[float],
    lrs: list[float],
    beta1: float,
    beta2: float,
    eps: float,
) -> None:
    """In-place Adam update of ``len(steps)`` stacked members (the first axis of every tensor).

    Bias corrections are computed in Python doubles, like ``torch.optim.Adam``, and only then rounded to the
    parameter dtype, so each member's arithmetic is exactly Adam's.
    """
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    shape = (len(steps),) + (1,) * (param.dim() - 1)
    bias_correction2_sqrt = [(1 - beta2**step) ** 0.5 for step in steps]
    neg_step_size = [-(lr / (1 - beta1**step)) for lr, step in zip(lrs, steps)]
    as_tensor = {"dtype": param.dtype, "device": param.device}
    denom = (exp_avg_sq.sqrt() / torch.tensor(bias_correction2_sqrt, **as_tensor).view(shape)).add_(eps)
    # (value * exp_avg) / denom, added to param: the operation order of Tensor.addcdiv_, hence the same rounding.
    param.add_(exp_avg.mul(torch.tensor(neg_step_size, **as_tensor).view(shape)).div_(denom))


def member_grad_norms(params: Iterable[torch.Tensor]) -> torch.Tensor:
    """Global L2 norm of each member's gradient over all the given stacked parameters.

    Member m's norm is what ``torch.nn.utils.get_total_norm`` would give over ``[p.grad[m] for p in params]``.
    Parameters without a gradient contribute nothing.

    Args:
        params: stacked parameters, all with the same member axis size M first.

    Returns:
        ``[M]`` norms.

    Raises:
        ValueError: if ``params`` is empty or the parameters disagree on M.
    """
    params = list(params)
    if not params:
        raise ValueError("params is empty; pass the stacked parameters whose gradient norms to measure")
    members = params[0].shape[0] if params[0].dim() > 0 else 0
    for param in params:
        if param.dim() == 0 or param.shape[0] != members:
            raise ValueError(
                f"parameter of shape {tuple(param.shape)} does not have the member axis of size {members} first; "
                "pass parameters of one stacked network (the same M)."
            )
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(members, dtype=params[0].dtype, device=params[0].device)
    per_param = torch.stack([torch.linalg.vector_norm(g.reshape(members, -1), dim=1) for g in grads])
    return torch.linalg.vector_norm(per_param, dim=0)


def clip_member_grads_(params: Iterable[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Clips each member's gradient to a global L2 norm of at most ``max_norm``, in place.

    Member m's gradients are multiplied by ``min(1, max_norm / (norm_m + 1e-6))``, as ``clip_grad_norm_`` does
    for one network: the direction is kept, and a member below the cap is left unchanged.

    Args:
        params: stacked parameters, all with the same member axis size M first.
        max_norm: the cap, > 0.

    Returns:
        ``[M]`` norms before clipping.

    Raises:
        ValueError: if ``max_norm`` is not positive, or as :func:`member_grad_norms`.
    """
    if not max_norm > 0:
        raise ValueError(f"max_norm must be > 0, got {max_norm}")
    params = list(params)
    norms = member_grad_norms(params)
    scale = (max_norm / (norms + 1e-6)).clamp_(max=1.0)
    for param in params:
        if param.grad is not None:
            param.grad.mul_(scale.view((-1,) + (1,) * (param.dim() - 1)))
    return norms
