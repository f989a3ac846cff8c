"""Layers holding M independent networks ("members") as stacked weights, evaluated in one batched call.

Every parameter has the member axis first (linear weights ``[M, in, out]``, biases ``[M, out]``, convolution
kernels ``[M, out, in, k, k]``), so one member's slice is one ordinary network and per-member optimisation and
clipping work uniformly. Parameter sharing is the special case ``M = 1`` with the agents folded into the batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["StackedCNN", "StackedConv2d", "StackedLinear", "StackedMLP", "tanh"]

Activation = Callable[[torch.Tensor], torch.Tensor]


class _HostTanh(torch.autograd.Function):
    """``tanh`` of a CPU float32 tensor by numpy's kernel, with torch's ``tanh_backward`` as its derivative."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        y = _host_tanh(x.detach())
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (y,) = ctx.saved_tensors  # type: ignore[attr-defined]
        return torch.ops.aten.tanh_backward(grad, y)


def _host_tanh(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=x.dtype)
    np.tanh(x.numpy(), out=out.numpy())
    return out


def tanh(x: torch.Tensor) -> torch.Tensor:
    """The networks' default activation: ``tanh``, on a CPU float32 tensor computed by numpy's vectorised kernel.

    Torch's CPU ``tanh`` runs several times slower per element than numpy's (2.0 ms against 0.29 ms on a
    ``[12288, 64]`` float32 tensor on one core, AVX-512, torch 2.13), and it was the largest single cost of an update
    of the default MLPs. numpy's result depends only on each element (not on the tensor's length, alignment or
    strides), so every batch split gives the same bits; it differs from torch's by at most one unit in the last
    place. The gradient is torch's own ``tanh_backward``. Other devices and dtypes use ``torch.tanh``.

    Args:
        x: any shape.

    Returns:
        ``tanh(x)``, the same shape, contiguous.

    Example:
        >>> import torch
        >>> x = torch.linspace(-3, 3, 7)
        >>> bool((tanh(x) - torch.tanh(x)).abs().max() < 1e-6)
        True
    """
    if x.device.type != "cpu" or x.dtype != torch.float32:
        return torch.tanh(x)
    if torch.is_grad_enabled() and x.requires_grad:
        return _HostTanh.apply(x)
    return _host_tanh(x)


def _check_positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _check_sizes(name: str, values: Sequence[int]) -> tuple[int, ...]:
    values = tuple(values)
    if not values:
        raise ValueError(f"{name} must hold at least one size, got {values!r}")
    for value in values:
        _check_positive(name, value)
    return values


