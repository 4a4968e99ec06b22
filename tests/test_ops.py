"""Native ops against PyTorch CPU: values, dtypes, broadcasting, type
promotion, non-contiguous and empty inputs, out= and in-place variants, and
the exception types of bad input. The CPU fallback is disabled (conftest),
so every op here runs natively."""
import pytest
import torch
import torch.nn.functional as F

from conftest import DEV, assert_close


def _tpu(x):
    return x.to(DEV) if isinstance(x, torch.Tensor) else x


def check(fn, *args, rtol=1.3e-6, atol=1e-5, **kw):
    """Run fn on CPU and on tpu copies of the args; compare every output."""
    expected = fn(*args, **kw)
    actual = fn(*[_tpu(a) for a in args], **{k: _tpu(v) for k, v in kw.items()})
    if isinstance(expected, torch.Tensor):
        expected, actual = (expected,), (actual,)
    for e, a in zip(expected, actual):
        assert a.dtype == e.dtype, (a.dtype, e.dtype)
        assert a.shape == e.shape, (a.shape, e.shape)
        assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True)


def rnd(*shape, dtype=torch.float32, lo=-3, hi=3):
    if dtype.is_floating_point:
        return (torch.rand(*shape) * (hi - lo) + lo).to(dtype)
    if dtype == torch.bool:
        return torch.rand(*shape) > 0.5
    return torch.randint(lo, hi + 1, shape).to(dtype)


UNARY = [torch.neg, torch.abs, torch.exp, torch.tanh, torch.sigmoid, torch.sin, torch.cos,
         torch.floor, torch.ceil, torch.round, torch.trunc, torch.sign, torch.erf, torch.relu,
         F.gelu, F.silu, lambda x: F.gelu(x, approximate="tanh"), torch.square,
         lambda x: torch.sqrt(x.abs()), lambda x: torch.log(x.abs() + 0.1),
         lambda x: torch.rsqrt(x.abs() + 0.1), lambda x: torch.reciprocal(x + 10),
         lambda x: torch.log1p(x.abs()), torch.expm1]


@pytest.mark.parametrize("fn", UNARY, ids=lambda f: getattr(f, "__name__", "lambda"))
def test_unary_float(fn):
    check(fn, rnd(7, 13), rtol=1e-5, atol=1e-6)
    check(fn, rnd(7, 13).t(), rtol=1e-5, atol=1e-6)  # non-contiguous
    check(fn, rnd(0, 3), rtol=1e-5, atol=1e-6)  # empty


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_unary_other_float_dtypes(dtype):
    x = rnd(5, 9, dtype=dtype)
    for fn in (torch.exp, torch.tanh, torch.sigmoid, torch.neg, torch.relu):
        check(fn, x, rtol=1e-2 if dtype != torch.float64 else 1e-7, atol=1e-3)


def test_unary_int_promotes_to_float():
    check(torch.exp, rnd(4, 5, dtype=torch.int64))
    check(torch.sqrt, rnd(4, 5, dtype=torch.int32, lo=0, hi=9))
    check(torch.abs, rnd(4, 5, dtype=torch.int32))
    check(torch.neg, rnd(4, 5, dtype=torch.int64))


BINARY = [torch.add, torch.sub, torch.mul, torch.div, torch.maximum, torch.minimum,
          lambda a, b: torch.add(a, b, alpha=2), lambda a, b: torch.sub(a, b, alpha=0.5),
          torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge,
          lambda a, b: torch.pow(a.abs() + 0.5, b), torch.atan2,
          lambda a, b: torch.div(a, b, rounding_mode="floor"),
          lambda a, b: torch.div(a, b, rounding_mode="trunc"),
          lambda a, b: torch.remainder(a, b), lambda a, b: torch.fmod(a, b)]


@pytest.mark.parametrize("fn", BINARY, ids=lambda f: getattr(f, "__name__", "lambda"))
def test_binary_broadcast(fn):
    a, b = rnd(4, 1, 5), rnd(3, 1) + 0.1
    check(fn, a, b)
    check(fn, a.transpose(0, 2), rnd(5, 3, 1) + 0.1)
    check(fn, rnd(0, 5), rnd(5))


