"""Transformer inference (eval mode, no grad) on tpu vs PyTorch CPU eager,
side by side in one process: nn.TransformerEncoder (its layers take torch's
fast path, aten::_transformer_encoder_layer_fwd) and nn.MultiheadAttention
(aten::_native_multi_head_attention), each also with the fast path turned
off (torch.backends.mha.set_fastpath_enabled(False): the modules' Python
code, op by op). Times per forward (tpu: until torch.tpu.synchronize()),
best of --reps rounds; ratios > 1 mean tpu is faster.

    PYTHONPATH=. python3 benchmarks/inference.py [--reps 5] [--steps 5]
"""
import argparse
import time

import torch

import torch_tpu  # noqa: F401  (registers the tpu device)
from hostinfo import cpu_model
from torch_tpu.execution_mode import EagerMode, eager_mode


def encoder(d=512, heads=8, ff=2048, layers=4, causal=True):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True,
                                             activation="gelu")
    m = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()
    x = torch.randn(8, 256, d)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(256) if causal else None
    return m, lambda mod, dev: mod(x.to(dev), mask=None if mask is None else mask.to(dev))


def mha(d=512, heads=8):
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(d, heads, batch_first=True).eval()
    x = torch.randn(8, 256, d)

    def run(mod, dev):
        xd = x.to(dev)
        return mod(xd, xd, xd, need_weights=False)[0]
    return m, run


def best(fn, sync, steps, reps):
    fn()
    sync()
    t = 1e9
    for _ in range(reps):
        t0 = time.perf_counter()
        outs = [fn() for _ in range(steps)]  # held: Fused Eager elides unused values
        sync()
        t = min(t, (time.perf_counter() - t0) / steps)
        del outs
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    print(f"host: {cpu_model()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name, make in (("TransformerEncoder 4x(d512 h8 ff2048) causal, [8,256,512]", encoder),
                       ("MultiheadAttention d512 h8, [8,256,512]", mha)):
        mod, run = make()
        res = {}
        with torch.no_grad():
            for fast in (True, False):
                torch.backends.mha.set_fastpath_enabled(fast)
                tag = "fast path" if fast else "no fast path"
                res[f"cpu {tag}"] = best(lambda: run(mod, "cpu"), lambda: None, a.steps, a.reps)
                mod.to("tpu")
                for mode, label in ((EagerMode.DEFER_NEVER, "strict"),
                                    (EagerMode.DEFER_AND_FUSE, "fused")):
                    with eager_mode(mode):
                        run(mod, "tpu")
                        torch.tpu.synchronize()
                        torch_tpu._C._vtpu_jit_wait()
                        res[f"tpu {label} {tag}"] = best(lambda: run(mod, "tpu"),
                                                         torch.tpu.synchronize, a.steps, a.reps)
                mod.to("cpu")
            torch.backends.mha.set_fastpath_enabled(True)
        base = res["cpu fast path"]
        print(name)
        for k, t in res.items():
            print(f"  {k:24s} {t * 1e3:9.2f} ms   vs torch CPU (fast path) {base / t:5.2f}x")


if __name__ == "__main__":
    main()
