"""Fused Eager (EagerMode.DEFER_AND_FUSE): flush triggers, aliasing through
views / in-place ops / out=, autograd + AdamW equal to Strict Eager, loop
detection (one cached program per training step), dead intermediates, and
the on-disk compilation cache reused by a fresh process."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu
from torch_tpu import sync
from torch_tpu.execution_mode import EagerMode, eager_mode

DEV = torch.device("tpu")


@pytest.fixture
def fused():
    with eager_mode(EagerMode.DEFER_AND_FUSE):
        torch.tpu.synchronize()
        torch.tpu._reset_cache_stats()
        yield
        torch.tpu.synchronize()


def stats():
    return torch.tpu._get_cache_stats()


def flushes(reason):
    return stats()["flushes"][reason]


def pending():
    return sync.pending_ops()


# ---- recording and flush triggers -----------------------------------------


def test_ops_are_deferred(fused):
    x = torch.randn(64, device=DEV)
    torch.tpu.synchronize()
    y = (x * 2).exp().sin()
    assert pending() == 3
    assert not sync.is_materialized(y)
    assert "exponential" in sync.dump_pending_graph() or "exp" in sync.dump_pending_graph()
    dot = sync.dump_pending_graph(format="dot")
    assert dot.startswith("digraph") and "->" in dot
    torch.testing.assert_close(y.cpu(), (x.cpu() * 2).exp().sin())
    assert pending() == 0 and sync.is_materialized(y)


@pytest.mark.parametrize("trigger", ["cpu", "item", "tolist", "numpy", "print", "save",
                                     "bool", "synchronize", "sync_api", "stream_sync"])
def test_flush_triggers(fused, trigger, tmp_path):
    x = torch.arange(6, dtype=torch.float32, device=DEV)
    torch.tpu.synchronize()
    y = x * 3 + 1
    assert pending() == 2
    ref = torch.arange(6, dtype=torch.float32) * 3 + 1
    if trigger == "cpu":
        assert torch.equal(y.cpu(), ref)
    elif trigger == "item":
        assert y[4].item() == 13.0
    elif trigger == "tolist":
        assert y.tolist() == ref.tolist()
    elif trigger == "numpy":
        assert (y.cpu().numpy() == ref.numpy()).all()
    elif trigger == "print":
        assert "16." in repr(y)
    elif trigger == "save":
        torch.save(y, tmp_path / "y.pt")
        assert torch.equal(torch.load(tmp_path / "y.pt").cpu(), ref)
    elif trigger == "bool":
        assert bool((y > 15).any())
    elif trigger == "synchronize":
        torch.tpu.synchronize()
    elif trigger == "sync_api":
        sync.synchronize([y])
        assert pending() == 0
        sync.synchronize(wait=True)
    elif trigger == "stream_sync":
        torch.tpu.current_stream().synchronize()
    assert pending() == 0
    assert torch.equal(y.cpu(), ref)


def subenv(tmp_path, **kw):
    """Environment of a child process: its own chips (private lock dir)."""
    locks = tmp_path / "locks"
    locks.mkdir(exist_ok=True)
    return {**os.environ, "TORCH_TPU_LOCK_DIR": str(locks), **kw}


def test_flush_on_size_cap(tmp_path):
    code = textwrap.dedent("""
        import torch, torch_tpu
        from torch_tpu import sync
        x = torch.ones(8, device="tpu")
        for i in range(25):
            x = x + 1
        assert sync.pending_ops() < 10, sync.pending_ops()
        s = torch.tpu._get_cache_stats()
        assert s["flushes"]["cap"] >= 1, s
        assert x.cpu().tolist() == [26.0] * 8
        print("OK")
    """)
    env = subenv(tmp_path, TORCH_TPU_DEFER_AND_FUSE="1", TORCH_TPU_FUSE_MAX_OPS="10")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.stdout.strip().endswith("OK"), r.stderr


def test_flush_on_cross_device_copy(fused):
    if torch.tpu.device_count() < 2:
        pytest.skip("needs two chips")
    x = torch.ones(5, device="tpu:0")
    torch.tpu.synchronize()
    y = x * 7
    assert sync.pending_ops(0) == 1
    z = y.to("tpu:1")
    assert sync.pending_ops(0) == 0
    assert z.cpu().tolist() == [7.0] * 5


def test_index_checking_op_runs_now(fused):
    x = torch.randn(10, device=DEV)
    idx = torch.tensor([0, 3, 12], device=DEV)
    y = x * 2
    with pytest.raises(IndexError):
        torch.index_select(y, 0, idx)
    assert flushes("sync_op") >= 1


def test_env_var_selects_fused(tmp_path):
    r = subprocess.run([sys.executable, "-c",
                        "import torch, torch_tpu; print(torch_tpu.execution_mode.get_eager_mode().name)"],
                       capture_output=True, text=True,
                       env=subenv(tmp_path, TORCH_TPU_DEFER_AND_FUSE="1"), timeout=300)
    assert r.stdout.strip() == "DEFER_AND_FUSE", r.stderr


# ---- aliasing --------------------------------------------------------------


def run_both(fn, *inputs):
    """fn on CPU tensors and on tpu tensors in Fused Eager; compare."""
    cpu_in = [t.clone() for t in inputs]
    ref = fn(*cpu_in)
    tpu_in = [t.to(DEV) for t in inputs]
    torch.tpu.synchronize()
    out = fn(*tpu_in)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    for o, r in zip(outs, refs):
        torch.testing.assert_close(o.cpu(), r)
    for a, b in zip(tpu_in, cpu_in):  # mutated inputs too
        torch.testing.assert_close(a.cpu(), b)


def test_inplace_and_views(fused):
    def fn(x):
        y = x * 2
        v = y[1:3]          # view of a pending result
        v.add_(10)          # mutation through a view
        y.mul_(2)
        t = y.t()           # transposed view of a pending result
        z = t.contiguous() + 1
        x.sub_(1)           # in-place on an input
        return y, z, x.view(-1)[::2] * 5
    run_both(fn, torch.randn(4, 3))


def test_views_of_pending_fuse_without_flush(fused):
    x = torch.randn(8, 6, device=DEV)
    torch.tpu.synchronize()
    torch.tpu._reset_cache_stats()
    y = x * 2
    a = y.t() * 3               # transpose
    b = y[:, 2:5] + 1           # column slice
    c = y.view(2, 4, 6).permute(2, 0, 1) - 1
    d = y[3] * y[5]             # row selects
    e = y.expand(2, 8, 6).sum(0)
    assert pending() == 6, pending()
    assert stats()["flushes"]["alias"] == 0
    xc = x.cpu() * 2
    torch.testing.assert_close(a.cpu(), xc.t() * 3)
    torch.testing.assert_close(b.cpu(), xc[:, 2:5] + 1)
    torch.testing.assert_close(c.cpu(), xc.view(2, 4, 6).permute(2, 0, 1) - 1)
    torch.testing.assert_close(d.cpu(), xc[3] * xc[5])
    torch.testing.assert_close(e.cpu(), xc.expand(2, 8, 6).sum(0))


def test_out_and_copy(fused):
    def fn(x, o):
        torch.add(x, 1, out=o)
        torch.mul(o, 2, out=o)
        w = torch.empty_like(x)
        w.copy_(o)
        o.copy_(x.double().float())
        return w, o
    run_both(fn, torch.randn(5, 4), torch.zeros(5, 4))


def test_partial_overlap_write_flushes(fused):
    def fn(x):
        y = x + 1
        y[::2].mul_(3)          # strided partial write into a pending output
        y[1:].add_(y[:-1].clone())  # overlapping read and write
        return y
    run_both(fn, torch.randn(9))


def test_dead_intermediates_not_written(fused):
    x = torch.randn(1 << 16, device=DEV)
    torch.tpu.synchronize()
    torch.tpu._reset_cache_stats()
    y = x
    for _ in range(10):
        y = (y * 1.01).tanh()   # every intermediate dies immediately
    r = y.cpu()
    s = stats()
    assert s["outputs_written"] == 1, s
    assert s["outputs_elided"] == 19, s
    assert s["bytes_elided"] == 19 * 4 * (1 << 16)
    ref = x.cpu()
    for _ in range(10):
        ref = (ref * 1.01).tanh()
    torch.testing.assert_close(r, ref)


# ---- training ------------------------------------------------------------


def train(mode, steps=4, seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
    data = torch.randn(8, 16)
    target = torch.randn(8, 4)
    model = model.to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, t = data.to(DEV), target.to(DEV)
    losses = []
    with eager_mode(mode):
        torch.tpu.synchronize()
        for _ in range(steps):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), t)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_autograd_adamw_equals_strict():
    l1, p1 = train(EagerMode.DEFER_NEVER)
    l2, p2 = train(EagerMode.DEFER_AND_FUSE)
    torch.testing.assert_close(torch.tensor(l2), torch.tensor(l1), rtol=1e-5, atol=1e-6)
    for a, b in zip(p2, p1):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_loop_detection_one_program_per_step(fused):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 1)).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(8, 16, device=DEV)
    torch.tpu.synchronize()

    def step():
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()

    step()
    torch.tpu.synchronize()          # defines the step
    for _ in range(2):               # warm-up: steps flushed by loop detection
        step()
    torch.tpu.synchronize()
    torch.tpu._reset_cache_stats()
    for _ in range(5):               # no host sync inside the loop
        step()
    torch.tpu.synchronize()
    s = stats()
    assert s["flushes"]["loop"] >= 4, s
    # every step is the same cached program, except the last: the synchronize
    # flushes it while the gradients are still held (outputs), where the
    # others were flushed after zero_grad dropped them
    assert s["misses"] <= 2, s
    assert s["hits"] >= 3, s



def test_loop_flush_waits_for_the_host_to_let_go(fused):
    # a repeated step is flushed at the next device call, not at its last op:
    # t, v and the product the host holds while add_ is recorded are dropped
    # by then, so each program writes w alone (4 outputs if cut at add_)
    w = torch.randn(1024, device=DEV)
    ref = w.cpu()
    torch.tpu.synchronize()

    def step(w):
        t = w * 1.5
        v = t.tanh() - 0.5
        w.mul_(0.5).add_(v * t * 0.1)

    for i in range(3):               # the first defines the step
        step(w)
        step(ref)
        if i == 0:
            torch.tpu.synchronize()
    torch.tpu.synchronize()
    torch.tpu._reset_cache_stats()
    for _ in range(4):
        step(w)
        step(ref)
    torch.tpu.synchronize()
    s = stats()
    assert s["flushes"]["loop"] == 4 and s["programs_run"] == 4, s
    assert s["outputs_written"] == 4, s
    torch.testing.assert_close(w.cpu(), ref)

def _dropout_steps(mode, n):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Dropout(0.3),
                                torch.nn.Linear(32, 1)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 16, device=DEV)
    losses = []
    with eager_mode(mode):
        for i in range(n):
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            losses.append(loss)
            if i == 2:
                torch.tpu.synchronize()
                torch.tpu._reset_cache_stats()
        torch.tpu.synchronize()
        return [l.item() for l in losses], stats()


def test_repeated_unit_inside_a_step_is_not_a_step(fused):
    # a step that repeats a unit (x = f(x) five times into fresh buffers,
    # nothing written in place) is one program per step, not five
    x = torch.randn(4096, device=DEV)
    torch.tpu.synchronize()

    def step():
        y = x
        for _ in range(5):
            y = torch.tanh(y * 1.001 + 0.5) - 0.25
        return y

    out = step()
    torch.tpu.synchronize()          # defines the step
    torch.tpu._reset_cache_stats()
    outs = [step() for _ in range(4)]
    torch.tpu.synchronize()
    s = stats()
    assert s["flushes"]["loop"] == 4, s
    assert s["misses"] + s["hits"] + s["disk_hits"] == 4, s  # a warm disk cache serves the first
    ref = x.cpu()
    for _ in range(5):
        ref = torch.tanh(ref * 1.001 + 0.5) - 0.25
    for o in [out] + outs:
        torch.testing.assert_close(o.cpu(), ref)


def test_dropout_steps_share_one_program():
    # rng seeds/offsets are run-time inputs of the compiled program, so a
    # step with dropout is a cache hit although its random numbers change
    fl, fs = _dropout_steps(EagerMode.DEFER_AND_FUSE, 9)
    sl, ss = _dropout_steps(EagerMode.DEFER_NEVER, 9)
    # (the last step is a second program: see test_loop_detection_one_program_per_step)
    assert fs["flushes"]["loop"] >= 4 and fs["misses"] <= 2 and fs["hits"] >= 3, fs
    assert ss["misses"] == 0, ss     # strict: every one-op program reused
    assert len(set(fl)) == len(fl)   # fresh dropout masks every step
    torch.testing.assert_close(torch.tensor(fl), torch.tensor(sl), rtol=1e-5, atol=1e-6)


def test_strict_uses_the_cache():
    with eager_mode(EagerMode.DEFER_NEVER):
        x = torch.randn(32, device=DEV)
        torch.tpu._reset_cache_stats()
        for i in range(5):
            x = x * (1.0 + i)        # scalar values do not change the program
        torch.tpu.synchronize()
    s = stats()
    assert s["flushes"]["strict"] == 5 and s["hits"] >= 4, s


# ---- the on-disk tier ------------------------------------------------------


DISK_SCRIPT = textwrap.dedent("""
    import torch, torch_tpu, json
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 1)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(8, 16).to("tpu")
    torch.tpu.synchronize()
    torch.tpu._reset_cache_stats()
    for _ in range(3):
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        loss.item()
    print(json.dumps(torch.tpu._get_cache_stats()))
""")


def test_disk_cache_second_process(tmp_path):
    import json
    env = subenv(tmp_path, TORCH_TPU_DEFER_AND_FUSE="1",
                 TORCH_TPU_COMPILATION_CACHE_DIR=str(tmp_path / "cache"))
    os.makedirs(tmp_path / "cache")
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", DISK_SCRIPT], capture_output=True,
                           text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["misses"] > 0 and first["disk_hits"] == 0, first
    assert second["misses"] == 0, second          # zero compiles
    assert second["disk_hits"] == first["misses"], (first, second)
    assert [f for f in os.listdir(tmp_path / "cache") if f != "vtpu_jit"]  # programs