@pytest.mark.parametrize("da,db", [(torch.int64, torch.float32), (torch.int32, torch.int64),
                                   (torch.uint8, torch.int8), (torch.bool, torch.int32),
                                   (torch.float16, torch.float32), (torch.bfloat16, torch.float16),
                                   (torch.bool, torch.bool), (torch.float64, torch.float32)])
def test_type_promotion(da, db):
    a, b = rnd(3, 4, dtype=da), rnd(3, 4, dtype=db)
    check(torch.add, a, b, rtol=1e-2, atol=1e-2)
    check(torch.mul, a, b, rtol=1e-2, atol=1e-2)
    check(torch.eq, a, b)
    check(lambda x, y: x / (y.float() + 10), a, b, rtol=1e-2, atol=1e-2)


def test_scalar_promotion():
    i = rnd(3, 4, dtype=torch.int64)
    f16 = rnd(3, 4, dtype=torch.float16)
    check(lambda x: x + 2.5, i)
    check(lambda x: x * 3, i)
    check(lambda x: x + 2.5, f16, rtol=1e-3, atol=1e-3)
    check(lambda x: x + torch.tensor(2.5, dtype=torch.float64), i)  # 0-dim cpu tensor
    check(lambda x: x > 1, i)
    check(lambda x: 2 ** x.float(), i)
    check(lambda x: x / 2, i)
    check(lambda x: x // 2, i)
    check(lambda x: x % 3, i)


def test_inplace_and_out():
    a, b = rnd(4, 5), rnd(4, 5)
    ta, tb = a.to(DEV), b.to(DEV)
    ta.add_(tb, alpha=2)
    a.add_(b, alpha=2)
    assert_close(ta, a)
    ta.mul_(3).sub_(1.5).div_(2)
    a.mul_(3).sub_(1.5).div_(2)
    assert_close(ta, a)
    out = torch.empty(4, 5, device=DEV)
    torch.add(ta, tb, out=out)
    assert_close(out, a + b)
    out2 = torch.empty(0, device=DEV)
    torch.mul(ta, tb, out=out2)  # resized from empty
    assert_close(out2, a * b)
    # in-place through a view writes the base
    base = torch.zeros(4, 5)
    tbase = base.to(DEV)
    tbase[:, 1:3].add_(1)
    base[:, 1:3].add_(1)
    assert_close(tbase, base)
    tbase.t()[2].fill_(7)
    base.t()[2].fill_(7)
    assert_close(tbase, base)
    i = torch.arange(6, device=DEV)
    i += 1
    assert i.cpu().tolist() == [1, 2, 3, 4, 5, 6]


def test_inplace_errors_match_cpu():
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        torch.zeros(3, device=DEV).add_(torch.zeros(2, 3, device=DEV))
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.zeros(3, dtype=torch.int64, device=DEV).add_(1.5)
    with pytest.raises(RuntimeError):
        torch.zeros(3, device=DEV) + torch.zeros(4, device=DEV)
    with pytest.raises(RuntimeError, match="same device"):
        torch.zeros(3, device=DEV) + torch.zeros(3)


def test_where_clamp_fill_factories():
    a, b = rnd(4, 5), rnd(4, 5)
    check(lambda x, y: torch.where(x > 0, x, y), a, b)
    check(lambda x: torch.where(x > 0, x, 0.0), a)
    check(lambda x: x.clamp(-1, 1), a)
    check(lambda x: x.clamp(min=0.5), a)
    check(lambda x, lo, hi: x.clamp(lo, hi), a, -b.abs(), b.abs())
    check(lambda x: torch.full_like(x, 3.5), a)
    check(lambda x: torch.zeros_like(x) + torch.ones_like(x), a)
    assert torch.equal(torch.arange(10, device=DEV).cpu(), torch.arange(10))
    assert torch.equal(torch.arange(1, 4, 0.5, device=DEV).cpu(), torch.arange(1, 4, 0.5))
    assert torch.equal(torch.full((2, 3), 7, device=DEV).cpu(), torch.full((2, 3), 7))
    assert torch.equal(torch.ones(3, dtype=torch.int32, device=DEV).cpu(), torch.ones(3, dtype=torch.int32))
    z = torch.empty(5, device=DEV)
    z.zero_()
    assert torch.equal(z.cpu(), torch.zeros(5))
    check(lambda x: x.masked_fill(x > 0, -1.0), a)


REDUCTIONS = [torch.sum, torch.mean, torch.amax, torch.amin, torch.argmax, torch.argmin,
              lambda x: x.sum(1), lambda x: x.sum((0, 2), keepdim=True), lambda x: x.mean(-1),
              lambda x: x.max(1), lambda x: x.min(0), lambda x: x.max(), lambda x: x.min(),
              lambda x: x.argmax(2), lambda x: x.var(1), lambda x: x.std(1),
              lambda x: x.var(), lambda x: x.var(1, unbiased=False), lambda x: x.std(0, keepdim=True),
              lambda x: torch.var_mean(x, 1), lambda x: x.prod(1), lambda x: (x > 0).all(),
              lambda x: (x > 0).any(1), lambda x: torch.logsumexp(x, 1),
              lambda x: x.norm(), lambda x: x.sum(dtype=torch.float64)]


@pytest.mark.parametrize("fn", REDUCTIONS, ids=lambda f: getattr(f, "__name__", "lambda"))
def test_reductions(fn):
    x = rnd(4, 6, 5)
    check(fn, x, rtol=1e-5, atol=1e-5)
    check(fn, x.transpose(0, 2), rtol=1e-5, atol=1e-5)


def test_reductions_int_and_empty():
    i = rnd(4, 5, dtype=torch.int32)
    check(torch.sum, i)  # int32 sums to int64
    check(lambda x: x.sum(0), i)
    check(lambda x: x.max(1), i)
    check(lambda x: x.sum(1), rnd(0, 4))
    check(lambda x: x.sum(), rnd(0, 4))
    check(lambda x: x.mean(), rnd(1000, 1000))


def test_reduction_errors():
    with pytest.raises(IndexError):
        torch.zeros(3, 4, device=DEV).sum(5)
    with pytest.raises((RuntimeError, IndexError)):
        torch.zeros(0, device=DEV).argmax()


@pytest.mark.parametrize("fn", [
    torch.mm, lambda a, b: a @ b, lambda a, b: torch.matmul(a, b),
    lambda a, b: torch.addmm(torch.ones(a.shape[0], b.shape[1], device=a.device), a, b, beta=0.5, alpha=2),
    lambda a, b: F.linear(a, b.t()), lambda a, b: F.linear(a, b.t(), torch.arange(b.shape[1], dtype=a.dtype, device=a.device)),
])
def test_matmul_family(fn):
    a, b = rnd(17, 33), rnd(33, 9)
    check(fn, a, b, rtol=1e-5, atol=1e-4)
    check(fn, rnd(33, 17).t(), rnd(9, 33).t(), rtol=1e-5, atol=1e-4)  # transposed views


def test_batched_matmul():
    check(torch.bmm, rnd(3, 5, 7), rnd(3, 7, 4), rtol=1e-5, atol=1e-4)
    check(torch.matmul, rnd(2, 3, 5, 7), rnd(7, 4), rtol=1e-5, atol=1e-4)
    check(torch.matmul, rnd(2, 1, 5, 7), rnd(3, 7, 4), rtol=1e-5, atol=1e-4)
    check(torch.matmul, rnd(7), rnd(7, 4), rtol=1e-5, atol=1e-4)
    check(torch.matmul, rnd(3, 7), rnd(7), rtol=1e-5, atol=1e-4)
    check(lambda a, b: torch.baddbmm(torch.ones(3, 5, 4, device=a.device), a, b, alpha=0.5),
          rnd(3, 5, 7), rnd(3, 7, 4), rtol=1e-5, atol=1e-4)
    check(torch.matmul, rnd(0, 7), rnd(7, 4))
    check(torch.matmul, rnd(3, 0), rnd(0, 4))  # k == 0 -> zeros
    check(torch.matmul, rnd(3, 5, dtype=torch.float64), rnd(5, 2, dtype=torch.float64), rtol=1e-12, atol=1e-12)


def test_matmul_shape_error():
    with pytest.raises(RuntimeError):
        torch.mm(torch.zeros(2, 3, device=DEV), torch.zeros(4, 5, device=DEV))


def test_softmax_family():
    x = rnd(4, 7, 9)
    for dim in (0, 1, -1):
        check(lambda t: torch.softmax(t, dim), x)
        check(lambda t: torch.log_softmax(t, dim), x, rtol=1e-5, atol=1e-5)
    check(lambda t: torch.softmax(t, -1), x.transpose(0, 2))
    check(lambda t: torch.softmax(t, 1, dtype=torch.float64), x)


def test_layer_norm_and_embedding():
    x = rnd(3, 5, 8)
    w, b = rnd(8), rnd(8)
    check(lambda t, ww, bb: F.layer_norm(t, (8,), ww, bb), x, w, b, rtol=1e-5, atol=1e-5)
    check(lambda t: F.layer_norm(t, (5, 8)), x, rtol=1e-5, atol=1e-5)
    table = rnd(10, 4)
    idx = torch.tensor([[1, 3, 9], [0, 0, 2]])
    check(lambda t, i: F.embedding(i, t), table, idx)
    with pytest.raises(IndexError):
        F.embedding(torch.tensor([10], device=DEV), table.to(DEV))


def test_cat_stack_index_gather():
    a, b = rnd(2, 3), rnd(4, 3)
    check(lambda x, y: torch.cat([x, y]), a, b)
    check(lambda x, y: torch.cat([x.t(), y.t()], 1), a, b)
    check(lambda x: torch.stack([x, x * 2], 1), a)
    check(lambda x: torch.cat([x, torch.empty(0, 3, device=x.device)]), a)
    idx = torch.tensor([2, 0, 1, 1])
    check(lambda x, i: torch.index_select(x, 0, i), b, idx)
    check(lambda x, i: torch.index_select(x, 1, i[:2]), b, idx)
    g = torch.tensor([[0, 2], [1, 1], [2, 0], [0, 0]])
    check(lambda x, i: torch.gather(x, 1, i), b, g)
    with pytest.raises(IndexError):
        torch.index_select(b.to(DEV), 0, torch.tensor([7], device=DEV))
    with pytest.raises(RuntimeError):
        torch.gather(b.to(DEV), 1, torch.tensor([[5]], device=DEV))


def test_losses():
    logits, target = rnd(6, 5), torch.tensor([0, 4, 2, 2, 1, 3])
    check(F.cross_entropy, logits, target, rtol=1e-5, atol=1e-5)
    check(lambda x, t: F.cross_entropy(x, t, reduction="none"), logits, target)
    check(lambda x, t: F.cross_entropy(x, t, reduction="sum"), logits, target, rtol=1e-5, atol=1e-5)
    check(lambda x, t: F.cross_entropy(x, t, ignore_index=2), logits, target, rtol=1e-5, atol=1e-5)
    check(lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), logits, target, rtol=1e-5, atol=1e-5)
    check(lambda x, t: F.nll_loss(F.log_softmax(x, 1), t, weight=torch.arange(1.0, 6.0, device=x.device)),
          logits, target, rtol=1e-5, atol=1e-5)
    check(F.mse_loss, rnd(4, 3), rnd(4, 3))
    check(lambda a, b: F.mse_loss(a, b, reduction="none"), rnd(4, 3), rnd(4, 3))
    with pytest.raises(IndexError):
        F.nll_loss(logits.to(DEV), torch.tensor([0, 5, 0, 0, 0, 0], device=DEV))


