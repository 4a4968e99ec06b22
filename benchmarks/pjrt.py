"""PJRT executor (XLA via a PJRT plugin) vs the vTPU vs PyTorch CPU eager,
side by side in one process (the executor is switched between cases with
torch_tpu.pjrt.set_executor; compiled programs are cached per executor):

  (a) per-op overhead of Strict Eager: a small add (64 elements) launched
      and synchronised, PJRT vs vTPU (vs the same op in PyTorch CPU eager);
  (b) a GPT-2-style training step (2 of fused_eager.py's GPT blocks at
      d=256, 4 heads, seq 128, batch 4, vocab 2048, AdamW) in Strict Eager,
      Fused Eager and torch.compile(backend="tpu") on PJRT vs vTPU, with
      ratios vs PyTorch CPU eager. Steps are timed after warm-up, so
      compiles are excluded (counted separately);
  (c) a fresh process's first Fused Eager step on PJRT,
      cold (empty TORCH_TPU_COMPILATION_CACHE_DIR) vs warm (executables
      deserialized from it): first-step time and XLA compiles; and the
      steady step with the XLA:CPU zero-copy/donation path vs every
      program copying in and out (TORCH_TPU_PJRT_COPY=1).

Usage: PYTHONPATH=. python3 benchmarks/pjrt.py [--steps N] [--ops N]
       [--no-strict] [--no-fresh]
(uses TORCH_TPU_PJRT_PLUGIN, else the installed plugin: libtpu, CUDA,
XLA:CPU in that order).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import torch_tpu
from torch_tpu.execution_mode import EagerMode, eager_mode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fused_eager import Block  # noqa: E402  the Fused Eager benchmark's GPT block

VOCAB, D, HEADS, LAYERS, SEQ, BATCH = 2048, 256, 4, 2, 128, 4


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, D)
        self.pos = torch.nn.Embedding(SEQ, D)
        self.blocks = torch.nn.ModuleList(Block(D, HEADS) for _ in range(LAYERS))
        self.ln = torch.nn.LayerNorm(D)
        self.head = torch.nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def make_gpt_step(dev, compiled=False):
    torch.manual_seed(0)
    model = GPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g).to(dev)
    tgt = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g).to(dev)

    def fwd_bwd():
        logits = model(idx)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))
        loss.backward()
        return loss

    fb, st = fwd_bwd, opt.step
    if compiled:
        fb, st = torch.compile(fwd_bwd, backend="tpu"), torch.compile(opt.step, backend="tpu")

    def step():
        loss = fb()
        st()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def timeit(fn, sync, steps, warmup=2):
    """Median seconds per step (each step synchronised), after warm-up."""
    out = None
    for _ in range(warmup):
        out = fn()
    sync()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t0)
    del out
    return statistics.median(times)


def per_op(n):
    a = torch.randn(64)
    b = torch.randn(64)
    cpu = timeit(lambda: a + b, lambda: None, n, warmup=10)
    res = {"cpu": cpu}
    for ex in ("vtpu", "pjrt"):
        torch_tpu.pjrt.set_executor(ex)
        with eager_mode(EagerMode.DEFER_NEVER):
            x, y = a.to("tpu"), b.to("tpu")
            res[ex] = timeit(lambda: x + y, torch.tpu.synchronize, n, warmup=10)
    print(f"(a) Strict per-op (add, 64 elems)  pjrt {res['pjrt']*1e6:8.1f} us  "
          f"vtpu {res['vtpu']*1e6:8.1f} us  cpu {res['cpu']*1e6:6.1f} us  | "
          f"pjrt/vtpu {res['pjrt']/res['vtpu']:5.2f}x", flush=True)
    return res


KINDS = (("strict", EagerMode.DEFER_NEVER, False), ("fused", EagerMode.DEFER_AND_FUSE, False),
         ("compiled", None, True))


def gpt(steps, strict=True):
    cpu = timeit(make_gpt_step("cpu"), lambda: None, steps)
    nt = torch.get_num_threads()
    torch.set_num_threads(1)  # a loaded host hurts multi-threaded CPU eager most: both shown
    cpu1 = timeit(make_gpt_step("cpu"), lambda: None, steps)
    torch.set_num_threads(nt)
    print(f"(b) GPT-2-ish training step (ms; x = best PyTorch CPU eager time / this time)\n"
          f"    PyTorch CPU eager {cpu*1e3:8.1f} ms ({nt} threads; 1 thread: {cpu1*1e3:.1f} ms)",
          flush=True)
    cpu = min(cpu, cpu1)
    res = {"cpu": cpu}
    for kind, mode, compiled in KINDS:
        if kind == "strict" and not strict:
            continue
        row = {}
        for ex in ("vtpu", "pjrt"):
            torch_tpu.pjrt.set_executor(ex)
            torch._dynamo.reset()
            with eager_mode(mode if mode is not None else EagerMode.DEFER_AND_FUSE):
                fn = make_gpt_step("tpu", compiled)
                s0 = torch_tpu.pjrt.stats()
                row[ex] = timeit(fn, torch.tpu.synchronize, steps)
                loss = fn().item()
                s1 = torch_tpu.pjrt.stats()
            row[ex + "_loss"] = loss
            if ex == "pjrt":
                row["compiles"] = s1["compiles"] - s0["compiles"]
                row["compile_s"] = s1["compile_time_s"] - s0["compile_time_s"]
        res[kind] = row
        print(f"    {kind:9s} vtpu {row['vtpu']*1e3:8.1f} ms ({cpu/row['vtpu']:5.2f}x)  "
              f"pjrt {row['pjrt']*1e3:8.1f} ms ({cpu/row['pjrt']:5.2f}x)  "
              f"pjrt/vtpu time {row['pjrt']/row['vtpu']:5.2f}x  | loss vtpu "
              f"{row['vtpu_loss']:.4f} pjrt {row['pjrt_loss']:.4f}  "
              f"(XLA compiles {row['compiles']}, {row['compile_s']:.1f} s)", flush=True)
    return res


CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch, torch_tpu
from torch_tpu.execution_mode import EagerMode, eager_mode
sys.path.insert(0, {bench_dir!r})
import pjrt as b
t1 = time.perf_counter()
with eager_mode(EagerMode.DEFER_AND_FUSE):
    fn = b.make_gpt_step("tpu", {compiled!r})
    t2 = time.perf_counter()
    fn().item()
    first = time.perf_counter() - t2
    steady = b.timeit(fn, torch.tpu.synchronize, {steps!r}, warmup=1)
s = torch.tpu._get_cache_stats()["pjrt"]
print("CHILD", json.dumps(dict(first=first, imp=t1 - t0, steady=steady, **s)))
"""


