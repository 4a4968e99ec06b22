"""Single ops, Strict Eager on tpu vs PyTorch CPU eager, side by side in one
process: time per call (tpu: until torch.tpu.synchronize()) and the ratio
tpu/torch (> 1: tpu slower). A map of where the vTPU engine trails PyTorch's
CPU kernels: elementwise, reductions, normalisations, data movement
(cat, transpose, index_select, embedding), scans, sorting, random numbers,
pooling and resampling, on ~1M-element operands. The geometric mean of the
ratios closes the table.

    PYTHONPATH=. python3 benchmarks/ops.py                # every op
    PYTHONPATH=. python3 benchmarks/ops.py cat pool       # ops whose name contains a word

Each figure is the best of --reps rounds of --inner calls, torch and tpu
alternating (the machine is shared and noisy), after the vTPU's native
kernels for the op are built (a compile in the background would take a core).
"""
import argparse
import math
import sys
import time

import torch
import torch.nn.functional as F

import torch_tpu  # registers the tpu device
from hostinfo import cpu_model


def cases():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(1024, 1024, generator=g), torch.randn(1024, 1024, generator=g)
    x3 = torch.randn(16, 256, 256, generator=g)
    img = torch.randn(4, 16, 128, 128, generator=g)
    m = torch.rand(1024, 1024, generator=g) > 0.5
    idx = torch.randint(0, 1024, (4096,), generator=g)
    gidx = torch.randint(0, 1024, (1024, 1024), generator=g)
    emb, tok = torch.randn(32000, 512, generator=g), torch.randint(0, 32000, (8, 256), generator=g)
    logits, lab = torch.randn(1024, 1000, generator=g), torch.randint(0, 1000, (1024,), generator=g)
    qkv = torch.randn(2, 8, 256, 64, generator=g)
    return [
        ("add", lambda a, b: a + b, (x, y)),
        ("mul scalar", lambda a: a * 1.5, (x,)),
        ("relu", F.relu, (x,)),
        ("clamp", lambda a: a.clamp(-0.5, 0.5), (x,)),
        ("exp", torch.exp, (x,)),
        ("tanh", torch.tanh, (x,)),
        ("gelu", F.gelu, (x,)),
        ("silu", F.silu, (x,)),
        ("where", torch.where, (m, x, y)),
        ("sum all", lambda a: a.sum(), (x,)),
        ("sum -1", lambda a: a.sum(-1), (x,)),
        ("sum 0", lambda a: a.sum(0), (x,)),
        ("max -1", lambda a: a.max(-1).values, (x,)),
        ("argmax -1", lambda a: a.argmax(-1), (x,)),
        ("var -1", lambda a: a.var(-1), (x,)),
        ("softmax -1", lambda a: a.softmax(-1), (x3,)),
        ("layer_norm", lambda a: F.layer_norm(a, (1024,)), (x,)),
        ("group_norm", lambda a: F.group_norm(a, 8), (img,)),
        ("cross_entropy", F.cross_entropy, (logits, lab)),
        ("cumsum -1", lambda a: a.cumsum(-1), (x,)),
        ("transpose contiguous", lambda a: a.t().contiguous(), (x,)),
        ("cat 0", lambda a, b: torch.cat([a, b], 0), (x, y)),
        ("cat 1", lambda a, b: torch.cat([a, b], 1), (x, y)),
        ("stack", lambda a, b: torch.stack([a, b]), (x, y)),
        ("index_select 0", lambda a, i: a.index_select(0, i), (x, idx)),
        ("gather 1", lambda a, i: a.gather(1, i), (x, gidx)),
        ("embedding", lambda w, t: F.embedding(t, w), (emb, tok)),
        ("masked_fill", lambda a, k: a.masked_fill(k, 0.0), (x, m)),
        ("bool index a[m]", lambda a, k: a[k], (x, m)),
        ("nonzero", torch.nonzero, (m,)),
        ("topk 10", lambda a: a.topk(10, -1).values, (x,)),
        ("sort -1", lambda a: a.sort(-1).values, (x,)),
        ("flip", lambda a: a.flip(-1), (x,)),
        ("randn", lambda a: torch.randn(1024, 1024, device=a.device), (x,)),
        ("dropout", lambda a: F.dropout(a, 0.1, True), (x,)),
        ("max_pool2d", lambda a: F.max_pool2d(a, 2), (img,)),
        ("avg_pool2d", lambda a: F.avg_pool2d(a, 2), (img,)),
        ("interpolate nearest", lambda a: F.interpolate(a, scale_factor=2, mode="nearest"), (img,)),
        ("bmm 16x256^3", lambda a: a @ a, (x3,)),
        ("sdpa causal", lambda q: F.scaled_dot_product_attention(q, q, q, is_causal=True), (qkv,)),
    ]


def best(fn, args, sync, reps, inner):
    for _ in range(3):  # hot: the vTPU's native kernels are built for it
        fn(*args)
    sync()
    if sync is torch.tpu.synchronize:
        torch_tpu._C._vtpu_jit_wait()  # steady state, no compiler running beside
    t_best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(inner):
            fn(*args)
        sync()
        t_best = min(t_best, (time.perf_counter() - t) / inner)
    return t_best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("only", nargs="*", help="run the ops whose name contains one of these")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--inner", type=int, default=5)
    a = ap.parse_args()
    print(f"Strict Eager ops vs PyTorch CPU eager ({torch.get_num_threads()} threads), "
          f"best of {a.reps} x {a.inner}; CPU: {cpu_model()}")
    print(f"{'op':>22} | {'torch ms':>9} | {'tpu ms':>9} | tpu/torch")
    logs = []
    for name, fn, args in cases():
        if a.only and not any(w in name for w in a.only):
            continue
        dargs = tuple(t.to("tpu") for t in args)
        tc = td = float("inf")
        for _ in range(2):  # torch and tpu alternating
            tc = min(tc, best(fn, args, lambda: None, a.reps, a.inner))
            td = min(td, best(fn, dargs, torch.tpu.synchronize, a.reps, a.inner))
        logs.append(math.log(td / tc))
        print(f"{name:>22} | {tc * 1e3:9.3f} | {td * 1e3:9.3f} | {td / tc:6.2f}", flush=True)
    if logs:
        print(f"{'geometric mean':>22} | {'':>9} | {'':>9} | {math.exp(sum(logs) / len(logs)):6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