def _grads(fn, *inputs):
    """Gradients of sum(fn(*inputs) * fixed weights) w.r.t. every input."""
    ins = [x.detach().clone().requires_grad_(x.dtype.is_floating_point) for x in inputs]
    out = fn(*ins)
    w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape).to(out.device)
    (out * w).sum().backward()
    return [x.grad for x in ins if x.requires_grad]


@pytest.mark.parametrize("fn", [
    lambda x: torch.relu(x), lambda x: F.gelu(x), lambda x: F.silu(x), lambda x: torch.tanh(x),
    lambda x: torch.sigmoid(x), lambda x: torch.softmax(x, -1), lambda x: torch.log_softmax(x, 1),
    lambda x: F.layer_norm(x, (x.shape[-1],)), lambda x: x.sum(0), lambda x: x.mean(1, keepdim=True),
    lambda x: (x * x).exp(), lambda x: x.var(1), lambda x: x @ x.t(), lambda x: x.max(1).values,
    lambda x: torch.cat([x, x * 2], 1), lambda x: x[:, 1:3], lambda x: x.t().contiguous(),
    lambda x: torch.where(x > 0, x, x * 0.1), lambda x: x.clamp(-0.5, 0.5), lambda x: x.pow(2),
    lambda x: F.gelu(x, approximate="tanh"), lambda x: (x.abs() + 0.1).sqrt(),
], ids=range(22))
def test_backward_matches_cpu(fn):
    x = rnd(5, 6)
    expected = _grads(fn, x)
    actual = _grads(fn, x.to(DEV))
    for a, e in zip(actual, expected):
        assert_close(a, e, rtol=1e-5, atol=1e-5)


