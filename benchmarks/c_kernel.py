"""User C kernels (torch_tpu.kernels.c_kernel): compile time on first use vs
a cached load, and the C fused RMSNorm of examples/c_kernel_rmsnorm.py vs
the same RMSNorm as composite tpu ops (Strict and Fused Eager) vs PyTorch
CPU eager, in one process.
Usage: PYTHONPATH=. python3 benchmarks/c_kernel.py [--rows 4096] [--dim 1024] [--iters 20]
"""
import argparse
import os
import platform
import shutil
import sys
import tempfile
import time

import torch

import torch_tpu  # noqa: F401
from torch_tpu.execution_mode import EagerMode, eager_mode
from torch_tpu.kernels import _c_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import c_kernel_rmsnorm as ex  # noqa: E402


def cpu_info():
    model, flags = platform.processor(), ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    fl = line.split()
                    flags = " ".join(x for x in ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
                                     if x in fl)
                    break
    except OSError:
        pass
    return f"{model} ({flags}; {os.cpu_count()} cpus)"


def timeit(fn, iters):
    """Seconds per call; every result is kept until the end (Fused Eager
    never computes a result that dies unread)."""
    fn()
    torch.tpu.synchronize()
    keep = []
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(iters):
        keep.append(fn())
    torch.tpu.synchronize()
    dt, dc = (time.perf_counter() - t0) / iters, (time.process_time() - c0) / iters
    del keep
    return dt, dc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    print("host:", cpu_info())

    # compile time: a fresh cache directory, then the same kernel from disk
    d = tempfile.mkdtemp(prefix="ck_bench_")
    old = os.environ.get("TORCH_TPU_COMPILATION_CACHE_DIR")
    os.environ["TORCH_TPU_COMPILATION_CACHE_DIR"] = d
    try:
        src = ex.RMSNORM_SRC.replace("rmsnorm", "rmsnorm_b")
        t0 = time.perf_counter()
        _c_kernel.c_kernel("rmsnorm_b", src, ex.RMSNORM_SIG)
        first = time.perf_counter() - t0
        _c_kernel._kernels.clear()  # forget the in-process copy: load from disk
        _c_kernel._toolchain = None  # and the compiler probe, as a new process
        t0 = time.perf_counter()
        _c_kernel.c_kernel("rmsnorm_b", src, ex.RMSNORM_SIG)
        cached = time.perf_counter() - t0
    finally:
        if old is None:
            os.environ.pop("TORCH_TPU_COMPILATION_CACHE_DIR", None)
        else:
            os.environ["TORCH_TPU_COMPILATION_CACHE_DIR"] = old
        shutil.rmtree(d, ignore_errors=True)
    s = _c_kernel.stats()
    print(f"c_kernel first use (cc -O2 -march=native): {first * 1e3:.1f} ms "
          f"(compiler {s['compile_time_s'] * 1e3:.1f} ms); cached on disk: {cached * 1e3:.2f} ms "
          f"({first / cached:.0f}x)")

    k = ex.rmsnorm_kernel()  # parallel="N": blocks of rows on the vTPU's threads
    k1 = _c_kernel.c_kernel("rms_serial", ex.RMSNORM_SRC.replace("rmsnorm", "rms_serial"),
                            ex.RMSNORM_SIG)  # one call, one thread
    torch.manual_seed(0)
    x, w, eps = torch.randn(a.rows, a.dim), torch.randn(a.dim), 1e-6
    xd, wd = x.to("tpu"), w.to("tpu")

    def composite(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    cases = [
        ("cpu composite (PyTorch eager)", None, lambda: composite(x, w)),
        ("tpu composite, Strict", EagerMode.DEFER_NEVER, lambda: composite(xd, wd)),
        ("tpu composite, Fused", EagerMode.DEFER_AND_FUSE, lambda: composite(xd, wd)),
        ("tpu C kernel, Strict", EagerMode.DEFER_NEVER, lambda: k(xd, wd, eps)),
        ("tpu C kernel, Fused", EagerMode.DEFER_AND_FUSE, lambda: k(xd, wd, eps)),
        ("tpu C kernel 1 thread, Strict", EagerMode.DEFER_NEVER, lambda: k1(xd, wd, eps)),
    ]
    # interleaved rounds, best of each (the dev host is shared and noisy)
    res = {name: [] for name, _, _ in cases}
    for _ in range(a.rounds):
        for name, mode, fn in cases:
            if mode is None:
                res[name].append(timeit(fn, a.iters))
            else:
                with eager_mode(mode):
                    res[name].append(timeit(fn, a.iters))
    res = {name: (min(w for w, _ in v), min(c for _, c in v)) for name, v in res.items()}
    torch.testing.assert_close(k(xd, wd, eps).cpu(), composite(x, w), rtol=1e-4, atol=1e-4)
    base = res["cpu composite (PyTorch eager)"][0]
    print(f"RMSNorm [{a.rows}, {a.dim}] float32, best of {a.rounds} rounds of {a.iters} calls, "
          "per call (wall; process CPU time, all threads):")
    for name, (t, c) in res.items():
        print(f"  {name:32s} {t * 1e3:8.3f} ms  cpu {c * 1e3:8.3f} ms   {base / t:5.2f}x "
              "PyTorch CPU")


if __name__ == "__main__":
    main()
