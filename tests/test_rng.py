"""Counter-based RNG on tpu: seeding, reproducibility, state save/restore,
distributions, dropout."""
import pytest
import torch
import torch.nn.functional as F

from conftest import DEV


def test_same_seed_same_numbers():
    torch.manual_seed(123)
    a = torch.rand(1000, device=DEV).cpu()
    b = torch.randn(50, 7, device=DEV).cpu()
    torch.manual_seed(123)
    assert torch.equal(torch.rand(1000, device=DEV).cpu(), a)
    assert torch.equal(torch.randn(50, 7, device=DEV).cpu(), b)
    torch.tpu.manual_seed(5)
    c = torch.rand(10, device=DEV).cpu()
    assert not torch.equal(c, a[:10])
    torch.manual_seed(124)
    assert not torch.equal(torch.rand(1000, device=DEV).cpu(), a)


def test_consecutive_calls_differ_and_state_roundtrip():
    torch.manual_seed(0)
    x = torch.rand(100, device=DEV).cpu()
    y = torch.rand(100, device=DEV).cpu()
    assert not torch.equal(x, y)
    state = torch.tpu.get_rng_state()
    u = torch.randn(64, device=DEV).cpu()
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.randn(64, device=DEV).cpu(), u)
    assert torch.tpu.initial_seed() == 0


def test_generator_object():
    g = torch.Generator(device=DEV)
    g.manual_seed(42)
    a = torch.rand(20, device=DEV, generator=g).cpu()
    g.manual_seed(42)
    assert torch.equal(torch.rand(20, device=DEV, generator=g).cpu(), a)


def test_distributions():
    torch.manual_seed(1)
    u = torch.rand(200_000, device=DEV).cpu()
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean().item() - 0.5) < 0.01 and abs(u.var().item() - 1 / 12) < 0.01
    n = torch.randn(200_000, device=DEV).cpu()
    assert abs(n.mean().item()) < 0.01 and abs(n.std().item() - 1) < 0.01
    e = torch.empty(100_000, device=DEV).normal_(3.0, 2.0).cpu()
    assert abs(e.mean().item() - 3) < 0.05 and abs(e.std().item() - 2) < 0.05
    v = torch.empty(100_000, device=DEV).uniform_(-2, 4).cpu()
    assert v.min() >= -2 and v.max() < 4 and abs(v.mean().item() - 1) < 0.05
    r = torch.randint(0, 7, (100_000,), device=DEV).cpu()
    assert r.dtype == torch.int64 and r.min() == 0 and r.max() == 6
    assert abs(r.float().mean().item() - 3) < 0.05
    r2 = torch.randint(-5, 5, (1000,), device=DEV, dtype=torch.int32).cpu()
    assert r2.dtype == torch.int32 and r2.min() >= -5 and r2.max() < 5
    b = torch.empty(100_000, device=DEV).bernoulli_(0.3).cpu()
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean().item() - 0.3) < 0.01
    p = torch.full((100_000,), 0.8, device=DEV)
    assert abs(torch.bernoulli(p).cpu().mean().item() - 0.8) < 0.01


def test_dropout():
    torch.manual_seed(3)
    x = torch.ones(100_000, device=DEV)
    y = F.dropout(x, 0.25, training=True).cpu()
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.75) < 0.01
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / 0.75))
    assert torch.equal(F.dropout(x, 0.25, training=False).cpu(), x.cpu())
    # backward uses the same mask
    xr = torch.ones(1000, device=DEV, requires_grad=True)
    out = F.dropout(xr, 0.5)
    out.sum().backward()
    assert torch.equal((xr.grad.cpu() != 0), (out.detach().cpu() != 0))
    torch.manual_seed(9)
    m1 = F.dropout(x, 0.5).cpu()
    torch.manual_seed(9)
    assert torch.equal(F.dropout(x, 0.5).cpu(), m1)