class StackedLinear(nn.Module):
    """M independent linear layers evaluated as one batched matrix product.

    Member m computes ``x[:, m] @ weight[m] + bias[m]``. Weights are initialised orthogonally per member with
    ``gain`` (through the ``[out, in]`` view, as for an ``nn.Linear``) and biases are zero.

    ``torch.baddbmm`` on the member-major ``[M, B, in]`` view was the fastest CPU formulation measured for
    B = 24..4096 and 64 features (1.2-1.7x faster than einsum forward and backward), and the transposes around it
    are free views.

    Args:
        members: number of members M.
        in_features: input size.
        out_features: output size.
        gain: orthogonal initialisation gain.
        generator: source of the initial weights; ``None`` draws from torch's default generator.

    Example:
        >>> import torch
        >>> layer = StackedLinear(3, 4, 2, generator=torch.Generator().manual_seed(0))
        >>> layer(torch.zeros(5, 3, 4)).shape
        torch.Size([5, 3, 2])
    """

    def __init__(
        self,
        members: int,
        in_features: int,
        out_features: int,
        gain: float = 1.0,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.members = _check_positive("members", members)
        self.in_features = _check_positive("in_features", in_features)
        self.out_features = _check_positive("out_features", out_features)
        self.weight = nn.Parameter(torch.empty(members, in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(members, out_features))
        with torch.no_grad():
            for member in range(members):
                nn.init.orthogonal_(self.weight[member].T, gain=gain, generator=generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Applies each member to its slice of the input.

        Args:
            x: ``[B, M, in_features]``.

        Returns:
            ``[B, M, out_features]``.

        Raises:
            ValueError: if ``x`` does not have shape ``[B, M, in_features]``.
        """
        if x.dim() != 3 or x.shape[1] != self.members or x.shape[2] != self.in_features:
            raise ValueError(
                f"input of shape {tuple(x.shape)} does not fit {self.members} stacked members with "
                f"{self.in_features} inputs; expected [B, {self.members}, {self.in_features}]."
            )
        return self.forward_member_major(x.transpose(0, 1)).transpose(0, 1)

    def forward_member_major(self, x: torch.Tensor) -> torch.Tensor:
        """The same computation on member-major tensors, without shape checks: ``[M, B, in]`` → ``[M, B, out]``."""
        # Reading _parameters directly skips nn.Module.__getattr__ (~0.7 µs per lookup) on the rollout hot path.
        params = self._parameters
        if self.out_features == 1:
            # A width-1 product takes a BLAS path whose summation order depends on the batch size; a row-wise
            # multiply-and-sum gives every row the same bits whatever batch it is in (rollouts split over workers
            # must reproduce the single-process values exactly).
            weight = params["weight"].transpose(1, 2)  # [M, 1, in]
            return (x * weight).sum(-1, keepdim=True) + params["bias"].unsqueeze(1)
        return torch.baddbmm(params["bias"].unsqueeze(1), x, params["weight"])

    def extra_repr(self) -> str:
        return f"members={self.members}, in_features={self.in_features}, out_features={self.out_features}"


class StackedMLP(nn.Module):
    """M independent MLPs: stacked linear layers, each followed by the activation.

    Args:
        members: number of members M.
        in_features: input size.
        hidden_sizes: output size of each layer; the last one is :attr:`out_features`.
        activation: elementwise function applied after every layer (the output is activated too).
        gain: orthogonal initialisation gain of every layer.
        generator: source of the initial weights; ``None`` draws from torch's default generator.
    """

    def __init__(
        self,
        members: int,
        in_features: int,
        hidden_sizes: Sequence[int],
        activation: Activation = tanh,
        gain: float = math.sqrt(2.0),
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.members = _check_positive("members", members)
        self.in_features = _check_positive("in_features", in_features)
        sizes = _check_sizes("hidden_sizes", hidden_sizes)
        self.out_features = sizes[-1]
        self.activation = activation
        self.layers = nn.ModuleList(
            StackedLinear(members, n_in, n_out, gain, generator=generator)
            for n_in, n_out in zip((in_features, *sizes[:-1]), sizes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Applies each member's MLP to its slice of the input.

        Args:
            x: ``[B, M, in_features]``.

        Returns:
            ``[B, M, out_features]``.

        Raises:
            ValueError: if ``x`` does not have shape ``[B, M, in_features]``.
        """
        if x.dim() != 3 or x.shape[1] != self.members or x.shape[2] != self.in_features:
            raise ValueError(
                f"input of shape {tuple(x.shape)} does not fit {self.members} stacked MLPs with "
                f"{self.in_features} inputs; expected [B, {self.members}, {self.in_features}]."
            )
        return self.forward_member_major(x.transpose(0, 1)).transpose(0, 1)

    def forward_member_major(self, x: torch.Tensor) -> torch.Tensor:
        """The same computation on member-major tensors, without shape checks: ``[M, B, in]`` → ``[M, B, out]``."""
        for layer in self.layers:
            x = self.activation(layer.forward_member_major(x))
        return x


class StackedConv2d(nn.Module):
    """M independent 2-D convolutions evaluated as one grouped convolution (``groups = M``).

    Member m reads input channels ``m * in_channels .. (m + 1) * in_channels - 1`` and writes the matching block
    of output channels. The kernel is stored as ``[M, out, in, k, k]`` so that its first axis is the member.

    Args:
        members: number of members M.
        in_channels: input channels per member.
        out_channels: output channels per member.
        kernel_size: square kernel size.
        stride: stride.
        gain: orthogonal initialisation gain.
        generator: source of the initial weights; ``None`` draws from torch's default generator.
    """

    def __init__(
        self,
        members: int,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        gain: float = math.sqrt(2.0),
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.members = _check_positive("members", members)
        self.in_channels = _check_positive("in_channels", in_channels)
        self.out_channels = _check_positive("out_channels", out_channels)
        self.kernel_size = _check_positive("kernel_size", kernel_size)
        self.stride = _check_positive("stride", stride)
        self.weight = nn.Parameter(torch.empty(members, out_channels, in_channels, kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.zeros(members, out_channels))
        with torch.no_grad():
            for member in range(members):
                nn.init.orthogonal_(self.weight[member], gain=gain, generator=generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Convolves each member's channel block.

        Args:
            x: ``[B, M * in_channels, H, W]``.

        Returns:
            ``[B, M * out_channels, H', W']``.
        """
        return F.conv2d(x, self.weight.flatten(0, 1), self.bias.flatten(), stride=self.stride, groups=self.members)

    def output_size(self, size: int) -> int:
        """Spatial output size for an input of ``size`` pixels (no padding)."""
        return (size - self.kernel_size) // self.stride + 1

    def extra_repr(self) -> str:
        return (
            f"members={self.members}, in_channels={self.in_channels}, out_channels={self.out_channels}, "
            f"kernel_size={self.kernel_size}, stride={self.stride}"
        )


class StackedCNN(nn.Module):
    """M independent Nature-style CNN encoders for channels-last images, followed by a stacked linear layer.

    The defaults are the DQN "Nature" network (32-64-64 channels, kernels 8-4-3, strides 4-2-1, 512 features,
    ReLU); smaller images need smaller kernels. ``uint8`` images are scaled to ``[0, 1]``; floating-point images
    are used as they are.

    Args:
        members: number of members M.
        obs_shape: ``(H, W, C)`` of one image.
        channels: output channels of each convolution.
        kernel_sizes: kernel size of each convolution.
        strides: stride of each convolution.
        features: output size (after the final stacked linear layer and ReLU).
        gain: orthogonal initialisation gain.
        generator: source of the initial weights; ``None`` draws from torch's default generator.

    Raises:
        ValueError: if the image is too small for the kernels, or the per-layer sequences differ in length.
    """

    def __init__(
        self,
        members: int,
        obs_shape: Sequence[int],
        channels: Sequence[int] = (32, 64, 64),
        kernel_sizes: Sequence[int] = (8, 4, 3),
        strides: Sequence[int] = (4, 2, 1),
        features: int = 512,
        gain: float = math.sqrt(2.0),
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.members = _check_positive("members", members)
        obs_shape = tuple(int(s) for s in obs_shape)
        if len(obs_shape) != 3 or min(obs_shape) < 1:
            raise ValueError(f"obs_shape must be a channels-last image (H, W, C), got {obs_shape}")
        channels = _check_sizes("channels", channels)
        kernel_sizes = _check_sizes("kernel_sizes", kernel_sizes)
        strides = _check_sizes("strides", strides)
        if not len(channels) == len(kernel_sizes) == len(strides):
            raise ValueError(
                f"channels {channels}, kernel_sizes {kernel_sizes} and strides {strides} must have one entry per "
                "convolution each (the same length)."
            )
        self.obs_shape = obs_shape
        self.out_features = _check_positive("features", features)
        height, width, in_channels = obs_shape
        convs = []
        for out_channels, kernel, stride in zip(channels, kernel_sizes, strides):
            conv = StackedConv2d(members, in_channels, out_channels, kernel, stride, gain, generator=generator)
            height, width = conv.output_size(height), conv.output_size(width)
            if height < 1 or width < 1:
                raise ValueError(
                    f"image of shape {obs_shape} is too small for kernel sizes {kernel_sizes} and strides {strides}; "
                    "resize it (e.g. supersuit.resize_v1) or pass smaller cnn_kernel_sizes / cnn_strides."
                )
            convs.append(conv)
            in_channels = out_channels
        self.convs = nn.ModuleList(convs)
        self.linear = StackedLinear(members, in_channels * height * width, features, gain, generator=generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Encodes each member's image.

        Args:
            x: ``[B, M, H, W, C]`` images, ``uint8`` in ``[0, 255]`` or floating point.

        Returns:
            ``[B, M, features]``.

        Raises:
            ValueError: if ``x`` does not have shape ``[B, M, H, W, C]``.
        """
        if x.dim() != 5 or x.shape[1] != self.members or tuple(x.shape[2:]) != self.obs_shape:
            raise ValueError(
                f"images of shape {tuple(x.shape)} do not fit {self.members} stacked CNNs; expected "
                f"[B, {self.members}, {', '.join(map(str, self.obs_shape))}] (channels last)."
            )
        dtype = self.linear.weight.dtype
        images = x.to(dtype).div_(255.0) if x.dtype == torch.uint8 else x.to(dtype)
        batch = x.shape[0]
        height, width, channels = self.obs_shape
        # Member-major channel blocks are what the grouped convolution expects.
        h = images.permute(0, 1, 4, 2, 3).reshape(batch, self.members * channels, height, width)
        for conv in self.convs:
            h = F.relu(conv(h))
        return F.relu(self.linear(h.reshape(batch, self.members, -1)))