def test_backward_losses_embedding_linear():
    table, idx = rnd(10, 4), torch.tensor([[1, 3, 9], [1, 1, 2]])
    g_cpu = _grads(lambda t: F.embedding(idx, t), table)
    g_tpu = _grads(lambda t: F.embedding(idx.to(DEV), t), table.to(DEV))
    assert_close(g_tpu[0], g_cpu[0])
    logits, target = rnd(6, 5), torch.tensor([0, 4, 2, 2, 1, 3])
    e = _grads(lambda x: F.cross_entropy(x, target).reshape(1), logits)
    a = _grads(lambda x: F.cross_entropy(x, target.to(DEV)).reshape(1), logits.to(DEV))
    assert_close(a[0], e[0], rtol=1e-5, atol=1e-6)
    e = _grads(lambda x, y: F.mse_loss(x, y).reshape(1), rnd(3, 4), rnd(3, 4))
    w, b, x = rnd(3, 4), rnd(3), rnd(5, 4)
    e = _grads(F.linear, x, w, b)
    a = _grads(F.linear, x.to(DEV), w.to(DEV), b.to(DEV))
    for ai, ei in zip(a, e):
        assert_close(ai, ei, rtol=1e-5, atol=1e-5)
    ln_w, ln_b = rnd(4), rnd(4)
    e = _grads(lambda x, w, b: F.layer_norm(x, (4,), w, b), x, ln_w, ln_b)
    a = _grads(lambda x, w, b: F.layer_norm(x, (4,), w, b), x.to(DEV), ln_w.to(DEV), ln_b.to(DEV))
    for ai, ei in zip(a, e):
        assert_close(ai, ei, rtol=1e-5, atol=1e-5)


