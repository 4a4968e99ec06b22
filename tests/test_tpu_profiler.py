"""torch.tpu.profiler: vTPU program events in torch.profiler traces."""
import json
import os
import subprocess
import sys

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_tpu
from torch_tpu.execution_mode import EagerMode, eager_mode

DEV = torch.device("tpu")


def _trace(tmp_path, prof):
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        return json.load(f)["traceEvents"]


def test_chrome_trace_has_tpu_program_events(tmp_path):
    x = torch.randn(64, 32, device=DEV)
    w = torch.randn(32, 16, device=DEV)
    torch.tpu.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        with eager_mode(EagerMode.DEFER_NEVER):  # one program per op
            y = (x @ w).relu()
            s = y.sum().item()
    assert s >= 0
    ev = _trace(tmp_path, prof)
    tpu = [e for e in ev if e.get("cat") == "tpu_program"]
    cpu = [e for e in ev if e.get("cat") == "cpu_op"]
    assert cpu and tpu
    dots = [e for e in tpu if "dot_general" in e["name"]]
    assert len(dots) == 1
    d = dots[0]
    assert d["args"]["flops"] == 2 * 64 * 32 * 16
    assert d["args"]["bytes"] == (64 * 32 + 32 * 16 + 64 * 16) * 4
    assert d["args"]["ops"] == 1 and d["args"]["flush reason"] == "strict"
    assert d["pid"] == 10000 and d["tid"] == 0 and d["dur"] >= 0
    # on the same clock as the CPU events: the matmul runs after aten::mm is called
    mm = [e for e in cpu if e["name"] in ("aten::mm", "aten::matmul")]
    assert mm and d["ts"] >= min(e["ts"] for e in mm) - 1.0
    assert d["ts"] <= max(e["ts"] + e["dur"] for e in cpu) + 1.0
    names = {(e["name"], e["args"]["name"]) for e in ev if e.get("ph") == "M" and e.get("pid") == 10000}
    assert ("process_name", "tpu:0 (vTPU)") in names and ("thread_name", "stream 0") in names
    assert prof.tpu_events and prof.tpu_events_dropped == 0


def test_fused_program_event_and_no_events_without_tpu_activity(tmp_path):
    x = torch.randn(1000, device=DEV)
    torch.tpu.synchronize()
    with profile(activities=[ProfilerActivity.PrivateUse1]) as prof:
        with eager_mode(EagerMode.DEFER_AND_FUSE):
            z = (x * 2 + 1).exp().sum()
            z.item()
    fused = [e for e in prof.tpu_events if e["ops"] >= 3]
    assert len(fused) == 1, prof.tpu_events
    assert "exp" in fused[0]["name"] and fused[0]["reason"] == "d2h"
    with profile(activities=[ProfilerActivity.CPU]) as cpu_only:
        (x + 1).sum().item()
    assert cpu_only.tpu_events == []
    assert not any(e.get("cat") == "tpu_program" for e in _trace(tmp_path, cpu_only))


def test_tpu_profiler_config(tmp_path):
    cfg = torch.tpu.profiler.TpuProfilerConfig(run_dir=tmp_path, worker_rank="3",
                                               experimental_options={"opt": 1, "s": 'a"b'})
    assert isinstance(cfg, torch.profiler._ExperimentalConfig)
    assert cfg.config_string().endswith('worker_rank:"3",opt:1,s:"a\\"b"')
    x = torch.randn(8, 8, device=DEV)
    with profile(activities=[ProfilerActivity.CPU], experimental_config=cfg) as prof:
        (x @ x).sum().item()
    assert any("dot_general" in e["name"] for e in prof.tpu_events)
    files = list(tmp_path.glob("*_3.tpu_trace.json"))
    assert len(files) == 1
    assert any(e.get("cat") == "tpu_program" for e in json.load(open(files[0]))["traceEvents"])
    off = torch.tpu.profiler.TpuProfilerConfig(device_tracer_level=0)
    with profile(activities=[ProfilerActivity.CPU], experimental_config=off) as prof:
        (x @ x).sum().item()
    assert prof.tpu_events == []
    with pytest.raises(TypeError):
        torch.tpu.profiler.TpuProfilerConfig(worker_rank=3)
    with pytest.raises(ValueError):
        torch.tpu.profiler.TpuProfilerConfig(worker_rank="a:b")
    with pytest.raises(ValueError):
        torch.tpu.profiler.TpuProfilerConfig(device_tracer_level=5)


def test_profile_cli_prints_top_programs(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import torch\nx = torch.randn(128, 128, device='tpu')\n"
                      "for _ in range(3):\n    y = (x @ x).sum().item()\nprint('done')\n")
    env = dict(os.environ, TPU_VISIBLE_CHIPS="3", TORCH_TPU_DEFER_AND_FUSE="0")
    r = subprocess.run([sys.executable, "-m", "torch_tpu.profile", str(script)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "done" in r.stdout
    rows = [ln for ln in r.stderr.splitlines() if ln.startswith("dot_general ")]
    assert rows and rows[0].split()[1] == "3", r.stderr  # 3 calls of the matmul program
    assert "programs," in r.stderr


def test_executor_profile_names_steps():
    """torch.tpu._executor_profile: the vTPU's time per step inside programs
    (a dot with its fused epilogue, a fused region), off outside the block."""
    x = torch.randn(64, 32, device=DEV)
    w = torch.randn(32, 16, device=DEV)
    with eager_mode(EagerMode.DEFER_AND_FUSE):
        with torch.tpu._executor_profile() as prof:
            y = ((x @ w) * 2 + 1).relu()
            z = (x.exp() - 1).sum(1)
            torch.tpu.synchronize()
        (x + 1).sum().item()
    labels = {label: (n, s) for label, n, s in prof.table}
    assert any(lab.startswith("dot") and "float32[64,16] k=32" in lab for lab in labels), labels
    assert any(lab.startswith("region+reduce") and "exponential" in lab for lab in labels), labels
    assert labels["(plan runs)"][0] >= 1 and all(s >= 0 for _, s in labels.values())
    assert "report" in dir(prof) and "(plan runs)" in prof.report()
    assert torch_tpu._C._vtpu_profile_read(False) == []  # off after the block
    torch.testing.assert_close(y.cpu(), ((x.cpu() @ w.cpu()) * 2 + 1).relu(), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(z.cpu(), (x.cpu().exp() - 1).sum(1))
