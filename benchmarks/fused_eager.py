"""Fused Eager vs Strict Eager vs PyTorch CPU eager, side by side in one
process: step times and ratios for
  (a) a chain of 20 elementwise ops on 4M elements,
  (b) a GPT-style transformer block (d=512, seq 256, batch 8) forward +
      backward + AdamW,
  (c) an MLP training step.
Usage: PYTHONPATH=. python3 benchmarks/fused_eager.py [--steps N] [--quick]
"""
import argparse
import time

import torch

import torch_tpu  # noqa: F401
from torch_tpu.execution_mode import EagerMode, eager_mode


def chain(x):
    for i in range(5):
        x = x * 1.001
        x = x + 0.5
        x = torch.tanh(x)
        x = x - 0.25
    return x


class Block(torch.nn.Module):
    def __init__(self, d=512, heads=8):
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


def make_train(kind, dev):
    torch.manual_seed(0)
    if kind == "block":
        model = Block()
        x = torch.randn(8, 256, 512)
    else:
        model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                                    torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                    torch.nn.Linear(1024, 10))
        x = torch.randn(256, 512)
    model = model.to(dev)
    x = x.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        opt.zero_grad()
        out = model(x)
        loss = out.square().mean()
        loss.backward()
        opt.step()
        return loss
    return step


def timeit(fn, sync, steps, warmup=3):
    # keep each step's result alive until the next step is recorded, as a
    # caller that uses it would (Fused Eager elides values nobody holds)
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


def run_case(name, make, steps):
    res = {}
    cpu_fn = make("cpu")
    res["cpu"] = timeit(cpu_fn, lambda: None, steps)
    for mode, label in ((EagerMode.DEFER_NEVER, "strict"), (EagerMode.DEFER_AND_FUSE, "fused")):
        with eager_mode(mode):
            fn = make("tpu")
            res[label] = timeit(fn, torch.tpu.synchronize, steps)
    print(f"{name:34s} fused {res['fused']*1e3:8.2f} ms  strict {res['strict']*1e3:8.2f} ms  "
          f"cpu {res['cpu']*1e3:8.2f} ms  | fused/strict speedup {res['strict']/res['fused']:5.2f}x  "
          f"fused vs cpu {res['cpu']/res['fused']:5.2f}x", flush=True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="skip the transformer block")
    a = ap.parse_args()
    torch.tpu._reset_cache_stats()

    def make_chain(dev):
        x = torch.randn(4 * 1024 * 1024).to(dev)
        return lambda: chain(x)

    run_case("(a) 20 elementwise ops, 4M elems", make_chain, a.steps)
    if not a.quick:
        run_case("(b) GPT block d512 s256 b8 +AdamW", lambda d: make_train("block", d), a.steps)
    run_case("(c) MLP training step", lambda d: make_train("mlp", d), a.steps)
    s = torch.tpu._get_cache_stats()
    print("cache:", {k: s[k] for k in ("hits", "disk_hits", "misses", "compile_time_s", "entries")},
          "flushes:", {k: v for k, v in s["flushes"].items() if v})


if __name__ == "__main__":
    main()