def test_index_with_cpu_indices():
    """Like CUDA, index ops accept index tensors that live on the CPU."""
    x = rnd(5, 4)
    idx = torch.tensor([4, 0, 2])
    assert_close(x.to(DEV)[idx], x[idx])
    assert_close(x.to(DEV)[idx[:2], torch.tensor([1, 3])], x[idx[:2], torch.tensor([1, 3])])
    with pytest.raises(RuntimeError, match="same device"):
        x.to(DEV) + x


def test_equal_returns_python_bool():
    a = torch.tensor([1, 2])
    for other in (torch.tensor([1.0, 2.0]), torch.tensor([1, 3]), torch.tensor([1, 2, 3])):
        assert torch.equal(a.to(DEV), other.to(DEV)) is torch.equal(a, other)
    nan = torch.tensor([float("nan")])
    assert torch.equal(nan.to(DEV), nan.to(DEV)) is False
    assert torch.equal(torch.zeros(0, 3, device=DEV), torch.zeros(0, 3, device=DEV)) is True
    x = rnd(4, 5)
    assert torch.equal(x.to(DEV).t(), x.t().contiguous().to(DEV)) is True


def test_gather_scatter_int32_and_empty_uint8_index():
    x = rnd(3, 4)
    i32 = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    check(lambda a, i: torch.gather(a, 1, i), x, i32)
    check(lambda a, i: a.scatter(1, i, a), x, i32)
    check(lambda a, i: a.scatter_add(1, i, a), x, i32)
    e = torch.zeros(0, dtype=torch.uint8)
    check(lambda a, i: torch.gather(a, 1, i), x, e)
    check(lambda a, i: a.scatter(1, i, a), x, e)
    check(lambda a, i: a.scatter_add(1, i, a), x, e)
    with pytest.raises(RuntimeError, match="int32/int64 for index"):
        torch.gather(x.to(DEV), 1, torch.tensor([[0]], dtype=torch.uint8, device=DEV))
    for fn in (lambda a, i: a.scatter(1, i, a.double()), lambda a, i: a.scatter_add(1, i, a.double())):
        with pytest.raises(RuntimeError, match="self.dtype to be equal to src.dtype"):
            fn(x.to(DEV), i32.to(DEV))


