import pytest
import torch
import torch.nn.functional as F
from torch import nn

from marljoint.policies import StackedCNN, StackedConv2d, StackedLinear, StackedMLP


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def linear_copy(layer: StackedLinear, member: int) -> nn.Linear:
    copy = nn.Linear(layer.in_features, layer.out_features)
    with torch.no_grad():
        copy.weight.copy_(layer.weight[member].T)
        copy.bias.copy_(layer.bias[member])
    return copy


def test_stacked_linear_equals_separate_linears():
    layer = StackedLinear(3, 6, 4, gain=1.3, generator=generator(0))
    with torch.no_grad():
        layer.bias.normal_(generator=generator(1))
    x = torch.randn(10, 3, 6, generator=generator(2))
    out = layer(x)
    assert out.shape == (10, 3, 4)
    for m in range(3):
        torch.testing.assert_close(out[:, m], linear_copy(layer, m)(x[:, m]))


def test_stacked_linear_gradients_equal_separate_linears():
    layer = StackedLinear(2, 5, 3, generator=generator(3))
    copies = [linear_copy(layer, m) for m in range(2)]
    x = torch.randn(7, 2, 5, generator=generator(4))
    layer(x).square().sum().backward()
    sum(copies[m](x[:, m]).square().sum() for m in range(2)).backward()
    for m in range(2):
        torch.testing.assert_close(layer.weight.grad[m].T, copies[m].weight.grad)
        torch.testing.assert_close(layer.bias.grad[m], copies[m].bias.grad)


@pytest.mark.parametrize("in_features, out_features", [(8, 8), (8, 3), (3, 8)])
def test_orthogonal_init_per_member_with_gain_and_zero_bias(in_features, out_features):
    gain = 0.5
    layer = StackedLinear(4, in_features, out_features, gain, generator=generator(5))
    assert torch.equal(layer.bias, torch.zeros(4, out_features))
    small = min(in_features, out_features)
    for m in range(4):
        w = layer.weight[m].detach()
        gram = w.T @ w if in_features >= out_features else w @ w.T
        torch.testing.assert_close(gram, gain**2 * torch.eye(small), atol=1e-5, rtol=0)
    assert not torch.allclose(layer.weight[0], layer.weight[1])


def test_init_is_reproducible_from_the_generator():
    a = StackedMLP(3, 5, (8, 8), generator=generator(7))
    b = StackedMLP(3, 5, (8, 8), generator=generator(7))
    c = StackedMLP(3, 5, (8, 8), generator=generator(8))
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    assert not torch.equal(a.layers[0].weight, c.layers[0].weight)


def test_stacked_mlp_equals_separate_mlps():
    mlp = StackedMLP(3, 5, (8, 4), generator=generator(9))
    x = torch.randn(6, 3, 5, generator=generator(10))
    out = mlp(x)
    assert out.shape == (6, 3, 4) and mlp.out_features == 4
    for m in range(3):
        h = x[:, m]
        for layer in mlp.layers:
            h = torch.tanh(linear_copy(layer, m)(h))
        torch.testing.assert_close(out[:, m], h)


def test_stacked_mlp_custom_activation():
    mlp = StackedMLP(1, 2, (3,), activation=torch.relu, generator=generator(11))
    assert (mlp(torch.randn(50, 1, 2, generator=generator(12))) >= 0).all()


def test_stacked_cnn_equals_separate_cnns_and_scales_uint8():
    members, shape = 2, (10, 9, 3)
    cnn = StackedCNN(members, shape, channels=(4, 5), kernel_sizes=(3, 3), strides=(2, 1), features=6,
                     generator=generator(13))  # fmt: skip
    with torch.no_grad():
        for p in cnn.parameters():
            if p.dim() == 2:
                p.normal_(generator=generator(14))
    images = torch.randint(0, 256, (4, members, *shape), generator=generator(15), dtype=torch.uint8)
    out = cnn(images)
    assert out.shape == (4, members, 6)
    for m in range(members):
        h = images[:, m].permute(0, 3, 1, 2).float() / 255.0
        for conv in cnn.convs:
            h = F.relu(F.conv2d(h, conv.weight[m], conv.bias[m], stride=conv.stride))
        h = F.relu(linear_copy(cnn.linear, m)(h.flatten(1)))
        torch.testing.assert_close(out[:, m], h)
    torch.testing.assert_close(cnn(images.float() / 255.0), out)


def test_stacked_conv_parameters_have_the_member_axis_first():
    conv = StackedConv2d(3, 2, 4, kernel_size=3, stride=1, generator=generator(16))
    assert conv.weight.shape == (3, 4, 2, 3, 3) and conv.bias.shape == (3, 4)
    assert conv(torch.zeros(1, 6, 5, 5)).shape == (1, 12, 3, 3)


def test_nature_cnn_defaults_on_84x84():
    cnn = StackedCNN(1, (84, 84, 4), generator=generator(17))
    assert cnn(torch.zeros(2, 1, 84, 84, 4, dtype=torch.uint8)).shape == (2, 1, 512)
    assert cnn.linear.in_features == 64 * 7 * 7


def test_layer_errors():
    with pytest.raises(ValueError, match=r"expected \[B, 3, 4\]"):
        StackedLinear(3, 4, 2)(torch.zeros(5, 2, 4))
    with pytest.raises(ValueError, match=r"expected \[B, 3, 4\]"):
        StackedMLP(3, 4, (2,))(torch.zeros(5, 3, 5))
    with pytest.raises(ValueError, match="members must be a positive int"):
        StackedLinear(0, 4, 2)
    with pytest.raises(ValueError, match="hidden_sizes must hold at least one size"):
        StackedMLP(1, 4, ())
    with pytest.raises(ValueError, match="too small for kernel sizes"):
        StackedCNN(1, (20, 20, 3))
    with pytest.raises(ValueError, match="the same length"):
        StackedCNN(1, (20, 20, 3), channels=(4,), kernel_sizes=(3, 3), strides=(1, 1))
    with pytest.raises(ValueError, match=r"channels-last image \(H, W, C\)"):
        StackedCNN(1, (20, 20))
    with pytest.raises(ValueError, match="channels last"):
        StackedCNN(1, (8, 8, 3), channels=(2,), kernel_sizes=(3,), strides=(1,))(torch.zeros(2, 1, 3, 8, 8))


def test_the_default_activation_is_tanh_to_float32_rounding_and_the_same_bits_in_any_batch_split():
    from marljoint.policies.layers import tanh

    x = torch.randn(1000, 3, 64, generator=generator(0)) * 3
    y = tanh(x)
    torch.testing.assert_close(y, torch.tanh(x), atol=2e-7, rtol=0)
    # Each element's result depends on that element alone: a slice of the batch, or a strided view, gives the
    # same bits (rollouts split over workers must reproduce one process's values exactly).
    for part in (x[7:8], x[3:500], x[:, 1], x.transpose(0, 1)):
        assert torch.equal(tanh(part), tanh(part.contiguous()))
    assert torch.equal(tanh(x[3:500]), y[3:500])
    assert torch.equal(tanh(x.transpose(0, 1)), y.transpose(0, 1))


def test_the_default_activation_has_tanh_derivative_and_other_dtypes_use_torch():
    from marljoint.policies.layers import tanh

    x64 = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(tanh, (x64,))
    x = torch.randn(50, 8, generator=generator(1), requires_grad=True)
    tanh(x).square().sum().backward()
    expected = torch.autograd.grad(torch.tanh(x).square().sum(), x)[0]
    torch.testing.assert_close(x.grad, expected)
    assert tanh(x).requires_grad and tanh(x.detach()).grad_fn is None
