"""torch.tpu.pallas (issue 16, JAX half): the StableHLO importer runs what
``jax.jit(f).lower()`` produces for jax.numpy / lax functions, Pallas
kernels (interpret=True) and their gradients on tpu tensors, matching JAX on
CPU; jax_op's custom op, autograd, fake kernel, lowering counts and disk
cache."""
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import torch_tpu  # noqa: F401

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax

from torch_tpu import pallas  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))


def _text(f, *avals):
    with jax.enable_x64(True):
        return jax.jit(f, keep_unused=True).lower(*avals).compiler_ir("stablehlo").operation.get_asm(
            print_generic_op_form=True, large_elements_limit=None)


def _jax_ref(f, arrays):
    with jax.enable_x64(True):
        out = jax.jit(f)(*arrays)
    return [np.asarray(o) for o in jax.tree_util.tree_leaves(out)]


def _to_torch(a):
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def _run_both(f, arrays, precision=torch.tpu.Precision.HIGHEST):
    avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays]
    text = _text(f, *avals)
    ts = [_to_torch(a).to("tpu") for a in arrays]
    with torch.tpu.precision(precision):
        run = pallas.import_stablehlo(text, ts)
        outs = [(o.float() if o.dtype == torch.bfloat16 else o).cpu().numpy() for o in run(*ts)]
    return outs, _jax_ref(f, arrays)


rng = np.random.default_rng(0)
X = rng.standard_normal((4, 6)).astype(np.float32)
Y = rng.standard_normal((4, 6)).astype(np.float32)
P = (np.abs(X) + 0.5).astype(np.float32)
U = rng.uniform(-0.9, 0.9, (4, 6)).astype(np.float32)
M = rng.standard_normal((6, 5)).astype(np.float32)
B3 = rng.standard_normal((2, 4, 6)).astype(np.float32)
I = rng.integers(-20, 20, (4, 6)).astype(np.int32)
IDX = np.array([3, 0, 2], np.int32)