def test_index_select_0dim_and_roll_0dim():
    s = torch.tensor(3.0)
    check(lambda a, i: torch.index_select(a, 0, i), s, torch.tensor([0]))
    with pytest.raises(RuntimeError, match="only 1 value"):
        torch.index_select(s.to(DEV), 0, torch.tensor([0, 0], device=DEV))
    check(lambda a: torch.roll(a, 1), s)
    with pytest.raises(IndexError, match="no dimensions"):
        torch.roll(s.to(DEV), 1, 0)


@pytest.mark.parametrize("fn", [
    lambda x: F.huber_loss(x, x, delta=0.0),
    lambda x: F.huber_loss(x, x, delta=-1.0),
    lambda x: F.softshrink(x, -0.5),
    lambda x: torch.native_layer_norm(x, [], None, None, 1e-5),
    lambda x: F.max_pool3d(torch.zeros(1, 2, 0, 4, 4, device=x.device), 2),
    lambda x: F.max_pool3d(torch.zeros(0, 4, 4, 4, device=x.device), 2),
])
def test_error_inputs_match_cpu(fn):
    x = rnd(3, 4)
    with pytest.raises(RuntimeError) as cpu:
        fn(x)
    with pytest.raises(RuntimeError) as tpu:
        fn(x.to(DEV))
    assert str(tpu.value) == str(cpu.value)


def test_bool_and_uint8_mask_indexing():
    x = rnd(4, 5)
    m = torch.tensor([True, False, True, True, False])
    check(lambda a: a[a > 0], x)
    check(lambda a, k: a[:, k], x, m)
    check(lambda a, k: a[:, k], x, m.to(torch.uint8))
    check(lambda a, k: a[k], x, torch.zeros(4, 5, dtype=torch.bool))
    z = rnd(2, 3, 4)
    check(lambda a, k, i: a[k, :, i], z, torch.tensor([True, True]), torch.tensor([1, 3]))
    check(lambda a, i, k: a[i, k], z, torch.tensor([1, 0]), torch.tensor([True, False, True]))
    m2 = x > 0.3

    def put(a, k, v, acc):
        a = a.clone()
        a.index_put_((k,), v, accumulate=acc)
        return a
    check(lambda a, k: put(a, k, torch.tensor(0.0, device=a.device), False), x, m2)
    v = torch.arange(int(m2.sum()), dtype=torch.float32)
    check(lambda a, k, v: put(a, k, v, False), x, m2, v)
    check(lambda a, k, v: put(a, k, v, True), x, m2, v)
    with pytest.raises(IndexError, match="shape of the mask"):
        x.to(DEV)[torch.ones(3, dtype=torch.bool, device=DEV)]


@pytest.mark.parametrize("args", [(5, 0, 1), (-5, 0, 1), (2, 0, 1), (1, 5, 1), (1, -1, 1),
                                  (1, 0, -1), (1, 2, 3), (-1, 1, 2), (0, 1, 2)])
def test_narrow_copy_matches_cpu(args):
    x = rnd(3, 4)
    try:
        expected = torch.narrow_copy(x, *args)
    except Exception as e:  # noqa: BLE001 - same exception type and message
        with pytest.raises(type(e)) as tpu:
            torch.narrow_copy(x.to(DEV), *args)
        assert str(tpu.value) == str(e)
        return
    assert_close(torch.narrow_copy(x.to(DEV), *args), expected)
