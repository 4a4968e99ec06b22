"""torch.tpu.ops / torch.tpu.optimizers vs PyTorch CPU, side by side in one
process (the vTPU runs on the same host CPU):
  (a) ragged_dot forward+backward for an MoE layer's grouped matmul
      (tokens x d -> experts of d x h), vs the CPU per-group mm loop;
  (b) one optimizer step (AdamW, Muon) over a 4-layer MLP's parameters:
      torch.tpu.optimizers (one program per step) vs torch.optim on CPU.
Usage: PYTHONPATH=. python3 benchmarks/tpu_api.py [--steps N]
"""
import argparse
import time

import torch

import torch_tpu  # noqa: F401


def timeit(fn, steps, sync):
    fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    sync()
    return (time.perf_counter() - t0) / steps


def ragged(steps):
    torch.manual_seed(0)
    m, d, h, g = 2048, 512, 1024, 8
    sizes = torch.tensor([400, 100, 300, 248, 200, 300, 250, 250])
    lhs, rhs = torch.randn(m, d), torch.randn(g, d, h) / d ** 0.5
    grad = torch.randn(m, h)

    def cpu_step():
        a, b = lhs.clone().requires_grad_(), rhs.clone().requires_grad_()
        out, s = [], 0
        for i, sz in enumerate(sizes.tolist()):
            out.append(a[s:s + sz] @ b[i])
            s += sz
        torch.cat(out).backward(grad)

    lt, rt, gt = lhs.to("tpu"), rhs.to("tpu"), grad.to("tpu")

    def tpu_step():
        a, b = lt.clone().requires_grad_(), rt.clone().requires_grad_()
        torch.tpu.ops.ragged_dot(a, b, sizes).backward(gt)
        b.grad.sum()

    for prec in ("DEFAULT", "HIGHEST"):
        with torch.tpu.precision(getattr(torch.tpu.Precision, prec)):
            t_tpu = timeit(tpu_step, steps, torch.tpu.synchronize)
        t_cpu = timeit(cpu_step, steps, lambda: None)
        flop = 3 * 2 * m * d * h
        print(f"ragged_dot fwd+bwd m={m} d={d} h={h} g={g} [{prec}]: tpu {t_tpu * 1e3:8.2f} ms "
              f"({flop / t_tpu / 1e9:6.1f} GFLOP/s)  cpu fp32 {t_cpu * 1e3:8.2f} ms  "
              f"cpu/tpu {t_cpu / t_tpu:5.2f}x")


def optim(steps):
    torch.manual_seed(0)
    shapes = [(1024, 1024), (1024, 1024), (1024, 1024), (256, 1024)]
    for name, mk_tpu, mk_cpu in (
            ("AdamW", lambda: torch.tpu.optimizers.AdamW(lr=1e-3, use_bfloat16_moments=False),
             lambda ps: torch.optim.AdamW(ps, lr=1e-3)),
            ("Muon", lambda: torch.tpu.optimizers.Muon(lr=1e-3),
             lambda ps: torch.optim.Muon(ps, lr=1e-3))):
        ps = [torch.randn(s) for s in shapes]
        gs = [torch.randn(s) for s in shapes]
        cp = [p.clone().requires_grad_() for p in ps]
        for p, g in zip(cp, gs):
            p.grad = g.clone()
        co = mk_cpu(cp)
        o = mk_tpu()
        grp = o.init_param_group({f"w{i}": p.to("tpu") for i, p in enumerate(ps)})
        gd = {f"w{i}": g.to("tpu") for i, g in enumerate(gs)}
        torch.tpu.synchronize()
        p0 = torch.tpu._get_cache_stats()["programs_run"]
        t_tpu = timeit(lambda: o.step(grp, gd), steps, torch.tpu.synchronize)
        progs = (torch.tpu._get_cache_stats()["programs_run"] - p0) / (steps + 1)
        t_cpu = timeit(co.step, steps, lambda: None)
        n = sum(p.numel() for p in ps)
        print(f"{name} step, {n / 1e6:.1f}M params: tpu {t_tpu * 1e3:8.2f} ms "
              f"({progs:.0f} program/step)  torch.optim cpu {t_cpu * 1e3:8.2f} ms  "
              f"cpu/tpu {t_cpu / t_tpu:5.2f}x")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args()
    ragged(a.steps)
    optim(a.steps)
