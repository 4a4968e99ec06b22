"""The tpu device: placement, copies, printing, serialization, torch.tpu API,
memory statistics, OOM, streams/events, the per-chip process lock."""
import io
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import DEV, assert_close


def test_device_basics():
    assert torch.tpu.is_available()
    assert torch.tpu.device_count() >= 1
    x = torch.arange(6.0).reshape(2, 3)
    t = x.to("tpu")
    assert t.device == torch.device("tpu", 0) and t.is_tpu and not x.is_tpu
    assert t.tpu().device.type == "tpu"
    assert torch.equal(t.cpu(), x)
    assert torch.device("tpu:1").index == 1
    assert "vTPU" in torch.tpu.get_device_name()
    assert torch.tpu.get_device_properties(0).total_memory == torch.tpu.mem_get_info()[1]


def test_second_device_and_cross_device_copy():
    if torch.tpu.device_count() < 2:
        pytest.skip("needs 2 visible chips")
    a = torch.randn(4, 5).to("tpu:0")
    b = a.to("tpu:1")
    assert b.device == torch.device("tpu:1")
    assert torch.equal(b.cpu(), a.cpu())
    with torch.tpu.device(1):
        assert torch.tpu.current_device() == 1
        c = torch.ones(3, device="tpu")
        assert c.device.index == 1
    assert torch.tpu.current_device() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   torch.int64, torch.int32, torch.int16, torch.int8,
                                   torch.uint8, torch.bool])
def test_roundtrip_dtypes(dtype):
    x = (torch.randn(3, 4) * 10).to(dtype)
    assert torch.equal(x.to("tpu").cpu(), x)


def test_noncontiguous_copies():
    x = torch.randn(4, 6, 5)
    t = x.to("tpu")
    assert torch.equal(t.transpose(0, 2).cpu(), x.transpose(0, 2))
    assert torch.equal(t[:, ::2, 1:4].cpu(), x[:, ::2, 1:4])
    assert torch.equal(x.permute(2, 0, 1).to("tpu").cpu(), x.permute(2, 0, 1))
    assert torch.equal(t.transpose(0, 1).contiguous().cpu(), x.transpose(0, 1).contiguous())
    y = torch.zeros(4, 6, 5, device="tpu")
    y[:, 1] = t[:, 2]
    ref = torch.zeros(4, 6, 5)
    ref[:, 1] = x[:, 2]
    assert torch.equal(y.cpu(), ref)
    assert torch.equal(t.expand(2, 4, 6, 5).cpu(), x.expand(2, 4, 6, 5))


def test_host_copy_does_not_alias_source():
    x = torch.ones(1000)
    t = x.to("tpu")
    x.fill_(5)  # overwrite the source right after .to()
    assert torch.equal(t.cpu(), torch.ones(1000))


def test_item_tolist_print():
    t = torch.tensor([[1.5, -2.0], [3.0, 4.25]], device="tpu")
    assert t[1, 1].item() == 4.25
    assert t.tolist() == [[1.5, -2.0], [3.0, 4.25]]
    s = str(t)
    assert "device='tpu:0'" in s and "4.2500" in s


