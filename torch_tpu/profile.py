"""``python -m torch_tpu.profile script.py [args...]``: run a script with the
vTPU program trace on and print the programs that took the most device time
(name = the program's IR ops; count, total/mean time, bytes, GFLOP/s)."""
import argparse
import runpy
import sys


def table(events, top=20):
    agg = {}
    for e in events:
        a = agg.setdefault(e["name"], [0, 0, 0, 0])
        a[0] += 1
        a[1] += e["end_ns"] - e["start_ns"]
        a[2] += e["bytes"]
        a[3] += e["flops"]
    total = sum(a[1] for a in agg.values()) or 1
    rows = sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]
    lines = [f"{'program (IR ops)':60s} {'calls':>6s} {'total ms':>10s} {'%':>6s} "
             f"{'mean us':>9s} {'MB':>9s} {'GFLOP/s':>8s}"]
    for name, (n, ns, b, fl) in rows:
        gf = fl / ns if ns else 0.0
        lines.append(f"{name[:60]:60s} {n:6d} {ns / 1e6:10.3f} {100 * ns / total:6.1f} "
                     f"{ns / n / 1e3:9.1f} {b / 1e6:9.2f} {gf:8.2f}")
    lines.append(f"{len(events)} programs, {total / 1e6:.3f} ms of device time")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m torch_tpu.profile")
    ap.add_argument("--top", type=int, default=20, help="rows to print")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    import torch_tpu  # noqa: F401
    from torch_tpu import _C
    from torch_tpu.profiler import _sync_all

    sys.argv = [a.script] + a.args
    _C._trace_enable(True)
    try:
        runpy.run_path(a.script, run_name="__main__")
    finally:
        _sync_all()
        events, dropped = _C._trace_drain()
        _C._trace_enable(False)
        print(table(events, a.top), file=sys.stderr)
        if dropped:
            print(f"({dropped} events dropped: buffer full)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
