"""Device-backend semantics TorchTPU's tests check: generator offsets per
draw, randperm, RNG-state checks, storage resize, storage-only dtypes,
internal-overlap errors, pinned memory, Fused Eager readiness."""
import pytest
import torch

import torch_tpu  # noqa: F401
import torch_tpu.sync
from torch_tpu.execution_mode import EagerMode, eager_mode

from conftest import assert_close

DEV = torch.device("tpu")
OVERLAP = "more than one element of the written-to tensor refers to a single memory location"


def test_generator_offset_advances_per_draw():
    g = torch.tpu.default_generators[0]
    torch.tpu.manual_seed(11)
    assert g.get_offset() == 0
    a = torch.rand(1000, device=DEV)
    assert g.get_offset() == 1  # one draw, whatever its size
    b = torch.randn(7, 3, device=DEV)
    assert g.get_offset() == 2
    torch.randperm(50, device=DEV)
    assert g.get_offset() == 3
    assert not torch.equal(a[:21].cpu(), torch.rand(21, device=DEV).cpu())
    # (seed, offset) fully determines a draw
    g.manual_seed(11)
    g.set_offset(1)
    assert torch.equal(torch.randn(7, 3, device=DEV).cpu(), b.cpu())
    gen = torch.Generator(device=DEV)
    gen.manual_seed(5)
    torch.rand(3, device=DEV, generator=gen)
    assert gen.get_offset() == 1


def test_randperm_native_and_seeded():
    fb0 = torch.tpu.fallback_counts()
    for n in (0, 1, 2, 17, 1000):
        p = torch.randperm(n, device=DEV)
        assert p.dtype is torch.int64 and p.device.type == "tpu"
        assert sorted(p.cpu().tolist()) == list(range(n))
    torch.tpu.manual_seed(3)
    a = torch.randperm(64, device=DEV, dtype=torch.int32)
    torch.tpu.manual_seed(3)
    b = torch.randperm(64, device=DEV, dtype=torch.int32)
    assert a.dtype is torch.int32 and torch.equal(a.cpu(), b.cpu())
    assert a.cpu().tolist() != list(range(64))
    out = torch.empty(0, dtype=torch.int64, device=DEV)
    torch.randperm(9, out=out)
    assert sorted(out.cpu().tolist()) == list(range(9))
    assert torch.tpu.fallback_counts() == fb0


def test_set_rng_state_rejects_non_cpu_state():
    s = torch.tpu.get_rng_state()
    with pytest.raises(TypeError, match="ByteTensor"):
        torch.tpu.set_rng_state(s.to(DEV))
    with pytest.raises(TypeError, match="ByteTensor"):
        torch.tpu.set_rng_state(s.float())
    torch.tpu.set_rng_state(s)  # the CPU state still works


def test_untyped_storage_resize_fsdp2_pattern():
    p = torch.arange(8.0, device=DEV)
    st = p.untyped_storage()
    nbytes = st.nbytes()
    st.resize_(0)  # free (FSDP2 after forward)
    assert st.nbytes() == 0 and p.untyped_storage().nbytes() == 0
    st.resize_(nbytes)  # regrow, then all-gather into it
    assert st.nbytes() == nbytes
    p.copy_(torch.arange(8.0) * 2)
    assert p.cpu().tolist() == [2.0 * i for i in range(8)]
    # growing keeps the old bytes, shrinking keeps the prefix
    q = torch.arange(4.0, device=DEV)
    q.untyped_storage().resize_(32)
    big = torch.empty(0, device=DEV).set_(q.untyped_storage(), 0, (8,), (1,))
    assert big[:4].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    q.untyped_storage().resize_(8)
    small = torch.empty(0, device=DEV).set_(q.untyped_storage(), 0, (2,), (1,))
    assert small.cpu().tolist() == [0.0, 1.0]


@pytest.mark.parametrize("dtype,view_as", [(torch.uint16, torch.int16), (torch.uint32, torch.int32),
                                           (torch.uint64, torch.int64)])
def test_unsigned_dtypes_storage_views_copies(dtype, view_as):
    big = {torch.uint16: 65535, torch.uint32: 2**32 - 1, torch.uint64: 2**63 + 5}[dtype]
    host = torch.tensor([[1, 2, 3], [4, 5, big]], dtype=dtype)
    d = host.to(DEV)
    assert d.dtype is dtype
    assert torch.equal(d.cpu(), host)
    assert torch.equal(d.t().contiguous().cpu(), host.t().contiguous())  # strided d2d
    assert torch.equal(d[:, ::2].clone().cpu(), host[:, ::2])
    assert torch.equal(d.view(view_as).cpu(), host.view(view_as))
    assert torch.equal(d.view(-1)[3:].cpu(), host.view(-1)[3:])
    e = torch.empty(2, 3, dtype=dtype, device=DEV)
    e.copy_(d)
    assert torch.equal(e.cpu(), host)
    assert d.untyped_storage().nbytes() == host.untyped_storage().nbytes()
    with pytest.raises(NotImplementedError, match="storage-only"):
        d.to(torch.float32)


