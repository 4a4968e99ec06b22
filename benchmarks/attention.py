"""Scaled dot-product attention on tpu (the fused kernel: one TPUIR_ATTENTION
node forward, one TPUIR_ATTENTION_GRAD backward) vs PyTorch CPU eager (its
flash kernel), side by side in one process: forward, and forward + backward
(training), with and without the causal mask. Each device runs its rounds
as one block (interleaving them per call measured the other library's
spinning threads). Times per call (tpu: until the result is on the host),
best of --reps rounds; ratios > 1 mean tpu is faster.

    PYTHONPATH=. python3 benchmarks/attention.py [--reps 3] [--steps 10]
"""
import argparse
import time

import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401  (registers the tpu device)
from hostinfo import cpu_model


def case(B, H, T, E, causal, train, dev):
    g = torch.Generator().manual_seed(0)
    q, k, v, go = (torch.randn(B, H, T, E, generator=g) for _ in range(4))
    q, k, v = (t.to(dev).requires_grad_(train) for t in (q, k, v))
    go = go.to(dev)

    def run():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        if train:
            out.backward(go)
            return q.grad.cpu()
        return out.cpu()
    return run


def best(fn, steps, reps):
    fn()
    t = 1e9
    for _ in range(reps):
        for _ in range(steps):
            t0 = time.perf_counter()
            fn()
            t = min(t, time.perf_counter() - t0)
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    print(f"host: {cpu_model()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    B, H, T, E = 8, 8, 256, 64
    for train in (False, True):
        for causal in (False, True):
            flop = 4 * B * H * T * T * E / (2 if causal else 1) * (3.5 if train else 1)
            t = {dev: best(case(B, H, T, E, causal, train, dev), a.steps, a.reps)
                 for dev in ("cpu", "tpu")}
            name = f"[{B},{H},{T},{E}] {'causal' if causal else 'full'} " \
                   f"{'fwd+bwd' if train else 'fwd'}"
            print(f"  {name:32s} torch CPU {t['cpu'] * 1e3:7.2f} ms "
                  f"({flop / t['cpu'] / 1e9:4.0f} GFLOP/s)  tpu {t['tpu'] * 1e3:7.2f} ms "
                  f"({flop / t['tpu'] / 1e9:4.0f} GFLOP/s)  tpu vs CPU {t['cpu'] / t['tpu']:5.2f}x",
                  flush=True)


if __name__ == "__main__":
    main()
