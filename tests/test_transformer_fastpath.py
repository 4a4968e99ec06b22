"""The inference fast path of torch's transformer modules: eval-mode
nn.MultiheadAttention / nn.TransformerEncoderLayer / nn.TransformerEncoder
call aten::_native_multi_head_attention and
aten::_transformer_encoder_layer_fwd, which lower natively
(runtime/src/lower/transformer.c), as do _masked_softmax and
_transform_bias_rescale_qkv. Checked against the same calls on CPU (the CPU
fallback is off in this suite, so a result here is native)."""
import pytest
import torch

from conftest import DEV
from torch_tpu.execution_mode import EagerMode, eager_mode

ops = torch.ops.aten
B, L, E, H = 3, 7, 16, 4


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _params(dtype=torch.float32, seed=0):
    g = _gen(seed)
    return [torch.randn(*s, generator=g).to(dtype) * 0.3
            for s in ((3 * E, E), (3 * E,), (E, E), (E,))]


def _masks():
    g = _gen(5)
    causal = torch.ones(L, L, dtype=torch.bool).triu(1)
    kpm = torch.rand(B, L, generator=g) > 0.6
    kpm[:, 0] = False  # every row keeps a key
    canon = torch.zeros(L, L).masked_fill(causal, float("-inf"))
    generic = (torch.rand(B, H, L, L, generator=g) > 0.5)
    generic[..., 0] = False
    return {  # name: (mask, mask_type)
        "none": (None, None),
        "causal bool": (causal, 0),
        "causal float": (canon, 0),
        "padding": (kpm, 1),
        "generic": (generic, 2),
        "generic float": (generic.float() * -1e4, 2),
    }


def _mha(x, kv, params, mask, mtype, need_weights, average):
    return ops._native_multi_head_attention(x, kv, kv, E, H, *params, mask, need_weights,
                                            average, mtype)


@pytest.mark.parametrize("mask", list(_masks()))
@pytest.mark.parametrize("need_weights,average", [(False, True), (True, True), (True, False)])
def test_native_mha_as_cpu(mask, need_weights, average):
    x = torch.randn(B, L, E, generator=_gen(1))
    params = _params()
    m, mt = _masks()[mask]
    ref_o, ref_w = _mha(x, x, params, m, mt, need_weights, average)
    o, w = _mha(x.to(DEV), x.to(DEV), [p.to(DEV) for p in params],
                None if m is None else m.to(DEV), mt, need_weights, average)
    torch.testing.assert_close(o.cpu(), ref_o, atol=2e-5, rtol=2e-5)
    if need_weights:
        torch.testing.assert_close(w.cpu(), ref_w, atol=2e-6, rtol=2e-5)
    else:
        assert w is None and ref_w is None


def test_native_mha_float64():
    """float64 takes the explicit path (the attention node is f32)."""
    x = torch.randn(B, L, E, generator=_gen(1), dtype=torch.float64)
    params = _params(torch.float64)
    m, mt = _masks()["padding"]
    ref_o, _ = _mha(x, x, params, m, mt, False, True)
    o, w = _mha(x.to(DEV), x.to(DEV), [p.to(DEV) for p in params], m.to(DEV), mt, False, True)
    assert w is None and o.dtype == torch.float64
    torch.testing.assert_close(o.cpu(), ref_o)


def test_cross_attention_and_fully_masked_rows():
    """query != key (three projections); a row with every key masked is
    NaN, as on CPU."""
    x, y = torch.randn(B, L, E, generator=_gen(1)), torch.randn(B, L, E, generator=_gen(2))
    params = _params()
    kpm = torch.zeros(B, L, dtype=torch.bool)
    kpm[1] = True
    for m, mt in ((None, None), (kpm, 1)):
        for nw in (False, True):
            ref_o, ref_w = _mha(x, y, params, m, mt, nw, True)
            o, w = _mha(x.to(DEV), y.to(DEV), [p.to(DEV) for p in params],
                        None if m is None else m.to(DEV), mt, nw, True)
            torch.testing.assert_close(o.cpu(), ref_o, atol=2e-5, rtol=2e-5, equal_nan=True)
            if nw:
                torch.testing.assert_close(w.cpu(), ref_w, atol=2e-6, rtol=2e-5, equal_nan=True)
    assert torch.isnan(o[1]).all() and not torch.isnan(o[0]).any()


