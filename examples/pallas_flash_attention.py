"""A Pallas flash-attention kernel on tpu tensors through torch.tpu.pallas.jax_op.

The kernel is plain Pallas (online softmax over key blocks, one program per
(batch*head, query block)), lowered by JAX with interpret=True to StableHLO
once per input shape; the runtime imports that StableHLO into its IR and
runs it on the vTPU like any op (JAX does not run it). Compared with
PyTorch CPU's scaled_dot_product_attention.

    python examples/pallas_flash_attention.py
"""
import functools
import time

import jax
import jax.numpy as jnp
import torch
from jax.experimental import pallas as pl

import torch_tpu  # noqa: F401  (registers the tpu device)


def _flash_kernel(q_ref, k_ref, v_ref, o_ref, *, block_k, seq_k, scale):
    q = q_ref[...].astype(jnp.float32) * scale           # (block_q, d)
    bq, d = q.shape

    def body(i, carry):
        m, l, acc = carry
        k = k_ref[pl.ds(i * block_k, block_k), :].astype(jnp.float32)
        v = v_ref[pl.ds(i * block_k, block_k), :].astype(jnp.float32)
        s = q @ k.T                                       # (block_q, block_k)
        m_new = jnp.maximum(m, s.max(axis=-1))
        p = jnp.exp(s - m_new[:, None])
        alpha = jnp.exp(m - m_new)
        return m_new, alpha * l + p.sum(axis=-1), acc * alpha[:, None] + p @ v

    m0 = jnp.full((bq,), -jnp.inf, jnp.float32)
    carry = (m0, jnp.zeros((bq,), jnp.float32), jnp.zeros((bq, d), jnp.float32))
    _, l, acc = jax.lax.fori_loop(0, seq_k // block_k, body, carry)
    o_ref[...] = (acc / l[:, None]).astype(o_ref.dtype)


def flash_attention(q, k, v, block_q=32, block_k=32):
    """q, k, v: (batch*heads, seq, head_dim) -> softmax(q k^T / sqrt(d)) v."""
    bh, sq, d = q.shape
    sk = k.shape[1]
    kern = functools.partial(_flash_kernel, block_k=block_k, seq_k=sk, scale=1.0 / d ** 0.5)
    return pl.pallas_call(
        kern, grid=(bh, sq // block_q),
        in_specs=[pl.BlockSpec((None, block_q, d), lambda b, i: (b, i, 0)),
                  pl.BlockSpec((None, sk, d), lambda b, i: (b, 0, 0)),
                  pl.BlockSpec((None, sk, d), lambda b, i: (b, 0, 0))],
        out_specs=pl.BlockSpec((None, block_q, d), lambda b, i: (b, i, 0)),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype), interpret=True)(q, k, v)


@torch.tpu.pallas.jax_op("examples::flash_attention")
def flash_attention_op(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    return flash_attention(q, k, v)


def main(verbose=True):
    torch.manual_seed(0)
    B, H, S, D = 2, 2, 128, 32
    q, k, v = (torch.randn(B, H, S, D) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    qt, kt, vt = (t.reshape(B * H, S, D).to("tpu") for t in (q, k, v))
    # f32 matmuls at HIGHEST (fp32-accurate; DEFAULT is one bf16 pass, as on a TPU)
    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        t0 = time.perf_counter()
        out = flash_attention_op(qt, kt, vt).cpu()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        out2 = flash_attention_op(qt, kt, vt).cpu()
        second = time.perf_counter() - t0
    err = (out.reshape(B, H, S, D) - ref).abs().max().item()
    assert torch.equal(out, out2)
    if verbose:
        s = torch.tpu.pallas.stats()
        print(f"flash attention (Pallas, interpret=True) on tpu vs torch SDPA on CPU: "
              f"max abs error {err:.3g}")
        print(f"first call {first * 1e3:.1f} ms (JAX lowering {s['lower_time_s'] * 1e3:.1f} ms, "
              f"import {s['import_time_s'] * 1e3:.1f} ms), second call {second * 1e3:.1f} ms; "
              f"lowerings {s['lowerings']}, disk hits {s['disk_hits']}, imports {s['imports']}")
    return err


if __name__ == "__main__":
    main()