def test_float4_and_float8_storage_copies():
    raw = torch.tensor([0, 1, 0x7F, 0xFF], dtype=torch.uint8)
    f4 = raw.view(torch.float4_e2m1fn_x2)
    d = f4.to(DEV)
    assert d.dtype is torch.float4_e2m1fn_x2
    assert torch.equal(d.cpu().view(torch.uint8), raw)
    assert torch.equal(d.view(torch.uint8).cpu(), raw)
    f8 = torch.tensor([1.0, -2.5, 448.0]).to(torch.float8_e4m3fn)
    assert torch.equal(f8.to(DEV).cpu().view(torch.uint8), f8.view(torch.uint8))


@pytest.mark.parametrize("op", ["add_", "mul_", "clamp_", "fill_tensor", "uniform_", "copy_", "out"])
def test_inplace_into_internally_overlapping_tensor_raises(op):
    def run(dev):
        t = torch.zeros(1, device=dev).expand(3)
        if op == "add_":
            t.add_(1)
        elif op == "mul_":
            t.mul_(2)
        elif op == "clamp_":
            t.clamp_(0, 1)
        elif op == "fill_tensor":
            t.fill_(torch.tensor(2.0, device=dev))
        elif op == "uniform_":
            t.uniform_()
        elif op == "copy_":
            t.copy_(torch.ones(3, device=dev))
        else:
            torch.add(torch.ones(3, device=dev), 1, out=t)
    with pytest.raises(RuntimeError, match=OVERLAP):
        run("cpu")  # the reference
    with pytest.raises(RuntimeError, match=OVERLAP):
        run(DEV)


@pytest.mark.filterwarnings("ignore:Use of")
def test_overlap_allowed_where_cpu_allows_it():
    # value writers CPU lets write into an expanded tensor
    for f in (lambda t: t.fill_(2.0), lambda t: t.zero_(),
              lambda t: t.masked_fill_(torch.tensor([True, False, True], device=t.device), 3.0)):
        c, d = torch.zeros(1), torch.zeros(1, device=DEV)
        f(c.expand(3))
        f(d.expand(3))
        assert_close(d, c)
    # unfold windows overlap but not provably so ("too hard"): CPU runs it
    # (the result depends on the element order, so only the acceptance is
    # compared)
    torch.arange(5.0).unfold(0, 3, 1).mul_(2)
    d = torch.arange(5.0, device=DEV)
    d.unfold(0, 3, 1).mul_(2)
    torch.tpu.synchronize()


def test_pin_memory_and_non_blocking_copy():
    h = torch.arange(6.0)
    p = h.pin_memory()
    assert p.is_pinned() and not h.is_pinned()
    assert torch.equal(p, h)
    src = torch.arange(100000.0, device=DEV) * 3
    dst = torch.empty(100000).pin_memory()
    dst.copy_(src, non_blocking=True)  # enqueued; the stream orders it
    ev = torch.tpu.Event()
    ev.record()
    ev.synchronize()
    assert dst[-1].item() == 299997.0 and dst[5].item() == 15.0
    back = dst.to(DEV, non_blocking=True)  # h2d from pinned memory
    assert_close(back, torch.arange(100000.0) * 3)
    # a non-pinned destination still waits (returns a finished copy)
    plain = torch.empty(100000)
    plain.copy_(src, non_blocking=True)
    assert plain[-1].item() == 299997.0


def test_is_ready_and_is_materialized():
    with eager_mode(EagerMode.DEFER_AND_FUSE):
        x = torch.ones(3, device=DEV) + 1
        assert not torch_tpu.sync.is_materialized(x) and not torch_tpu.sync.is_ready(x)
        torch_tpu.sync.synchronize(x, wait=True)
        assert torch_tpu.sync.is_materialized(x) and torch_tpu.sync.is_ready(x)
    y = torch.ones(4, device=DEV) * 2
    torch.tpu.synchronize()
    assert torch_tpu.sync.is_ready(y)
    assert torch_tpu.sync.is_ready(torch.ones(2))
