#!/usr/bin/env bash
# tools/device_check.sh - one prepared check of the PJRT executor on a GPU
# machine (e.g. the H200 device machine; its own environment). Run from the
# repository root:   bash tools/device_check.sh
#
# It installs the CUDA PJRT plugin (jax-cuda12-pjrt: no JAX at run time, only
# the plugin .so), builds the runtime and the extension, then runs through
# TORCH_TPU_BACKEND=pjrt on the GPU:
#   1. the device name and a correctness check of a matmul against torch CPU,
#   2. matmul TFLOP/s (4096^3 f32 and bf16) next to torch CUDA eager,
#   3. a transformer block forward+backward and a GPT-2-style training step
#      (benchmarks/pjrt.py model) in Fused Eager, step time next to torch
#      CUDA eager (goal: >= 0.7x torch CUDA).
# Numbers include the host<->device copies of today's memory model (tensors
# live in host memory; each program uploads its inputs and downloads its
# outputs), so they are a lower bound for a device-resident model.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
T0=$(date +%s)
echo "== environment"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"

echo "== install the CUDA PJRT plugin and build"
$PY -m pip install -q "jax-cuda12-pjrt" xla-cpu-pjrt 2>&1 | tail -2 || true
PLUGIN=$($PY - <<'P'
import importlib.util, os
for m in ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12"):
    try:
        s = importlib.util.find_spec(m)
    except ImportError:
        s = None
    if s:
        for d in list(s.submodule_search_locations or []):
            p = os.path.join(d, "xla_cuda_plugin.so")
            if os.path.exists(p):
                print(p); raise SystemExit
P
)
echo "plugin: ${PLUGIN:-none found}"
[ -n "$PLUGIN" ] || { echo "no CUDA PJRT plugin: stop"; exit 1; }
make -C runtime -j"$(nproc)" all >/dev/null
TORCH_DEVICE_BACKEND_AUTOLOAD=0 $PY setup.py -q build_ext --inplace >/dev/null 2>&1
echo "build: $(( $(date +%s) - T0 )) s"

export TORCH_TPU_BACKEND=pjrt TORCH_TPU_PJRT_PLUGIN="$PLUGIN" PYTHONPATH=$PWD
export TORCH_TPU_LOCK_DIR=$(mktemp -d)
# XLA's GPU client preallocates 75% of the GPU: leave room for torch CUDA
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.4 XLA_CLIENT_MEM_FRACTION=0.4

$PY - <<'P'
import time, torch, torch_tpu
from torch_tpu.execution_mode import EagerMode, eager_mode
print("== device:", torch.tpu.get_device_name())

def bench(fn, sync, n, warm=3):
    for _ in range(warm): out = fn()
    sync(); t = time.perf_counter()
    for _ in range(n): out = fn()
    sync(); return (time.perf_counter() - t) / n

# 1. correctness
a, b = torch.randn(256, 512), torch.randn(512, 128)
with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
    got = (a.to("tpu") @ b.to("tpu")).cpu()
err = (got - a @ b).abs().max().item()
print(f"matmul max |err| vs torch CPU (HIGHEST): {err:.2e}", "OK" if err < 1e-3 else "BAD")

# 2. matmul TFLOP/s
n = 4096
for dt in (torch.float32, torch.bfloat16):
    x, y = torch.randn(n, n, dtype=dt), torch.randn(n, n, dtype=dt)
    xt, yt = x.to("tpu"), y.to("tpu")
    with eager_mode(EagerMode.DEFER_NEVER):
        t_p = bench(lambda: xt @ yt, torch.tpu.synchronize, 5)
    xc, yc = x.cuda(), y.cuda()
    t_c = bench(lambda: xc @ yc, torch.cuda.synchronize, 10)
    f = 2 * n ** 3
    print(f"matmul {n}^3 {str(dt)[6:]:8s} PJRT {f/t_p/1e12:7.2f} TFLOP/s  torch CUDA "
          f"{f/t_c/1e12:7.2f} TFLOP/s  ratio {t_c/t_p:5.2f}x (PJRT includes host copies)")

# 3. transformer block and GPT-2 step
import importlib.util, os
spec = importlib.util.spec_from_file_location("bp", os.path.join("benchmarks", "pjrt.py"))
bp = importlib.util.module_from_spec(spec); spec.loader.exec_module(bp)
blk = bp.Block(512, 8)
xb = torch.randn(8, 256, 512)
def block_step(dev):
    m = bp.Block(512, 8).to(dev); m.load_state_dict(blk.state_dict()); x = xb.to(dev)
    def f():
        y = m(x); y.square().mean().backward(); return y
    return f
with eager_mode(EagerMode.DEFER_AND_FUSE):
    t_p = bench(block_step("tpu"), torch.tpu.synchronize, 5)
t_c = bench(block_step("cuda"), torch.cuda.synchronize, 10)
print(f"transformer block fwd+bwd (d512 s256 b8): PJRT {t_p*1e3:8.2f} ms  torch CUDA {t_c*1e3:8.2f} ms  ratio {t_c/t_p:5.2f}x")
with eager_mode(EagerMode.DEFER_AND_FUSE):
    t_p = bench(bp.make_gpt_step("tpu"), torch.tpu.synchronize, 5)
t_c = bench(bp.make_gpt_step("cuda"), torch.cuda.synchronize, 10)
print(f"GPT-2-ish train step (Fused Eager): PJRT {t_p*1e3:8.2f} ms  torch CUDA {t_c*1e3:8.2f} ms  ratio {t_c/t_p:5.2f}x (goal >= 0.7x)")
print("pjrt stats:", torch_tpu.pjrt.stats())
P
echo "== total $(( $(date +%s) - T0 )) s"