# name -> (function, inputs); each is lowered by JAX and imported
FUNCS = {
    "add": (lambda x, y: x + y, [X, Y]),
    "sub_mul_div": (lambda x, y: (x - y) * 3.0 / (y * y + 1.0), [X, Y]),
    "exp": (jnp.exp, [X]),
    "log": (jnp.log, [P]),
    "log1p_expm1": (lambda x: jnp.log1p(x) + jnp.expm1(x), [P]),
    "sqrt_rsqrt": (lambda x: jnp.sqrt(x) + lax.rsqrt(x), [P]),
    "sin_cos_tan": (lambda x: jnp.sin(x) + jnp.cos(x) + jnp.tan(x), [U]),
    "tanh_logistic": (lambda x: jnp.tanh(x) + jax.nn.sigmoid(x), [X]),
    "erf": (lax.erf, [X]),
    "arcsin_arctan": (lambda x: jnp.arcsin(x) + jnp.arctan(x) + jnp.arctan2(x, 0.5), [U]),
    "abs_sign_neg": (lambda x: jnp.abs(x) * jnp.sign(x) - (-x), [X]),
    "floor_ceil_round": (lambda x: jnp.floor(x * 3) + jnp.ceil(x * 3) + jnp.round(x * 3)
                         + lax.round(x * 3, lax.RoundingMethod.AWAY_FROM_ZERO), [X]),
    "maximum_minimum": (lambda x, y: jnp.maximum(x, y) - jnp.minimum(x, y), [X, Y]),
    "power": (lambda x: jnp.power(x, 2.5), [P]),
    "relu_gelu": (lambda x: jax.nn.relu(x) + jax.nn.gelu(x, approximate=False), [X]),
    "softmax": (lambda x: jax.nn.softmax(x, axis=-1), [X]),
    "logsumexp": (lambda x: jax.nn.logsumexp(x, axis=0), [X]),
    "sum_mean": (lambda x: (jnp.sum(x), jnp.mean(x, axis=1), jnp.sum(x, axis=0, keepdims=True)), [X]),
    "max_min_prod": (lambda x: (jnp.max(x, 1), jnp.min(x, 0), jnp.prod(x + 2.0, 1)), [U]),
    "var_std": (lambda x: (jnp.var(x, 0), jnp.std(x, 1)), [X]),
    "argmax_argmin": (lambda x: (jnp.argmax(x, 1), jnp.argmin(x, 0)), [X]),
    "any_all": (lambda x: (jnp.any(x > 1.0, 1), jnp.all(x > -2.0, 0)), [X]),
    "matmul": (lambda x, m: x @ m, [X, M]),
    "einsum_batched": (lambda b: jnp.einsum("bij,bkj->bik", b, b), [B3]),
    "dot_general_batch": (lambda b, m: lax.dot_general(b, m, (((2,), (0,)), ((), ()))), [B3, M]),
    "broadcast": (lambda x: x[:, None, :] + jnp.ones((4, 3, 6), jnp.float32) * x[0], [X]),
    "reshape_transpose": (lambda b: jnp.transpose(b.reshape(8, 6), (1, 0)).reshape(3, 2, 8), [B3]),
    "swapaxes_moveaxis": (lambda b: jnp.moveaxis(jnp.swapaxes(b, 0, 2), 0, 1), [B3]),
    "slicing": (lambda x: (x[1:3, ::2], x[-1], x[:, 4:], lax.slice(x, (0, 1), (4, 6), (2, 2))), [X]),
    "concatenate_stack": (lambda x, y: (jnp.concatenate([x, y], 1), jnp.stack([x, y])), [X, Y]),
    "where_select": (lambda x, y: jnp.where(x > y, x, y * 2), [X, Y]),
    "iota_arange": (lambda x: x + jnp.arange(6, dtype=jnp.float32) + lax.iota(jnp.int32, 4)[:, None], [X]),
    "astype": (lambda x, i: (x.astype(jnp.int32), i.astype(jnp.float32), (x > 0).astype(jnp.float32),
                             i.astype(jnp.int64) * 3), [X, I]),
    "int_ops": (lambda i: (i // 3, i % 7, i * i - 5, jnp.abs(i), i >> 1, i << 2, i & 6, i | 1, i ^ 5), [I]),
    "cumsum_cumprod": (lambda x: (jnp.cumsum(x, 1), jnp.cumsum(x, 0), lax.cummax(x, 1)), [X]),
    "sort": (lambda x: (jnp.sort(x, 1), jnp.sort(x, 0), -jnp.sort(-x, 1)), [X]),
    "argsort": (lambda x: jnp.argsort(x, 1), [X]),
    "take_gather": (lambda x, i: (x[i], jnp.take(x, i, axis=1)), [X, IDX]),
    "scatter_add": (lambda x, i, u, w: (x.at[i].add(u), x.at[:, i].add(w), x.at[i + 2].add(u)),
                    [X, IDX, rng.standard_normal((3, 6)).astype(np.float32),
                     rng.standard_normal((4, 3)).astype(np.float32)]),
    "pad_flip": (lambda x: (jnp.pad(x, ((1, 2), (0, 1))), jnp.flip(x, 1)), [X]),
    "clip": (lambda x: jnp.clip(x, -0.5, 0.5), [X]),
    "fori_loop": (lambda x: lax.fori_loop(0, 5, lambda i, c: c * 0.5 + jnp.sin(c) + i, x), [X]),
    "while_loop_static": (lambda x: lax.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, c[1] @ c[1].T @ c[1] * 0.1),
                                                   (0, x))[1], [X]),
    "scan": (lambda x: lax.scan(lambda c, r: (c + r, c * r), jnp.zeros(6, jnp.float32), x), [X]),
    "cond_device_pred": (lambda x: lax.cond(x.sum() > 0, lambda v: v * 2, lambda v: v - 1, x), [X]),
    "cond_static_pred": (lambda x: lax.cond(True, lambda v: v * 2, lambda v: v - 1, x), [X]),
    "switch": (lambda x, i: lax.switch(i[0] % 3, [lambda v: v, lambda v: v * 2, lambda v: -v], x), [X, IDX]),
    "dynamic_slice": (lambda x, i: (lax.dynamic_slice(x, (i[0], jnp.int32(2)), (2, 3)),
                                    lax.dynamic_update_slice(x, jnp.ones((2, 2), jnp.float32), (i[2], i[1]))),
                      [X, IDX]),
    "layernorm": (lambda x: (x - x.mean(-1, keepdims=True)) * lax.rsqrt(x.var(-1, keepdims=True) + 1e-5), [X]),
    "float64": (lambda x: jnp.exp(x) @ x.T, [X.astype(np.float64)]),
    "bfloat16": (lambda x: (x * 2 + 1).astype(jnp.float32), [X.astype(jnp.bfloat16)]),
    "vmap": (lambda b: jax.vmap(lambda m: m @ m.T)(b), [B3]),
    "grad_of_fn": (jax.grad(lambda x: jnp.sum(jnp.tanh(x) ** 2)), [X]),
}