@pytest.mark.parametrize("mode", [EagerMode.DEFER_NEVER, EagerMode.DEFER_AND_FUSE])
@pytest.mark.parametrize("need_weights", [False, True])
def test_multihead_attention_module_eval(mode, need_weights):
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True).eval()
    x = torch.randn(B, L, E)
    kpm = torch.zeros(B, L, dtype=torch.bool)
    kpm[0, -2:] = True
    with torch.no_grad():
        ref = mha(x, x, x, key_padding_mask=kpm, need_weights=need_weights)
        mha.to(DEV)
        with eager_mode(mode), torch.tpu._executor_profile() as prof:
            out = mha(x.to(DEV), x.to(DEV), x.to(DEV), key_padding_mask=kpm.to(DEV),
                      need_weights=need_weights)
            torch.tpu.synchronize()
    # without the weights the scores are never stored: one attention node
    assert (" attention float32" in prof.report(50)) != need_weights, prof.report(50)
    torch.testing.assert_close(out[0].cpu(), ref[0], atol=2e-5, rtol=2e-5)
    if need_weights:
        torch.testing.assert_close(out[1].cpu(), ref[1], atol=2e-6, rtol=2e-5)
    else:
        assert out[1] is None


@pytest.mark.parametrize("mode", [EagerMode.DEFER_NEVER, EagerMode.DEFER_AND_FUSE])
@pytest.mark.parametrize("act,norm_first", [("relu", False), ("gelu", True), ("gelu", False)])
def test_transformer_encoder_eval(mode, act, norm_first):
    """nn.TransformerEncoder (two layers) in eval mode: every layer takes
    the _transformer_encoder_layer_fwd fast path, with a causal src_mask."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(E, H, dim_feedforward=32, dropout=0.0,
                                             activation=act, batch_first=True,
                                             norm_first=norm_first)
    enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    x = torch.randn(B, L, E)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(L)
    with torch.no_grad():
        ref = enc(x, mask=causal)
        enc.to(DEV)
        with eager_mode(mode):
            out = enc(x.to(DEV), mask=causal.to(DEV))
            torch.tpu.synchronize()
    torch.testing.assert_close(out.cpu(), ref, atol=3e-5, rtol=3e-5)


def test_encoder_layer_op_bf16_default_precision():
    """bfloat16 weights and input at DEFAULT precision: within bf16
    rounding of CPU's bf16 result."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(E, H, dim_feedforward=32, dropout=0.0,
                                             batch_first=True).eval().to(torch.bfloat16)
    x = torch.randn(B, L, E).to(torch.bfloat16)
    with torch.no_grad(), torch.tpu.precision(torch.tpu.Precision.DEFAULT):
        ref = layer(x)
        out = layer.to(DEV)(x.to(DEV))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.cpu().float(), ref.float(), atol=6e-2, rtol=5e-2)


@pytest.mark.parametrize("dim,mtype,mshape", [(3, 0, (L, L)), (3, 1, (B, L)), (3, 2, (B, H, L, L)),
                                              (1, 2, (B, H, L, L)), (2, 1, (B, L))])
def test_masked_softmax_as_cpu(dim, mtype, mshape):
    x = torch.randn(B, H, L, L, generator=_gen(3))
    m = torch.rand(*mshape, generator=_gen(4)) > 0.6
    ref = ops._masked_softmax(x, m, dim, mtype)
    out = ops._masked_softmax(x.to(DEV), m.to(DEV), dim, mtype)
    torch.testing.assert_close(out.cpu(), ref, equal_nan=True)


def test_transform_bias_rescale_qkv_as_cpu():
    qkv = torch.randn(B, L, 3 * E, generator=_gen(6))
    bias = torch.randn(3 * E, generator=_gen(7))
    ref = ops._transform_bias_rescale_qkv(qkv, bias, H)
    out = ops._transform_bias_rescale_qkv(qkv.to(DEV), bias.to(DEV), H)
    for o, r in zip(out, ref):
        torch.testing.assert_close(o.cpu(), r)


def test_bad_calls_raise_and_recover():
    x = torch.randn(B, L, E)
    params = _params()
    dp = [p.to(DEV) for p in params]
    xd = x.to(DEV)
    cases = [
        (lambda a, p: ops._native_multi_head_attention(a, a, a, E + 1, H, *p), "embed_dim"),
        (lambda a, p: ops._native_multi_head_attention(a, a, a, E, 3, *p), "divide evenly"),
        (lambda a, p: ops._native_multi_head_attention(a[0], a[0], a[0], E, H, *p), "3-D"),
        (lambda a, p: ops._native_multi_head_attention(a, a, a, E, H, p[0][:E], *p[1:]),
         "qkv_weight"),
        (lambda a, p: ops._native_multi_head_attention(a, a, a, E, H, *p,
                                                       torch.zeros(L, L, dtype=torch.bool,
                                                                   device=a.device), False,
                                                       True, None), "Mask Type"),
        (lambda a, p: ops._masked_softmax(a, torch.zeros(B, L, E, device=a.device), 2, 2),
         "boolean"),
    ]
    for fn, msg in cases:
        with pytest.raises(RuntimeError, match=msg):
            fn(x, params)
        with pytest.raises(RuntimeError, match=msg):
            fn(xd, dp)
    o, _ = ops._native_multi_head_attention(xd, xd, xd, E, H, *dp)
    ref, _ = ops._native_multi_head_attention(x, x, x, E, H, *params)
    torch.testing.assert_close(o.cpu(), ref, atol=2e-5, rtol=2e-5)
