"""torch.compile(backend="tpu") on a GPT-2 training step, side by side in one
process with PyTorch CPU eager, torch.compile (inductor) on CPU, Strict
Eager and Fused Eager on tpu; then the first-step latency of a fresh process
with an empty and with a warm compilation cache (TORCH_TPU_COMPILATION_CACHE_DIR).

A step is forward + loss + backward + AdamW (the optimizer step compiled
too, where compiled). Ratios > 1 mean compiled tpu is faster. The latency
part also runs the compiled step with the optimizer step as one Fused Eager
program (Dynamo re-traces a compiled optimizer step in every new process).
Usage: PYTHONPATH=. python3 benchmarks/compile.py [--steps N] [--quick] [--no-inductor] [--no-latency]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import torch_tpu  # noqa: F401
from torch_tpu.execution_mode import EagerMode, eager_mode


def make(dev, args):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=args.layers, n_head=args.heads, n_embd=args.d, vocab_size=args.vocab,
                     n_positions=args.seq, bos_token_id=0, eos_token_id=0,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).to(dev).train()
    # the loss transformers falls back to anyway; left unset, its "unrecognized
    # loss_type" warning_once is a Dynamo graph break inside the forward
    model.loss_type = "ForCausalLM"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq)).to(dev)
    return model, opt, ids


def step_fns(model, opt, backend, fused_opt=False):
    def fwd_bwd(ids):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss

    if backend is None:
        return fwd_bwd, opt.step
    fb = torch.compile(fwd_bwd, backend=backend)
    if fused_opt:  # the optimizer step as one Fused Eager program (no Dynamo trace)
        def fused_step():
            with eager_mode(EagerMode.DEFER_AND_FUSE):
                opt.step()
        return fb, fused_step
    # Dynamo's precompile cache skips compiled optimizer steps (their graphs hold
    # the parameters as static attributes), and in torch 2.13 re-tracing one next
    # to a loaded package clashes on a resume-function name: the step is left
    # out of it (it still loads its AOTAutograd entry and its programs from disk)
    with torch._dynamo.config.patch(caching_precompile=False):
        st = torch.compile(opt.step, backend=backend)
    return fb, st


def timed(dev, args, backend=None, mode=None, fused_opt=False):
    """(median step seconds, first step seconds, first step CPU seconds of this process)"""
    model, opt, ids = make(dev, args)
    fb, st = step_fns(model, opt, backend, fused_opt)

    def one():
        loss = fb(ids)
        st()
        opt.zero_grad(set_to_none=True)
        return loss.item()  # a sync point, as a training loop's logging would be

    ctx = eager_mode(mode) if mode is not None else _null()
    with ctx:
        t0, c0 = time.perf_counter(), time.process_time()
        one()
        first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
        one()
        if dev == "tpu":  # the steady state: native kernels of hot programs (vTPU)
            one()
            torch_tpu._C._vtpu_jit_wait()
            one()
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            one()
            times.append(time.perf_counter() - t0)
    return statistics.median(times), first, first_cpu


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


CHILD = r"""
import sys, time
t0 = time.perf_counter()
import torch, torch_tpu
sys.path.insert(0, {bench_dir!r})
import compile as b
args = b.parse({argv!r})
t1 = time.perf_counter()
_, first, first_cpu = b.timed("tpu", args, backend="tpu", fused_opt=args.fused_opt)
s = torch.tpu._get_cache_stats()
c = s["compile"]
if torch._dynamo.config.caching_precompile:
    torch.compiler.save_cache_artifacts()  # writes the Dynamo cache (bytecode, guards, artifacts)
print("CHILD", first, first_cpu, t1 - t0, s["disk_hits"], s["misses"], c.get("dynamo_graphs", 0),
      c.get("graphs", 0) - c.get("graphs_loaded", 0), c.get("graphs_loaded", 0))
