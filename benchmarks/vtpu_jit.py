"""vTPU native kernels (TORCH_TPU_VTPU_JIT): training steps with and without
them, in one process, interleaved.

The host is noisy (a 2-core VM whose speed moves by tens of percent from one
second to the next), so each round runs a few steps of every configuration
back to back and the figure is the best round: PyTorch CPU eager, Strict
Eager, Fused Eager with the tile engine only, Fused Eager with native
kernels. Ratios are printed against the same round's neighbours.

    PYTHONPATH=. python3 benchmarks/vtpu_jit.py [--rounds 6] [--only block,encoder,mlp] [--profile 30]
"""
import argparse
import os
import sys

import torch

import torch_tpu
from torch_tpu.execution_mode import EagerMode, eager_mode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fused_eager import make_train, timeit  # noqa: E402


def case(kind, rounds, n, profile=0):
    cfg = {}
    cfg["cpu"] = (make_train(kind, "cpu"), None, None)
    for label, mode, jit in (("strict", EagerMode.DEFER_NEVER, 1),
                             ("fused, tile engine", EagerMode.DEFER_AND_FUSE, 0),
                             ("fused, native kernels", EagerMode.DEFER_AND_FUSE, 1)):
        with eager_mode(mode):
            cfg[label] = (make_train(kind, "tpu"), mode, jit)
    best = {}
    for r in range(rounds + 1):  # round 0 warms up (and compiles the kernels)
        for label, (fn, mode, jit) in cfg.items():
            if mode is None:
                t = timeit(fn, lambda: None, n, warmup=0)
            else:  # (timeit waits for pending kernels and runs one step first)
                torch_tpu._C._vtpu_jit_configure(jit, 1)
                with eager_mode(mode):
                    t = timeit(fn, torch.tpu.synchronize, n, warmup=2 if r == 0 else 0)
            if r:
                best[label] = min(best.get(label, t), t)
    torch_tpu._C._vtpu_jit_configure(1, 3)
    if profile:
        for label in ("strict", "fused, native kernels"):
            fn, mode, _ = cfg[label]
            with eager_mode(mode), torch.tpu._executor_profile() as prof:
                t = timeit(fn, torch.tpu.synchronize, n, warmup=0)
            steps = n + 1  # (timeit runs one step before its timed ones)
            tot = {}
            for lab, c, sec in prof.table:
                k = lab if lab.startswith("(") else "dots" if lab.startswith("dot") else "other steps"
                tot[k] = tot.get(k, 0.0) + sec / steps * 1e3
            print(f"-- {kind} {label}: {t*1e3:.1f} ms/step; executor ms/step: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in sorted(tot.items())) + f"; top {profile}:")
            print("\n".join(f"{sec/steps*1e3:9.2f} ms {c/steps:6.1f}x  {lab}"
                            for lab, c, sec in prof.table[:profile]))
    c, s = best["cpu"], best["strict"]
    f0, f1 = best["fused, tile engine"], best["fused, native kernels"]
    print(f"{kind:8s} cpu {c*1e3:7.1f}  strict {s*1e3:7.1f}  fused/tile {f0*1e3:7.1f}  "
          f"fused/native {f1*1e3:7.1f} ms | native vs tile {f0/f1:5.2f}x  "
          f"fused/native vs strict {s/f1:5.2f}x (tile {s/f0:5.2f}x)  vs cpu {c/f1:5.2f}x",
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=3, help="steps per configuration per round")
    ap.add_argument("--only", default="mlp,encoder,block")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="then profile Strict and Fused steps: the executor's top N steps")
    a = ap.parse_args()
    print(f"host: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; best of {a.rounds} "
          f"rounds of {a.steps} steps")
    for kind in a.only.split(","):
        case(kind.strip(), a.rounds, a.steps, a.profile)
    print("vTPU native kernels:", torch.tpu._get_cache_stats()["vtpu_jit"])


if __name__ == "__main__":
    main()
