"""Native kernels of hot elementwise programs on the vTPU (runtime
exec/vtpu/jit.c): a Fused Eager training step gives the same bits with them
as without, the kernels are compiled once and reused from the cache
directory by a second process, and a missing compiler leaves the tile
engine in charge (counted, same results)."""
import json
import os
import subprocess
import sys
import textwrap

import torch

import torch_tpu  # noqa: F401

SCRIPT = textwrap.dedent("""
    import json, torch, torch_tpu
    from torch_tpu.execution_mode import EagerMode, eager_mode
    torch.manual_seed(0)
    def model():
        return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                   torch.nn.LayerNorm(128), torch.nn.Linear(128, 10))
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    out = {}
    for dev in ("cpu", "tpu"):
        torch.manual_seed(1)
        m = model().to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2, foreach=True)
        losses = []
        with eager_mode(EagerMode.DEFER_AND_FUSE):
            for _ in range(4):
                loss = torch.nn.functional.cross_entropy(m(x.to(dev)), y.to(dev))
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses.append(loss.item())
        out[dev] = losses
        if dev == "tpu":
            out["params"] = [p.detach().cpu().numpy().tobytes().hex() for p in m.parameters()]
    out["stats"] = torch.tpu._get_cache_stats()["vtpu_jit"]
    print(json.dumps(out))
""")


def _run(tmp_path, **env):
    locks = tmp_path / "locks"
    locks.mkdir(exist_ok=True)
    e = {**os.environ, "TORCH_TPU_LOCK_DIR": str(locks),
         "TORCH_TPU_COMPILATION_CACHE_DIR": str(tmp_path / "cache"), **env}
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                       env=e, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_native_kernels_same_bits_and_disk_reuse(tmp_path):
    off = _run(tmp_path, TORCH_TPU_VTPU_JIT="0")
    on = _run(tmp_path, TORCH_TPU_VTPU_JIT="sync", TORCH_TPU_VTPU_JIT_HOT="1")
    assert off["stats"]["compiles"] == 0 and off["stats"]["bound"] == 0, off["stats"]
    s = on["stats"]
    assert s["compiles"] > 0 and s["failures"] == 0 and s["bound"] > 0, s
    assert on["params"] == off["params"]          # bit for bit
    assert on["tpu"] == off["tpu"]
    torch.testing.assert_close(torch.tensor(on["tpu"]), torch.tensor(on["cpu"]),
                               rtol=2e-2, atol=2e-3)  # DEFAULT precision matmuls
    kernels = sorted(os.listdir(tmp_path / "cache" / "vtpu_jit"))
    assert sum(f.endswith(".so") for f in kernels) == s["compiles"], kernels
    # a second process binds them from the directory: no compile
    again = _run(tmp_path, TORCH_TPU_VTPU_JIT="1", TORCH_TPU_VTPU_JIT_HOT="1")
    a = again["stats"]
    assert a["compiles"] == 0 and a["disk_loads"] == s["compiles"] and a["bound"] > 0, a
    assert again["params"] == off["params"]


def test_no_compiler_stays_on_the_engine(tmp_path):
    off = _run(tmp_path, TORCH_TPU_VTPU_JIT="0")
    r = _run(tmp_path, TORCH_TPU_VTPU_JIT="sync", TORCH_TPU_VTPU_JIT_HOT="1",
             CC="/nonexistent/cc")
    s = r["stats"]
    assert s["failures"] > 0 and s["compiles"] == 0 and s["bound"] == 0, s
    assert r["params"] == off["params"]


def test_stats_in_cache_stats():
    s = torch.tpu._get_cache_stats()["vtpu_jit"]
    assert set(s) == {"compiles", "disk_loads", "failures", "compile_time_s", "bound",
                      "pending"}
    torch_tpu._C._vtpu_jit_wait()  # returns when nothing is queued
    assert torch.tpu._get_cache_stats()["vtpu_jit"]["pending"] == 0