def _close(a, b, name):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (name, a.shape, b.shape)
    if b.dtype.kind in "biu":
        np.testing.assert_array_equal(a, b, err_msg=name)
    else:
        # bf16 programs: the vTPU rounds every op to bf16 (StableHLO semantics),
        # XLA:CPU keeps fused intermediates in f32
        tol = 1e-2 if name == "bfloat16" or b.dtype.name == "bfloat16" else 1e-5
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=tol, atol=tol,
                                   err_msg=name)


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_jax_function_imports_and_matches_jax(name):
    f, arrays = FUNCS[name]
    outs, refs = _run_both(f, arrays)
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        _close(o, r, name)


def test_at_least_30_functions():
    assert len(FUNCS) >= 30


def test_data_dependent_while_is_not_implemented():
    f = lambda x: lax.while_loop(lambda c: c.sum() < 100.0, lambda c: c * 2.0, x)  # noqa: E731
    text = _text(f, jax.ShapeDtypeStruct((4,), jnp.float32))
    x = torch.ones(4, device="tpu")
    with pytest.raises(NotImplementedError, match="data-dependent trip count"):
        pallas.import_stablehlo(text, [x])


def test_unsupported_op_names_it():
    text = _text(lambda x: jnp.linalg.qr(x)[0], jax.ShapeDtypeStruct((4, 4), jnp.float32))
    with pytest.raises(NotImplementedError, match="stablehlo import"):
        pallas.import_stablehlo(text, [torch.ones(4, 4, device="tpu")])


# ---- Pallas ---------------------------------------------------------------------------------

def test_pallas_flash_attention_example():
    import pallas_flash_attention as ex
    err = ex.main(verbose=False)
    assert err < 2e-5


def test_pallas_kernel_matches_jax():
    from pallas_flash_attention import flash_attention
    q, k, v = (rng.standard_normal((2, 64, 16)).astype(np.float32) for _ in range(3))
    outs, refs = _run_both(lambda a, b, c: flash_attention(a, b, c, block_q=32, block_k=16), [q, k, v])
    _close(outs[0], refs[0], "flash")


