"""A fused RMSNorm written in C, used inside a Hugging Face Llama on tpu.

    python examples/c_kernel_rmsnorm.py

The kernel is compiled once with the system C compiler (cached on disk, see
torch_tpu.kernels.c_kernel) and runs in the vTPU executor as one node of the
program around it. Every LlamaRMSNorm of a small random Llama forwards to
it; the logits match the unmodified model on CPU in Strict Eager, Fused
Eager (the whole forward pass is one program with the kernel nodes inside)
and under torch.compile(backend="tpu").
"""
import types

import torch

import torch_tpu  # noqa: F401  (registers the tpu device)
from torch_tpu.execution_mode import EagerMode, eager_mode
from torch_tpu.kernels import c_kernel

RMSNORM_SRC = r"""
#include <math.h>
#include <stdint.h>

/* y[i, :] = x[i, :] / sqrt(mean(x[i, :]^2) + eps) * w, in float32 */
void rmsnorm(const float *x, const float *w, float eps, float *y, int64_t N, int64_t D) {
  for (int64_t i = 0; i < N; i++) {
    const float *xi = x + i * D;
    float *yi = y + i * D;
    float acc[16] = {0};
    int64_t j = 0;
    for (; j + 16 <= D; j += 16)
      for (int k = 0; k < 16; k++) acc[k] += xi[j + k] * xi[j + k];
    float ss = 0.f;
    for (int k = 0; k < 16; k++) ss += acc[k];
    for (; j < D; j++) ss += xi[j] * xi[j];
    float r = 1.0f / sqrtf(ss / (float)D + eps);
    for (j = 0; j < D; j++) yi[j] = w[j] * (xi[j] * r);
  }
}
"""
RMSNORM_SIG = "(float32[N,D] x, float32[D] w, float eps) -> float32[N,D]"


def rmsnorm_kernel():
    """The compiled kernel (compiles on first use in a process that has no
    cached copy on disk)."""
    return c_kernel("rmsnorm", RMSNORM_SRC, RMSNORM_SIG, parallel="N")  # rows independent


def use_c_rmsnorm(model):
    """Forward every LlamaRMSNorm of `model` to the C kernel; returns how
    many modules now use it."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    k = rmsnorm_kernel()

    def forward(self, hidden_states):
        shape = hidden_states.shape
        x = hidden_states.to(torch.float32).reshape(-1, shape[-1])
        y = k(x, self.weight.to(torch.float32), float(self.variance_epsilon))
        return y.reshape(shape).to(hidden_states.dtype)

    n = 0
    for m in model.modules():
        if isinstance(m, LlamaRMSNorm):
            m.forward = types.MethodType(forward, m)
            n += 1
    return n


def tiny_llama(seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64)
    return LlamaForCausalLM(cfg).eval()


def main():
    ref = tiny_llama()
    ids = torch.randint(0, 128, (2, 16))
    with torch.no_grad():
        want = ref(ids).logits

    model = tiny_llama().to("tpu")
    print("LlamaRMSNorm modules using the C kernel:", use_c_rmsnorm(model))
    tids = ids.to("tpu")
    with torch.no_grad():
        got = model(tids).logits.cpu()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        print("Strict Eager: logits match CPU, max |diff| = %.2e" % (got - want).abs().max())

        torch.tpu._reset_cache_stats()
        with eager_mode(EagerMode.DEFER_AND_FUSE):
            got = model(tids).logits.cpu()
        s = torch.tpu._get_cache_stats()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        print(f"Fused Eager: logits match CPU; {s['ops_recorded']} ops in "
              f"{s['programs_run']} program(s), C kernel runs: {s['c_kernels']['runs']}")

        step = torch.compile(lambda t: model(t).logits, backend="tpu")
        got = step(tids).cpu()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        s = torch.tpu._get_cache_stats()
        print(f"torch.compile(backend='tpu'): logits match CPU; captured programs: "
              f"{s['captures']}")
    print("kernel:", s["c_kernels"])


if __name__ == "__main__":
    main()