def test_save_load_tensor_and_state_dict(tmp_path):
    t = torch.randn(3, 4, device="tpu")
    model = torch.nn.Linear(4, 2).to("tpu")
    buf = io.BytesIO()
    torch.save({"t": t, "sd": model.state_dict()}, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded["t"].device.type == "tpu"
    assert torch.equal(loaded["t"].cpu(), t.cpu())
    for k, v in model.state_dict().items():
        assert loaded["sd"][k].is_tpu and torch.equal(loaded["sd"][k].cpu(), v.cpu())
    buf.seek(0)
    cpu = torch.load(buf, map_location="cpu")
    assert cpu["t"].device.type == "cpu" and torch.equal(cpu["t"], t.cpu())
    m2 = torch.nn.Linear(4, 2).to("tpu")
    m2.load_state_dict(loaded["sd"])
    assert torch.equal(m2.weight.cpu(), model.weight.cpu())


def test_memory_stats_track_allocations():
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    t = torch.empty(1 << 20, device="tpu")  # 4 MiB
    assert torch.tpu.memory_allocated() >= base + (4 << 20)
    assert torch.tpu.max_memory_allocated() >= torch.tpu.memory_allocated()
    assert torch.tpu.memory_reserved() >= torch.tpu.memory_allocated()
    del t
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() == base
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == base
    torch.tpu.empty_cache()
    free, total = torch.tpu.mem_get_info()
    assert 0 < free <= total
    assert torch.accelerator.memory_allocated() == base if hasattr(torch.accelerator, "memory_allocated") else True


def test_oom_raises_and_recovers():
    keep = torch.ones(1000, device="tpu")
    _, total = torch.tpu.mem_get_info()
    with pytest.raises(torch.OutOfMemoryError) as ei:
        torch.empty(total // 4 + (1 << 30), dtype=torch.float32, device="tpu")
    msg = str(ei.value)
    assert "Tried to allocate" in msg and "capacity" in msg and "free" in msg
    assert torch.equal(keep.cpu(), torch.ones(1000))  # existing tensors survive
    after = torch.ones(10, device="tpu") * 2  # process carries on
    assert after.sum().item() == 20


def test_accelerator_api():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator().type == "tpu"
    assert torch.accelerator.device_count() == torch.tpu.device_count()
    torch.accelerator.synchronize()


def test_streams_and_events():
    s = torch.tpu.Stream()
    assert s.device.type == "tpu"
    x = torch.randn(256, 256, device="tpu")
    s.wait_stream(torch.tpu.current_stream())  # x is produced on the default stream
    with torch.tpu.stream(s):
        assert torch.tpu.current_stream().stream_id == s.stream_id
        y = x @ x
        e = torch.tpu.Event(enable_timing=True)
        e.record()
    e.synchronize()
    assert e.query()
    s.synchronize()
    assert s.query()
    assert torch.tpu.current_stream().stream_id == 0
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    start.record()
    z = y + 1
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0
    torch.tpu.current_stream().wait_event(end)
    assert_close(z, (x.cpu() @ x.cpu()) + 1, rtol=1e-4, atol=1e-3)


def _run(code, env=None, timeout=120):
    """Run code in a fresh Python. It gets its own lock dir (unless env gives
    one): this process may hold chip 0 already."""
    import tempfile
    full_env = dict(os.environ)
    full_env["TORCH_TPU_LOCK_DIR"] = tempfile.mkdtemp(prefix="torch_tpu_sub_")
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=full_env, timeout=timeout)


def test_device_lock_across_processes(tmp_path):
    env = {"TORCH_TPU_LOCK_DIR": str(tmp_path), "TPU_VISIBLE_CHIPS": "3"}
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys, torch, torch_tpu
            t = torch.ones(4, device="tpu")
            print("ready", flush=True)
            sys.stdin.readline()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, **env})
    try:
        assert holder.stdout.readline().strip() == "ready"
        r = _run("""
            import torch, torch_tpu
            try:
                torch.ones(4, device="tpu")
            except RuntimeError as e:
                print("ERR", e)
        """, env)
        assert "ERR" in r.stdout, r.stdout + r.stderr
        assert str(holder.pid) in r.stdout and "chip 3" in r.stdout
        # another chip is free
        r2 = _run("import torch, torch_tpu; print(torch.ones(2, device='tpu').sum().item())",
                  {"TORCH_TPU_LOCK_DIR": str(tmp_path), "TPU_VISIBLE_CHIPS": "2"})
        assert r2.stdout.strip() == "2.0", r2.stderr
    finally:
        holder.kill()  # a crash-like exit frees the lock
        holder.wait()
    r3 = _run("import torch, torch_tpu; print(torch.ones(2, device='tpu').sum().item())", env)
    assert r3.stdout.strip() == "2.0", r3.stderr


def test_autoload_via_import_torch():
    r = _run("import torch; print(torch.ones(2, device='tpu').device)")
    assert r.stdout.strip() == "tpu:0", r.stderr


def test_visible_chips_env():
    r = _run("import torch; print(torch.tpu.device_count())", {"TPU_VISIBLE_CHIPS": "1,2"})
    assert r.stdout.strip() == "2", r.stderr
    env = {k: v for k, v in os.environ.items() if k != "TPU_VISIBLE_CHIPS"}
    env["TORCH_TPU_VTPU_CHIPS"] = "8"
    r = subprocess.run([sys.executable, "-c", "import torch; print(torch.tpu.device_count())"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.stdout.strip() == "8", r.stderr
    # like CUDA_VISIBLE_DEVICES="", an empty list hides every chip
    r = _run("import torch; print(torch.tpu.device_count(), torch.tpu.is_available())",
             {"TPU_VISIBLE_CHIPS": ""})
    assert r.stdout.strip() == "0 False", r.stderr


def test_module_to_keeps_parameter_identity_and_ties():
    emb = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = emb.weight  # tied, as in language models
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    p = emb.weight
    model.to("tpu")
    assert model["emb"].weight is model["head"].weight and model["emb"].weight is p
    assert p.is_tpu and p.requires_grad
    out = model["head"](model["emb"](torch.tensor([1, 2], device="tpu")))
    out.sum().backward()
    assert p.grad is not None and p.grad.is_tpu