def test_pallas_elementwise_kernel():
    from jax.experimental import pallas as pl

    def kern(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0 + jnp.exp(y_ref[...])

    def f(x, y):
        return pl.pallas_call(kern, grid=(2, 3), in_specs=[pl.BlockSpec((4, 8), lambda i, j: (i, j))] * 2,
                              out_specs=pl.BlockSpec((4, 8), lambda i, j: (i, j)),
                              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x, y)
    a, b = (rng.standard_normal((8, 24)).astype(np.float32) for _ in range(2))
    outs, refs = _run_both(f, [a, b])
    _close(outs[0], refs[0], "pallas elementwise")


# ---- jax_op ---------------------------------------------------------------------------------

@pallas.jax_op("pallas_test::softplus_scale")
def softplus_scale(x: jax.Array, y: jax.Array, scale: float = 2.0) -> jax.Array:
    return jnp.logaddexp(x, 0.0) * y * scale


@pallas.jax_op("pallas_test::two_out")
def two_out(x: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
    h = jnp.tanh(x @ w)
    return h, jnp.sum(h * h, axis=-1)


def test_jax_op_forward_matches_torch():
    x, y = torch.randn(5, 7), torch.randn(5, 7)
    out = softplus_scale(x.to("tpu"), y.to("tpu"), 3.0)
    ref = torch.nn.functional.softplus(x) * y * 3.0
    assert out.device.type == "tpu"
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)
    # the CPU path runs JAX itself
    torch.testing.assert_close(softplus_scale(x, y, 3.0), ref, rtol=1e-5, atol=1e-5)


def test_jax_op_lowers_once_per_signature():
    pallas.reset_stats()
    x = torch.randn(3, 4, device="tpu")
    for _ in range(3):
        softplus_scale(x, x)
    s = pallas.stats()
    assert s["lowerings"] + s["disk_hits"] == 1 and s["memory_hits"] == 2 and s["imports"] == 1
    softplus_scale(torch.randn(2, 4, device="tpu"), torch.randn(2, 4, device="tpu"))  # new shape
    softplus_scale(x, x, 5.0)  # new static value
    s = pallas.stats()
    assert s["lowerings"] + s["disk_hits"] == 3
    assert torch.tpu._get_cache_stats()["pallas"]["runs"] == s["runs"]


def test_jax_op_float64_gradcheck():
    x = torch.randn(3, 4, dtype=torch.float64, device="tpu", requires_grad=True)
    y = torch.randn(3, 4, dtype=torch.float64, device="tpu", requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: softplus_scale(a, b, 1.5), (x, y), eps=1e-6, atol=1e-6)


def test_jax_op_grad_matches_pytorch_reference():
    x = torch.randn(4, 6, requires_grad=True)
    w = torch.randn(6, 3, requires_grad=True)
    xt = x.detach().to("tpu").requires_grad_()
    wt = w.detach().to("tpu").requires_grad_()
    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        h, s = two_out(xt, wt)
        (h.sum() * 0.5 + (s * s).sum()).backward()
    hr = torch.tanh(x @ w)
    sr = (hr * hr).sum(-1)
    (hr.sum() * 0.5 + (sr * sr).sum()).backward()
    torch.testing.assert_close(h.cpu(), hr.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(wt.grad.cpu(), w.grad, rtol=1e-4, atol=1e-4)


def test_jax_op_grad_one_output_unused():
    xt = torch.randn(4, 6, device="tpu", requires_grad=True)
    wt = torch.randn(6, 3, device="tpu", requires_grad=True)
    h, _ = two_out(xt, wt)
    h.sum().backward()  # the second output's cotangent is None -> zeros
    x, w = xt.detach().cpu().requires_grad_(), wt.detach().cpu().requires_grad_()
    torch.tanh(x @ w).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-2, atol=1e-2)  # DEFAULT precision


def test_jax_op_fake_and_compile():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.empty(5, 7, device="tpu")
        h, s = two_out(x, torch.empty(7, 2, device="tpu"))
        assert h.shape == (5, 2) and s.shape == (5,) and h.device.type == "tpu"
    f = torch.compile(lambda a, b: softplus_scale(a, b) + 1, backend="tpu")
    a = torch.randn(3, 3)
    torch.testing.assert_close(f(a.to("tpu"), a.to("tpu")).cpu(),
                               torch.nn.functional.softplus(a) * a * 2 + 1, rtol=1e-5, atol=1e-5)


def test_jax_op_fuses_in_fused_eager():
    from torch_tpu.execution_mode import EagerMode, eager_mode
    x = torch.randn(64, device="tpu")
    softplus_scale(x, x)  # lowered + imported
    with eager_mode(EagerMode.DEFER_AND_FUSE):
        torch.tpu.synchronize()
        before = torch.tpu._get_cache_stats()["programs_run"]
        y = softplus_scale(x * 2, x) + 1
        out = y.cpu()
        after = torch.tpu._get_cache_stats()["programs_run"]
    assert after - before == 1  # mul, the jax op and the add ran as one program
    xc = x.cpu()
    torch.testing.assert_close(out, torch.nn.functional.softplus(xc * 2) * xc * 2 + 1, rtol=1e-5, atol=1e-5)


def test_jax_op_signature_errors():
    with pytest.raises(ValueError, match="namespace"):
        pallas.jax_op("nonamespace", lambda x: x)
    with pytest.raises(ValueError, match="annotation"):
        pallas.jax_op("pallas_test::noann", lambda x: x)
    with pytest.raises(NotImplementedError, match="mesh"):
        pallas.jax_op("pallas_test::m", lambda x: x, mesh=object())


def test_get_pallas_mesh_needs_distributed():
    with pytest.raises(RuntimeError, match="not initialized"):
        torch.tpu.pallas.get_pallas_mesh("x")


def test_disk_cache_survives_restart(tmp_path):
    """A second process finds the lowered program on disk: no JAX lowering."""
    script = textwrap.dedent(f"""
        import torch, torch_tpu, jax, jax.numpy as jnp
        from torch_tpu import pallas
        @pallas.jax_op("pallas_disk::f")
        def f(x: jax.Array) -> jax.Array:
            return jnp.sin(x) * 2
        x = torch.arange(6, dtype=torch.float32, device="tpu")
        out = f(x).cpu()
        assert torch.allclose(out, torch.sin(torch.arange(6.0)) * 2, atol=1e-6)
        s = pallas.stats()
        print("STATS", s["lowerings"], s["disk_hits"])
    """)
    env = dict(os.environ, TORCH_TPU_COMPILATION_CACHE_DIR=str(tmp_path / "cache"),
               TORCH_TPU_LOCK_DIR=str(tmp_path / "locks"),  # its own chips
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        res.append([ln for ln in p.stdout.splitlines() if ln.startswith("STATS")][0].split()[1:])
    assert res == [["1", "0"], ["0", "1"]]
    assert list((tmp_path / "cache" / "jax_op").glob("*.json"))
