"""Executor fusions in Fused Eager, on vs off: the (b) GPT block and (c) MLP
training steps of benchmarks/fused_eager.py, run with one of the vTPU
executor's fusions (--fusion epilogue: matmul epilogues, the default;
--fusion reduce: reductions fused with their producer) on and off in the
same process (interleaved rounds, so a noisy shared machine affects both
alike). Reports per step: wall time, process CPU time (all threads;
time.process_time) and how many times the fusion ran.
Usage: PYTHONPATH=. python3 benchmarks/fusion.py [--steps N] [--rounds R]
       [--quick] [--fusion epilogue|reduce]
"""
import argparse
import os
import sys
import time

import torch

import torch_tpu
from torch_tpu.execution_mode import EagerMode, eager_mode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fused_eager import make_train  # noqa: E402


def measure(step, steps, kind):
    out = step()
    torch.tpu.synchronize()
    r0 = torch.tpu._get_fusion_stats()[kind]
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        out = step()
    torch.tpu.synchronize()
    w, c = time.perf_counter() - w0, time.process_time() - c0
    del out
    return w / steps, c / steps, (torch.tpu._get_fusion_stats()[kind] - r0) / steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="MLP only")
    ap.add_argument("--fusion", choices=("epilogue", "reduce"), default="epilogue")
    a = ap.parse_args()
    cases = [("mlp", "(c) MLP training step")]
    if not a.quick:
        cases.insert(0, ("block", "(b) GPT block d512 s256 b8 +AdamW"))
    for kind, name in cases:
        with eager_mode(EagerMode.DEFER_AND_FUSE):
            step = make_train(kind, "tpu")
            for _ in range(2):  # warm up: record, compile, cache
                step()
            torch.tpu.synchronize()
            res = {1: [], 0: []}
            for _ in range(a.rounds):
                for on in (1, 0):
                    torch.tpu._set_fusion(a.fusion, bool(on))
                    res[on].append(measure(step, a.steps, a.fusion))
            torch.tpu._set_fusion(a.fusion, None)
        for on in (1, 0):
            w = min(r[0] for r in res[on])
            c = min(r[1] for r in res[on])
            n = res[on][0][2]
            print(f"{name:34s} {a.fusion} {'on ' if on else 'off'}  wall {w*1e3:8.2f} ms  "
                  f"cpu {c*1e3:8.2f} ms/step  fusions/step {n:4.1f}", flush=True)
        won, woff = min(r[0] for r in res[1]), min(r[0] for r in res[0])
        con, coff = min(r[1] for r in res[1]), min(r[1] for r in res[0])
        print(f"{'':34s} on/off: wall {won/woff:5.3f}  cpu {con/coff:5.3f}", flush=True)


if __name__ == "__main__":
    main()
