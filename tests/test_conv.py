"""Convolutions and pooling on tpu vs PyTorch CPU (fallback disabled,
HIGHEST precision from conftest): forward and backward (grads of input,
weight, bias), 1d/2d/3d, transposed, groups, stride, dilation, padding
(incl. "same"), non-contiguous and empty-batch inputs, dtypes."""
import pytest
import torch
import torch.nn.functional as F

from conftest import DEV, assert_close

TOL = dict(rtol=1e-4, atol=1e-4)


def _grad_check(fn, inputs, tol=TOL, seed=0):
    """Run fn on CPU and tpu copies of `inputs` (leaf tensors requiring grad),
    backprop a random cotangent, compare outputs and every grad."""
    cpu = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    dev = [t.detach().to(DEV).requires_grad_(t.requires_grad) for t in inputs]
    y_cpu = fn(*cpu)
    y_dev = fn(*dev)
    assert y_dev.device.type == "tpu"
    assert_close(y_dev, y_cpu.detach(), **tol)
    g = torch.Generator().manual_seed(seed)
    cot = torch.randn(y_cpu.shape, generator=g, dtype=y_cpu.dtype)
    y_cpu.backward(cot)
    y_dev.backward(cot.to(DEV))
    for a, b in zip(dev, cpu):
        if b.requires_grad:
            assert a.grad is not None
            assert_close(a.grad, b.grad, **tol)


def _rand(*shape, dtype=torch.float32, grad=True, seed=[1]):
    seed[0] += 1
    g = torch.Generator().manual_seed(seed[0])
    return torch.randn(*shape, generator=g, dtype=dtype).requires_grad_(grad)


CONV2D = [
    # (N, C, H, W, O, k, stride, padding, dilation, groups, bias)
    (2, 3, 9, 8, 4, 3, 1, 1, 1, 1, True),
    (2, 4, 11, 10, 6, (3, 2), (2, 1), (1, 0), 1, 2, True),
    (3, 4, 12, 12, 8, 3, 2, 2, 2, 4, False),
    (1, 6, 7, 7, 6, 1, 1, 0, 1, 3, True),
    (2, 3, 33, 32, 5, 1, 1, 0, 1, 1, False),      # 1x1 direct GEMM path
    (2, 8, 16, 16, 8, 3, 1, 1, 1, 8, True),       # depthwise
    (2, 3, 20, 20, 4, 7, 2, 3, 1, 1, True),       # stem-like
    (1, 2, 6, 6, 3, 3, 3, 0, 1, 1, True),         # stride > kernel coverage
]


