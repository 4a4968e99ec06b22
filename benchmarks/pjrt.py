"""PJRT executor (XLA via a PJRT plugin) vs the vTPU vs PyTorch CPU eager,
side by side in one process (the executor is switched between cases with
torch_tpu.pjrt.set_executor; compiled programs are cached per executor):

  (a) per-op overhead of Strict Eager: a small add (64 elements) launched
      and synchronised, PJRT vs vTPU (vs the same op in PyTorch CPU eager);
  (b) a GPT-2-style training step (2 blocks d=256, 4 heads, seq 128,
      batch 4, vocab 2048, AdamW) in Fused Eager on PJRT vs vTPU vs
      PyTorch CPU eager. Steps are timed after warm-up, so compiles (XLA:CPU
      ~0.1-0.5 s per program) are excluded and reported separately.

Memory model of the PJRT executor today: tensors stay in runtime-owned host
memory and every program copies its inputs to the PJRT device and its
outputs back (see README), so (b) includes those copies.

Usage: PYTHONPATH=. python3 benchmarks/pjrt.py [--steps N] [--ops N]
(uses TORCH_TPU_PJRT_PLUGIN, else the installed plugin: libtpu, CUDA,
XLA:CPU in that order).
"""
import argparse
import time

import torch

import torch_tpu
from torch_tpu.execution_mode import EagerMode, eager_mode


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.h = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.h, C // self.h).transpose(1, 2)
        k = k.view(B, T, self.h, C // self.h).transpose(1, 2)
        v = v.view(B, T, self.h, C // self.h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (C // self.h) ** 0.5)
        mask = torch.ones(T, T, device=x.device, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


class GPT(torch.nn.Module):
    def __init__(self, vocab=2048, d=256, heads=4, layers=2, seq=128):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(seq, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def make_gpt_step(dev):
    torch.manual_seed(0)
    model = GPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 2048, (4, 128), generator=g).to(dev)
    tgt = torch.randint(0, 2048, (4, 128), generator=g).to(dev)

    def step():
        opt.zero_grad()
        logits = model(idx)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))
        loss.backward()
        opt.step()
        return loss
    return step


def timeit(fn, sync, steps, warmup=2):
    out = None
    for _ in range(warmup):
        out = fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        out = fn()
    sync()
    del out
    return (time.perf_counter() - t0) / steps


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


def gpt(steps):
    res = {}
    res["cpu"] = timeit(make_gpt_step("cpu"), lambda: None, steps)
    losses = {}
    for ex in ("vtpu", "pjrt"):
        torch_tpu.pjrt.set_executor(ex)
        with eager_mode(EagerMode.DEFER_AND_FUSE):
            fn = make_gpt_step("tpu")
            s0 = torch_tpu.pjrt.stats()
            res[ex] = timeit(fn, torch.tpu.synchronize, steps)
            losses[ex] = fn().item()
            s1 = torch_tpu.pjrt.stats()
        if ex == "pjrt":
            res["pjrt_compiles"] = s1["compiles"] - s0["compiles"]
            res["pjrt_compile_s"] = s1["compile_time_s"] - s0["compile_time_s"]
    print(f"(b) GPT-2-ish step, Fused Eager     pjrt {res['pjrt']*1e3:8.1f} ms  "
          f"vtpu {res['vtpu']*1e3:8.1f} ms  cpu {res['cpu']*1e3:8.1f} ms  | "
          f"pjrt/vtpu {res['pjrt']/res['vtpu']:5.2f}x  pjrt vs cpu {res['cpu']/res['pjrt']:5.2f}x  "
          f"(PJRT compiles {res['pjrt_compiles']}, {res['pjrt_compile_s']:.1f} s)", flush=True)
    print(f"    loss after {steps + 3} steps: pjrt {losses['pjrt']:.4f} vtpu {losses['vtpu']:.4f}")
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--ops", type=int, default=300)
    a = ap.parse_args()
    torch_tpu.pjrt.set_executor("pjrt")
    print("PJRT device:", torch.tpu.get_device_name())
    per_op(a.ops)
    gpt(a.steps)
    torch_tpu.pjrt.set_executor("vtpu")
    print("pjrt stats:", torch_tpu.pjrt.stats())


if __name__ == "__main__":
    main()
