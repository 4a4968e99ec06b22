"""Collective bus bandwidth: tpu_dist (shared memory, tpu tensors) next to
gloo (CPU tensors) in the same processes, on 2 and 4 ranks.

    python benchmarks/collectives.py [--ranks 2 4] [--max-mb 64] [--iters 5]

Bus bandwidth as nccl-tests defines it: all_reduce algbw * 2(n-1)/n,
all_gather / reduce_scatter algbw * (n-1)/n, where algbw = bytes of the full
tensor (all_gather output, reduce_scatter input) / time. Each size: one
warm-up, then the median of --iters timed calls (each waits for
completion), tpu_dist and gloo interleaved so both see the same host
load; the load average is printed with each table."""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(max_mb, iters):
    import torch
    import torch.distributed as dist
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)

    import torch_tpu  # noqa: F401

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("tpu_dist")
    gloo = dist.new_group(backend="gloo")
    sizes = []
    s = 1024
    while s <= max_mb << 20:
        sizes.append(s)
        s *= 4 if s < (1 << 20) else 2
    rows = []
    for kind in ("all_reduce", "all_gather", "reduce_scatter"):
        for nbytes in sizes:
            n = nbytes // 4  # float32 elements of the full tensor
            n -= n % world
            fns = {}
            for name, dev, grp in (("tpu_dist", "tpu", None), ("gloo", "cpu", gloo)):
                if kind == "all_reduce":
                    x = torch.ones(n, device=dev)
                    fn = (lambda x, grp: lambda: dist.all_reduce(x, group=grp))(x, grp)
                    factor = 2 * (world - 1) / world
                elif kind == "all_gather":
                    x = torch.ones(n // world, device=dev)
                    y = torch.empty(n, device=dev)
                    fn = (lambda x, y, grp: lambda: dist.all_gather_into_tensor(y, x, group=grp))(x, y, grp)
                    factor = (world - 1) / world
                else:
                    x = torch.ones(n, device=dev)
                    y = torch.empty(n // world, device=dev)
                    fn = (lambda x, y, grp: lambda: dist.reduce_scatter_tensor(y, x, group=grp))(x, y, grp)
                    factor = (world - 1) / world
                fns[name] = (fn, dev, grp)
                fn()
                if dev == "tpu":
                    torch.tpu.synchronize()
            # interleaved: both backends see the same host load
            times = {name: [] for name in fns}
            for _ in range(iters):
                for name, (fn, dev, grp) in fns.items():
                    dist.barrier(group=grp)
                    t0 = time.perf_counter()
                    fn()
                    if dev == "tpu":
                        torch.tpu.synchronize()
                    times[name].append(time.perf_counter() - t0)
            res = {name: n * 4 / statistics.median(t) * factor / 1e9 for name, t in times.items()}
            del fns
            rows.append({"kind": kind, "bytes": n * 4, "tpu_dist": res["tpu_dist"], "gloo": res["gloo"]})
    if rank == 0:
        print("RESULT " + json.dumps(rows), flush=True)
    dist.destroy_process_group()


def launch(world, max_mb, iters):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lock_dir = tempfile.mkdtemp(prefix="tpu_bench_locks_")
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TPU_VISIBLE_CHIPS=str(r),
                   TORCH_TPU_LOCK_DIR=lock_dir, TORCH_TPU_NUM_THREADS="1",
                   PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", "--max-mb", str(max_mb),
                                       "--iters", str(iters)], env=env, stdout=subprocess.PIPE, text=True))
    rows = None
    for p in procs:
        out, _ = p.communicate()
        if p.returncode:
            raise SystemExit(f"a rank failed (exit {p.returncode})")
        for line in out.splitlines():
            if line.startswith("RESULT "):
                rows = json.loads(line[7:])
    return rows


def fmt_bytes(b):
    for unit, div in (("MB", 1 << 20), ("KB", 1 << 10)):
        if b >= div:
            return f"{b / div:.0f} {unit}"
    return f"{b} B"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--max-mb", type=int, default=64)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--worker", action="store_true")
    a = ap.parse_args()
    if a.worker:
        return worker(a.max_mb, a.iters)
    for world in a.ranks:
        load0 = os.getloadavg()[0]
        rows = launch(world, a.max_mb, a.iters)
        load1 = os.getloadavg()[0]
        print(f"\n{world} ranks: bus bandwidth GB/s (tpu_dist on tpu tensors vs gloo on CPU tensors), "
              f"{os.cpu_count()} CPUs, load average {load0:.1f} -> {load1:.1f}")
        print(f"{'collective':<15}{'size':>9}{'tpu_dist':>10}{'gloo':>9}{'ratio':>8}")
        for r in rows:
            print(f"{r['kind']:<15}{fmt_bytes(r['bytes']):>9}{r['tpu_dist']:>10.2f}{r['gloo']:>9.2f}"
                  f"{r['tpu_dist'] / r['gloo']:>7.1f}x")


if __name__ == "__main__":
    main()