@pytest.mark.parametrize("cfg", CONV2D)
def test_conv2d_forward_backward(cfg):
    N, C, H, W, O, k, s, p, d, g, bias = cfg
    kk = (k, k) if isinstance(k, int) else k
    x = _rand(N, C, H, W)
    w = _rand(O, C // g, *kk)
    ins = [x, w] + ([_rand(O)] if bias else [])
    _grad_check(lambda x, w, *b: F.conv2d(x, w, b[0] if b else None, stride=s,
                                          padding=p, dilation=d, groups=g), ins)


@pytest.mark.parametrize("cfg", [
    (2, 3, 17, 4, 5, 2, 2, 2, 1),
    (3, 4, 9, 6, 3, 1, 1, 1, 2),
    (1, 2, 40, 3, 4, 3, 0, 1, 1),
])
def test_conv1d(cfg):
    N, C, L, O, k, s, p, d, g = cfg
    ins = [_rand(N, C, L), _rand(O, C // g, k), _rand(O)]
    _grad_check(lambda x, w, b: F.conv1d(x, w, b, stride=s, padding=p, dilation=d,
                                         groups=g), ins)


@pytest.mark.parametrize("cfg", [
    (2, 3, 5, 6, 4, 4, 3, 1, 1, 1),
    (1, 4, 6, 5, 5, 4, (3, 1, 2), (2, 1, 1), (1, 0, 1), 2),
])
def test_conv3d(cfg):
    N, C, D, H, W, O, k, s, p, g = cfg
    kk = (k, k, k) if isinstance(k, int) else k
    ins = [_rand(N, C, D, H, W), _rand(O, C // g, *kk), _rand(O)]
    _grad_check(lambda x, w, b: F.conv3d(x, w, b, stride=s, padding=p, groups=g), ins)


@pytest.mark.parametrize("cfg", [
    # (N, C, H, W, O, k, stride, padding, output_padding, dilation, groups)
    (2, 4, 5, 6, 3, 3, 2, 1, 1, 1, 1),
    (1, 6, 4, 4, 4, (3, 2), (3, 2), (1, 0), (2, 1), 1, 2),
    (2, 3, 7, 5, 2, 3, 1, 2, 0, 2, 1),
    (2, 2, 3, 3, 4, 4, 2, 0, 0, 1, 1),
    (2, 3, 5, 5, 2, 3, 1, 1, 1, 2, 1),            # output_padding >= stride (< dilation)
])
def test_conv_transpose2d(cfg):
    N, C, H, W, O, k, s, p, op, d, g = cfg
    kk = (k, k) if isinstance(k, int) else k
    ins = [_rand(N, C, H, W), _rand(C, O // g, *kk), _rand(O)]
    _grad_check(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=s, padding=p,
                                                   output_padding=op, groups=g,
                                                   dilation=d), ins)


def test_conv_transpose1d_and_3d():
    ins = [_rand(2, 3, 7), _rand(3, 4, 3), _rand(4)]
    _grad_check(lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=1,
                                                   output_padding=1), ins)
    ins = [_rand(1, 2, 3, 4, 3), _rand(2, 3, 2, 3, 2), _rand(3)]
    _grad_check(lambda x, w, b: F.conv_transpose3d(x, w, b, stride=(2, 1, 2)), ins)


@pytest.mark.parametrize("k,d", [(3, 1), (4, 1), (3, 2), ((2, 5), (1, 2))])
def test_conv2d_padding_same(k, d):
    kk = (k, k) if isinstance(k, int) else k
    ins = [_rand(2, 3, 9, 10), _rand(4, 3, *kk), _rand(4)]
    _grad_check(lambda x, w, b: F.conv2d(x, w, b, padding="same", dilation=d), ins)
    _grad_check(lambda x, w, b: F.conv2d(x, w, b, padding="valid", dilation=d), ins)


def test_conv_noncontiguous_inputs():
    x = _rand(2, 9, 10, 3, grad=False)          # NHWC storage
    w = _rand(3, 3, 3, 4, grad=False)           # (kh, kw, C, O) storage
    xc, wc = x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1)   # logical NCHW / OIHW
    ref = F.conv2d(xc, wc, padding=1, stride=(1, 2))
    got = F.conv2d(x.to(DEV).permute(0, 3, 1, 2), w.to(DEV).permute(3, 2, 0, 1),
                   padding=1, stride=(1, 2))
    assert_close(got, ref, **TOL)
    # channels_last memory format and a sliced (strided) input
    x2 = _rand(2, 4, 12, 12, grad=False)
    w2 = _rand(5, 4, 3, 3, grad=False)
    ref = F.conv2d(x2[:, :, ::2, 1:], w2)
    got = F.conv2d(x2.to(DEV)[:, :, ::2, 1:], w2.to(DEV))
    assert_close(got, ref, **TOL)
    x3 = x2.to(memory_format=torch.channels_last)
    assert_close(F.conv2d(x3.to(DEV), w2.to(DEV), padding=1),
                 F.conv2d(x2, w2, padding=1), **TOL)


def test_conv_noncontiguous_backward():
    x = _rand(2, 8, 8, 3)
    w = _rand(4, 3, 3, 3)

    def fn(x, w):
        return F.conv2d(x.permute(0, 3, 1, 2), w, stride=2, padding=1)
    _grad_check(fn, [x, w])


def test_conv_empty_batch():
    x = torch.randn(0, 3, 8, 8)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    wd = w.detach().to(DEV).requires_grad_()
    bd = b.detach().to(DEV).requires_grad_()
    y = F.conv2d(x.to(DEV), wd, bd, padding=1)
    assert y.shape == (0, 4, 8, 8) and y.device.type == "tpu"
    y.sum().backward()
    F.conv2d(x, w, b, padding=1).sum().backward()
    assert_close(wd.grad, w.grad)
    assert_close(bd.grad, b.grad)
    yt = F.conv_transpose2d(x.to(DEV), torch.randn(3, 2, 3, 3).to(DEV), stride=2)
    assert yt.shape == (0, 2, 17, 17)


def test_conv_unbatched():
    x, w, b = _rand(3, 9, 9), _rand(4, 3, 3, 3), _rand(4)
    _grad_check(lambda x, w, b: F.conv2d(x, w, b, padding=1), [x, w, b])
    x1, w1 = _rand(3, 11), _rand(2, 3, 3)
    _grad_check(lambda x, w: F.conv1d(x, w), [x1, w1])


def test_conv_input_only_and_weight_only_grads():
    x = _rand(2, 3, 7, 7)
    w = _rand(4, 3, 3, 3, grad=False)
    _grad_check(lambda x, w: F.conv2d(x, w, stride=2), [x, w])
    x = _rand(2, 3, 7, 7, grad=False)
    w = _rand(4, 3, 3, 3)
    _grad_check(lambda x, w: F.conv2d(x, w, stride=2), [x, w])


def test_conv_backward_op_direct():
    gy, x, w = torch.randn(2, 4, 5, 5), torch.randn(2, 3, 9, 9), torch.randn(4, 3, 3, 3)
    args = ([4], [2, 2], [1, 1], [1, 1], False, [0, 0], 1)
    for mask in ([True, True, True], [True, False, True], [False, True, False]):
        ref = torch.ops.aten.convolution_backward(gy, x, w, *args, mask)
        got = torch.ops.aten.convolution_backward(gy.to(DEV), x.to(DEV), w.to(DEV),
                                                  *args, mask)
        for r, g, m in zip(ref, got, mask):
            if m:
                assert_close(g, r, **TOL)


@pytest.mark.parametrize("dtype,tol", [
    (torch.float64, dict(rtol=1e-10, atol=1e-10)),
    (torch.bfloat16, dict(rtol=3e-2, atol=3e-2)),
    (torch.float16, dict(rtol=5e-3, atol=5e-3)),
])
def test_conv_dtypes(dtype, tol):
    x = _rand(2, 4, 8, 8, dtype=dtype)
    w = _rand(6, 2, 3, 3, dtype=dtype)
    b = _rand(6, dtype=dtype)
    if dtype == torch.float16:  # CPU half conv: compare forward against fp32
        y = F.conv2d(x.to(DEV), w.to(DEV), b.to(DEV), padding=1, groups=2)
        ref = F.conv2d(x.float(), w.float(), b.float(), padding=1, groups=2).half()
        assert_close(y, ref, **tol)
        return
    _grad_check(lambda x, w, b: F.conv2d(x, w, b, padding=1, stride=(1, 2), groups=2),
                [x, w, b], tol=tol)


def test_conv_int64():
    x = torch.randint(-5, 5, (2, 3, 6, 6))
    w = torch.randint(-3, 3, (4, 3, 3, 3))
    assert_close(F.conv2d(x.to(DEV), w.to(DEV), padding=1), F.conv2d(x, w, padding=1))


def test_conv_default_precision_is_bf16_pass():
    x, w = torch.randn(2, 8, 10, 10), torch.randn(4, 8, 3, 3)
    with torch.tpu.precision(torch.tpu.Precision.DEFAULT):
        y = F.conv2d(x.to(DEV), w.to(DEV)).cpu()
    ref = F.conv2d(x.bfloat16().double(), w.bfloat16().double()).float()
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    assert (y - F.conv2d(x, w)).abs().max() > 1e-4  # really one bf16 pass


def test_conv_errors():
    x = torch.randn(1, 3, 5, 5).to(DEV)
    with pytest.raises(RuntimeError, match="expected input.*to have 6 channels"):
        F.conv2d(x, torch.randn(4, 3, 3, 3).to(DEV), groups=2)
    with pytest.raises(RuntimeError, match="Kernel size can't be greater"):
        F.conv2d(x, torch.randn(4, 3, 7, 7).to(DEV))
    with pytest.raises(RuntimeError, match="expected bias to be 1-dimensional"):
        F.conv2d(x, torch.randn(4, 3, 3, 3).to(DEV), torch.randn(5).to(DEV))
    with pytest.raises(RuntimeError, match="non-positive stride"):
        F.conv2d(x, torch.randn(4, 3, 3, 3).to(DEV), stride=0)


def test_conv_module_training_step():
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 4, 1))
    net_d = torch.nn.Sequential(*[m for m in net])  # same modules
    x = torch.randn(2, 3, 12, 12)
    ref = net(x)
    ref.square().mean().backward()
    grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    net_d.to(DEV)
    out = net_d(x.to(DEV))
    out.square().mean().backward()
    assert_close(out, ref.detach(), **TOL)
    for p, g in zip(net_d.parameters(), grads):
        assert_close(p.grad, g, **TOL)


def test_conv_random_configs():
    """Seeded random convolution configs (1d/2d/3d, transposed, groups,
    stride, padding, dilation, output_padding): output and all grads."""
    import random
    rnd = random.Random(1234)
    done = 0
    while done < 25:
        nsp = rnd.choice([1, 2, 2, 3])
        N, G = rnd.randint(1, 3), rnd.choice([1, 1, 2])
        C, O = G * rnd.randint(1, 3), G * rnd.randint(1, 3)
        sp = [rnd.randint(3, 9 if nsp < 3 else 5) for _ in range(nsp)]
        k = [rnd.randint(1, 3) for _ in range(nsp)]
        s = [rnd.randint(1, 3) for _ in range(nsp)]
        p = [rnd.randint(0, 2) for _ in range(nsp)]
        d = [rnd.randint(1, 2) for _ in range(nsp)]
        tr = rnd.random() < 0.4
        op = [rnd.randint(0, max(a, b) - 1) for a, b in zip(s, d)] if tr else [0] * nsp
        wshape = ((C, O // G) if tr else (O, C // G)) + tuple(k)

        def fn(x, w, b):
            return torch.convolution(x, w, b, s, p, d, tr, op, G)
        try:
            y = fn(torch.randn(N, C, *sp), torch.randn(*wshape), torch.randn(O))
        except RuntimeError:
            continue  # invalid config for PyTorch too
        if y.numel() == 0:
            continue
        _grad_check(fn, [_rand(N, C, *sp), _rand(*wshape), _rand(O)],
                    tol=dict(rtol=2e-4, atol=2e-4))
        done += 1


# ---- pooling -------------------------------------------------------------

@pytest.mark.parametrize("cfg", [
    # (shape, k, stride, padding, dilation, ceil_mode)
    ((2, 3, 9, 8), 3, 2, 1, 1, False),
    ((2, 3, 9, 8), 3, 2, 1, 1, True),
    ((1, 2, 10, 11), (2, 3), (1, 2), (1, 0), (2, 1), False),
    ((3, 7, 7), 2, None, 0, 1, True),
    ((2, 4, 16, 16), 2, 2, 0, 1, False),
])
def test_max_pool2d(cfg):
    shape, k, s, p, d, ceil = cfg
    x = _rand(*shape)
    _grad_check(lambda x: F.max_pool2d(x, k, s, p, d, ceil_mode=ceil), [x])
    got, gi = F.max_pool2d(x.detach().to(DEV), k, s, p, d, ceil_mode=ceil,
                           return_indices=True)
    ref, ri = F.max_pool2d(x.detach(), k, s, p, d, ceil_mode=ceil, return_indices=True)
    assert_close(got, ref)
    assert torch.equal(gi.cpu(), ri)


def test_max_pool_ties_nan_and_1d_3d():
    x = torch.tensor([[[[1., 1., 2., 2.], [float("nan"), 0., 2., 5.],
                        [3., 3., -float("inf"), 1.], [3., 3., 1., float("nan")]]]])
    got, gi = F.max_pool2d(x.to(DEV), 2, return_indices=True)
    ref, ri = F.max_pool2d(x, 2, return_indices=True)
    assert_close(got, ref, equal_nan=True)
    assert torch.equal(gi.cpu(), ri)
    _grad_check(lambda x: F.max_pool1d(x, 3, 2, 1), [_rand(2, 3, 11)])
    _grad_check(lambda x: F.max_pool3d(x, 2, (1, 2, 2), (1, 0, 1)), [_rand(1, 2, 4, 6, 5)])


@pytest.mark.parametrize("cfg", [
    # (shape, k, stride, padding, ceil_mode, count_include_pad, divisor_override)
    ((2, 3, 9, 8), 3, 2, 1, False, True, None),
    ((2, 3, 9, 8), 3, 2, 1, True, False, None),
    ((1, 2, 10, 11), (2, 3), (1, 2), (1, 0), True, True, None),
    ((3, 7, 7), 2, None, 0, False, True, 3),
    ((2, 4, 14, 14), 2, 2, 0, False, True, None),
])
def test_avg_pool2d(cfg):
    shape, k, s, p, ceil, cip, dov = cfg
    x = _rand(*shape)
    _grad_check(lambda x: F.avg_pool2d(x, k, s, p, ceil_mode=ceil,
                                       count_include_pad=cip, divisor_override=dov), [x])


def test_avg_pool_1d_3d():
    _grad_check(lambda x: F.avg_pool1d(x, 3, 2, 1, count_include_pad=False), [_rand(2, 3, 11)])
    _grad_check(lambda x: F.avg_pool3d(x, 2, (1, 2, 2), 1, ceil_mode=True), [_rand(1, 2, 4, 6, 5)])


@pytest.mark.parametrize("shape,out", [
    ((2, 3, 9, 8), (3, 4)), ((2, 3, 7, 7), (1, 1)), ((1, 2, 5, 11), (3, 4)),
    ((3, 10, 6), (4, 6)), ((2, 3, 6, 6), (None, 2)),
])
def test_adaptive_avg_pool2d(shape, out):
    _grad_check(lambda x: F.adaptive_avg_pool2d(x, out), [_rand(*shape)])


def test_adaptive_avg_pool_1d_3d():
    _grad_check(lambda x: F.adaptive_avg_pool1d(x, 4), [_rand(2, 3, 10)])
    _grad_check(lambda x: F.adaptive_avg_pool3d(x, (2, 3, 2)), [_rand(1, 2, 5, 7, 4)])


def test_pool_half_dtypes():
    x = torch.randn(2, 3, 8, 8).bfloat16()
    for fn in (lambda t: F.max_pool2d(t, 3, 2, 1), lambda t: F.avg_pool2d(t, 2),
               lambda t: F.adaptive_avg_pool2d(t, 3)):
        assert_close(fn(x.to(DEV)), fn(x), rtol=1e-2, atol=1e-2)


def test_resnet_block_training():
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = torch.nn.Conv2d(3, 8, 7, 2, 3, bias=False)
            self.bn = torch.nn.BatchNorm2d(8)
            self.pool = torch.nn.MaxPool2d(3, 2, 1)
            self.c1 = torch.nn.Conv2d(8, 8, 3, 1, 1)
            self.down = torch.nn.Conv2d(8, 16, 1, 2)
            self.head = torch.nn.Linear(16, 5)

        def forward(self, x):
            x = self.pool(torch.relu(self.bn(self.stem(x))))
            x = torch.relu(self.c1(x) + x)
            x = self.down(x)
            return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))

    m = Block()
    x = torch.randn(2, 3, 32, 32)
    ref = m(x)
    ref.sum().backward()
    grads = {n: p.grad.clone() for n, p in m.named_parameters()}
    m.zero_grad()
    m.to(DEV)
    out = m(x.to(DEV))
    out.sum().backward()
    assert_close(out, ref.detach(), rtol=1e-3, atol=1e-3)
    for n, p in m.named_parameters():
        assert_close(p.grad, grads[n], rtol=1e-3, atol=1e-3)
