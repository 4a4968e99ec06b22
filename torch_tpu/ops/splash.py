"""``splash_sdpa``: TorchTPU's splash-attention entry point (causal, local
window, GQA/MQA), computed by the tpu ``scaled_dot_product_attention``."""
import torch
import torch.nn.functional as F


def splash_sdpa(q, k, v, *, scale=None, is_causal=True, local_window_size=None,
                enable_gqa=False, block_q=512, block_kv=512, block_dkv=512,
                block_kv_compute=512, block_q_dkv=512, block_kv_dkv=512,
                block_kv_dkv_compute=512, block_q_dq=None, block_kv_dq=None,
                use_fused_bwd_kernel=True, use_vmap_bwd=True, q_layout="HEAD_DIM_MINOR",
                k_layout="HEAD_DIM_MINOR", v_layout="HEAD_DIM_MINOR"):
    """Drop-in for ``F.scaled_dot_product_attention`` with TorchTPU's mask
    options. ``q`` (b, h, s, d), ``k``/``v`` (b, h_kv, s, d). Masks: with
    ``local_window_size=w`` query ``i`` sees keys ``i-w .. i`` (causal
    sliding window); else ``is_causal`` (default True) or full attention.
    ``enable_gqa`` must say whether ``h != h_kv`` (GQA/MQA: each group of
    ``h // h_kv`` query heads shares a kv head). ``scale`` defaults to
    ``1/sqrt(d)``. The block-size and layout arguments tune the Pallas kernel
    on real TPUs; they are validated and otherwise unused here. Differentiable
    w.r.t. q, k and v."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"splash_sdpa expects 4D (batch, heads, seq, head_dim) q/k/v, got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    _, n_heads, seq_len, _ = q.shape
    n_kv_heads = k.shape[1]
    if enable_gqa != (n_heads != n_kv_heads):
        raise ValueError(f"enable_gqa ({enable_gqa}) does not match inputs: "
                         f"n_heads={n_heads}, n_kv_heads={n_kv_heads}")
    if n_heads % n_kv_heads:
        raise ValueError(f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv_heads}")
    if k.shape[2] != seq_len or v.shape[2] != seq_len:
        raise ValueError(f"splash_sdpa needs equal q/kv sequence lengths, got {seq_len} and "
                         f"{k.shape[2]}")
    for name, lay in (("q_layout", q_layout), ("k_layout", k_layout), ("v_layout", v_layout)):
        if lay not in ("HEAD_DIM_MINOR", "SEQ_MINOR"):
            raise ValueError(f"{name} must be 'HEAD_DIM_MINOR' or 'SEQ_MINOR', got {lay!r}")
    mask, causal = None, False
    if local_window_size is not None:
        if int(local_window_size) < 0:
            raise ValueError(f"local_window_size must be >= 0, got {local_window_size}")
        i = torch.arange(seq_len, device=q.device)
        dist = i.unsqueeze(1) - i.unsqueeze(0)  # query index - key index
        mask = (dist >= 0) & (dist <= int(local_window_size))
    elif is_causal:
        causal = True
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale,
                                         enable_gqa=n_heads != n_kv_heads)
    return out.to(q.dtype)