def fresh(cache_dir, steps, compiled=False, copy=False):
    env = dict(os.environ, TORCH_TPU_COMPILATION_CACHE_DIR=cache_dir, TORCH_TPU_BACKEND="pjrt",
               TPU_VISIBLE_CHIPS="1", TORCH_TPU_PJRT_COPY="1" if copy else "0")
    code = CHILD.format(bench_dir=os.path.dirname(os.path.abspath(__file__)), steps=steps,
                        compiled=compiled)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-3000:])
    return json.loads([x for x in r.stdout.splitlines() if x.startswith("CHILD")][-1][6:])


def fresh_processes(steps):
    print("(c) fresh process on PJRT, Fused Eager GPT step (TORCH_TPU_COMPILATION_CACHE_DIR)",
          flush=True)
    with tempfile.TemporaryDirectory() as d:
        for label, kw in (("cold", {}), ("warm", {}), ("warm, copy in/out", {"copy": True}),
                          ("warm, copy in/out again", {"copy": True})):
            r = fresh(d, steps, **kw)
            mb = (r["bytes_h2d"] + r["bytes_d2h"]) / 2**20
            print(f"    {label:24s} first step {r['first']:6.2f} s  XLA compiles "
                  f"{r['compiles']:3d}  executables from disk {r['disk_loads']:3d}  "
                  f"steady step {r['steady']*1e3:7.1f} ms  plugin copies {mb:7.1f} MiB  "
                  f"(import {r['imp']:.1f} s)", flush=True)


def cpu_model():
    name, flags = "?", set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and name == "?":
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = [f for f in ("avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{name} ({os.cpu_count()} CPUs; {', '.join(isa) or 'no AVX-512'})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--ops", type=int, default=300)
    ap.add_argument("--no-strict", action="store_true")
    ap.add_argument("--no-fresh", action="store_true")
    a = ap.parse_args()
    torch_tpu.pjrt.set_executor("pjrt")
    print("host CPU:", cpu_model())
    print("PJRT device:", torch.tpu.get_device_name())
    per_op(a.ops)
    gpt(a.steps, strict=not a.no_strict)
    torch_tpu.pjrt.set_executor("vtpu")
    print("pjrt stats:", torch_tpu.pjrt.stats(), flush=True)
    if not a.no_fresh:
        fresh_processes(a.steps)


if __name__ == "__main__":
    main()