"""


def child_first_step(args, cache_dir, precompile, fused_opt=False):
    # a fresh process; PyTorch's caches (AOTAutogradCache, Dynamo cache) and
    # the runtime's program cache all live under cache_dir
    env = dict(os.environ, TORCH_TPU_COMPILATION_CACHE_DIR=cache_dir, TPU_VISIBLE_CHIPS="1",
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache_dir, "torch"),
               TORCH_CACHING_PRECOMPILE="1" if precompile else "0")
    code = CHILD.format(bench_dir=os.path.dirname(os.path.abspath(__file__)),
                        argv=args.child_argv + (["--fused-opt"] if fused_opt else []))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-3000:])
    line = [x for x in r.stdout.splitlines() if x.startswith("CHILD")][-1].split()
    return (float(line[1]), float(line[2]), float(line[3])) + tuple(int(x) for x in line[4:])


def parse(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-inductor", action="store_true")
    p.add_argument("--no-latency", action="store_true")
    p.add_argument("--fused-opt", action="store_true",
                   help="(child) optimizer step in Fused Eager instead of torch.compile")
    args = p.parse_args(argv)
    args.layers, args.heads, args.d, args.vocab, args.seq, args.batch = (
        (2, 4, 128, 1024, 64, 4) if args.quick else (4, 8, 256, 4096, 128, 8))
    args.child_argv = ["--steps", "1"] + (["--quick"] if args.quick else [])
    return args


def cpu_model():
    """CPU model name and the matrix/bf16 ISA extensions it has."""
    import platform

    name, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and name in ("", "x86_64"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = [x for x in ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f") if x in flags]
    return f"{name} ({', '.join(isa) or 'no AVX-512/AMX'})"


def main():
    args = parse()
    print(f"GPT-2 train step: {args.layers} layers, d={args.d}, heads={args.heads}, "
          f"vocab={args.vocab}, batch {args.batch} x seq {args.seq}, AdamW; host "
          f"{cpu_model()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; "
          f"median of {args.steps} steps")
    rows = {}
    rows["cpu eager"] = timed("cpu", args)
    if not args.no_inductor:
        try:
            rows["cpu inductor"] = timed("cpu", args, backend="inductor")
        except Exception as e:  # noqa: BLE001 - a missing C++ toolchain is reported, not fatal
            print(f"  (inductor on CPU unavailable: {type(e).__name__}: {str(e)[:200]})")
    rows["tpu strict"] = timed("tpu", args, mode=EagerMode.DEFER_NEVER)
    rows["tpu fused"] = timed("tpu", args, mode=EagerMode.DEFER_AND_FUSE)
    torch.tpu._reset_cache_stats()
    rows["tpu compiled"] = timed("tpu", args, backend="tpu")
    c = torch.tpu._get_cache_stats()["compile"]
    comp = rows["tpu compiled"][0]
    for name, (med, first, _) in rows.items():
        print(f"  {name:14s} {med * 1e3:9.1f} ms/step   first step {first:7.2f} s   "
              f"compiled tpu is {med / comp:5.2f}x faster")
    print(f"  compiled graphs: {c.get('graphs', 0)} (fw {c.get('graphs_forward', 0)}, "
          f"bw {c.get('graphs_backward', 0)}, inference {c.get('graphs_inference', 0)}), "
          f"captured {c.get('captures', 0)}, replays {c.get('replays', 0)}, "
          f"re-dispatched {c.get('fused_runs', 0)}")
    print("  goals: vs cpu eager >= 1.2x, vs cpu inductor >= 1.0x, vs tpu fused >= 1.3x")
    if args.no_latency:
        return
    # Dynamo re-traces a compiled optimizer step in every process (torch 2.13's
    # precompile cache leaves it out), so the last configuration runs the step
    # as one Fused Eager program (loaded from the runtime's disk cache) instead
    for precompile, fused_opt in ((False, False), (True, False), (True, True)):
        with tempfile.TemporaryDirectory() as d:
            cold = child_first_step(args, d, precompile, fused_opt)
            warm = child_first_step(args, d, precompile, fused_opt)
        print("  caches: runtime programs + AOTAutogradCache" +
              (" + Dynamo cache (TORCH_CACHING_PRECOMPILE=1, save_cache_artifacts())"
               if precompile else "") +
              ("; optimizer step in Fused Eager (not compiled)" if fused_opt
               else "; optimizer step compiled"))
        for name, (first, cpu, imp, hits, misses, dyn, traced, loaded) in (("cold", cold),
                                                                           ("warm", warm)):
            print(f"  new process, {name}: first compiled step {first:6.2f} s ({cpu:5.2f} s CPU; import "
                  f"{imp:4.1f} s; programs from disk {hits}, compiled {misses}; Dynamo graphs "
                  f"traced {dyn}, FX graphs traced {traced}, loaded {loaded})")
    print("  goal: warm first step <= 2 s")


if __name__ == "__main__":
    main()
