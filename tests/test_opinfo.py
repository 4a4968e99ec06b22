"""OpInfo CI form: PyTorch's op_db samples (float32, <= 5 per op) run on CPU
and on tpu with the CPU fallback disabled; see tools/opinfo.py.

The full sweep (all dtypes, 10 samples per op) is
``python -m torch_tpu.ops --opinfo --dtypes all --report docs/opinfo_report.md``.
"""
import os
import sys

import pytest
import torch

# the harness is tools/opinfo.py (a tool of the checkout, not in the package)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import opinfo  # noqa: E402

# Float32 pass rate of this CI form (5 samples per OpInfo), measured when the
# threshold was last raised: 98.8% (2717 pass / 2751; 677 OpInfos, 1057 native
# ATen overloads). The target is 95%. The threshold sits just below
# the measured value so regressions fail; raise both as lowerings land.
MEASURED_F32 = 0.988
F32_PASS_RATE_MIN = 0.975
ERROR_INPUTS_PASS_RATE_MIN = 0.97  # measured 0.992 (522 / 526)

# OpInfos that pass every float32 sample of the CI form today (random and
# uninitialised ops excluded: only their shape/dtype is checked). A
# regression in any of them fails test_must_pass.
MUST_PASS = sorted("""
H T __getitem__ __radd__ __rdiv__ __rmatmul__ __rmod__ __rmul__ __rpow__ __rsub__
_batch_norm_with_update _chunk_cat _native_batch_norm_legit _segment_reduce.lengths
_segment_reduce.offsets _softmax_backward_data _unsafe_masked_index
_unsafe_masked_index_put_accumulate _upsample_bilinear2d_aa abs acos acosh add addbmm addcdiv
addcmul addmm addmm.decomposed addmv addr alias_copy all allclose amax amin aminmax angle any
arange argmax argmin argsort argwhere as_strided as_strided.partial_views as_strided_copy
as_strided_scatter asin asinh atan atan2 atanh atleast_1d atleast_2d atleast_3d baddbmm
bfloat16 block_diag bmm bmm.triton_optimized bool broadcast_shapes broadcast_tensors
broadcast_to bucketize byte cartesian_prod cat cdist cdouble ceil cfloat char cholesky
cholesky_inverse cholesky_solve chunk clamp clamp_max clamp_min clone column_stack combinations
complex conj conj_physical constant_pad_nd contiguous copysign corrcoef cos cosh count_nonzero
cov cross cummax cummin cumprod cumsum cumulative_trapezoid deg2rad diag diag_embed diagflat
diagonal diagonal_copy diagonal_scatter diff digamma dist div.floor_rounding
div.no_rounding_mode div.trunc_rounding dot double dsplit dstack einsum eq equal erf erfc
erfinv exp exp2 expand expand_as expand_copy expm1 eye fft.fft fft.fft2 fft.fftn fft.fftshift
fft.hfft fft.hfft2 fft.hfftn fft.ifft fft.ifft2 fft.ifftn fft.ifftshift fft.ihfft fft.ihfft2
fft.ihfftn fft.irfft fft.irfft2 fft.irfftn fft.rfft fft.rfft2 fft.rfftn fill flatten flip
fliplr flipud float float_power floor floor_divide fmax fmin fmod frac frexp full full_like
gather ge geqrf gradient grid_sampler_2d grid_sampler_3d gt half heaviside histc histogram
histogramdd hsplit hstack hypot i0 igamma igammac index_add index_copy index_fill index_put
index_reduce.amax index_reduce.amin index_reduce.mean index_reduce.prod index_select inner int
isclose isfinite isin isinf isnan isneginf isposinf isreal item kron kthvalue ldexp le lerp
lgamma linalg.cholesky linalg.cholesky_ex linalg.cond linalg.cross linalg.det linalg.diagonal
linalg.eigh linalg.eigvalsh linalg.householder_product linalg.inv linalg.inv_ex
linalg.ldl_factor linalg.ldl_factor_ex linalg.ldl_solve linalg.lstsq linalg.lstsq.grad_oriented
linalg.lu linalg.lu_factor linalg.lu_factor_ex linalg.lu_solve linalg.matrix_norm
linalg.matrix_power linalg.matrix_rank linalg.matrix_rank.hermitian linalg.multi_dot
linalg.norm linalg.norm.subgradients_at_zero linalg.pinv linalg.pinv.hermitian
linalg.pinv.singular linalg.qr linalg.slogdet linalg.solve linalg.solve_ex
linalg.solve_triangular linalg.svd linalg.svdvals linalg.tensorinv linalg.tensorsolve
linalg.vander linalg.vecdot linalg.vector_norm linspace linspace.tensor_overload log log10
log1p log2 log_softmax log_softmax.with_dtype logaddexp logaddexp2 logcumsumexp logdet
logical_and logical_not logical_or logical_xor logit logspace logspace.tensor_overload
logsumexp long lt lu lu_solve lu_unpack mH mT masked.amax masked.amin masked.argmax
masked.argmin masked.cumprod masked.cumsum masked.log_softmax masked.logaddexp masked.logsumexp
masked.mean masked.median masked.norm masked.normalize masked.prod masked.softmax
masked.softmin masked.std masked.sum masked.var masked_fill masked_scatter masked_select matmul
matrix_exp max.binary max.reduction_no_dim max.reduction_with_dim
max_pool2d_with_indices_backward maximum mean median meshgrid.list_of_tensors
meshgrid.variadic_tensors min.binary min.reduction_no_dim min.reduction_with_dim minimum mm
mode movedim msort mul mv mvlgamma.mvlgamma_p_1 mvlgamma.mvlgamma_p_3 mvlgamma.mvlgamma_p_5
nan_to_num nanmean nanmedian nanquantile nansum narrow narrow_copy native_batch_norm
native_dropout_backward native_group_norm native_layer_norm ne neg new_full new_ones new_zeros
nextafter nn.functional.adaptive_avg_pool1d nn.functional.adaptive_avg_pool2d
nn.functional.adaptive_avg_pool3d nn.functional.adaptive_max_pool1d
nn.functional.adaptive_max_pool2d nn.functional.adaptive_max_pool3d nn.functional.avg_pool1d
nn.functional.avg_pool2d nn.functional.avg_pool3d nn.functional.batch_norm
nn.functional.bilinear nn.functional.binary_cross_entropy
nn.functional.binary_cross_entropy_with_logits nn.functional.celu nn.functional.channel_shuffle
nn.functional.conv1d nn.functional.conv2d nn.functional.conv3d nn.functional.conv_transpose1d
nn.functional.conv_transpose2d nn.functional.conv_transpose3d
nn.functional.cosine_embedding_loss nn.functional.cosine_similarity nn.functional.cross_entropy
nn.functional.ctc_loss nn.functional.elu nn.functional.embedding nn.functional.embedding_bag
nn.functional.feature_alpha_dropout.without_train nn.functional.fractional_max_pool2d
nn.functional.gaussian_nll_loss nn.functional.gelu nn.functional.glu nn.functional.grid_sample
nn.functional.group_norm nn.functional.hardshrink nn.functional.hardsigmoid
nn.functional.hardswish nn.functional.hardtanh nn.functional.hinge_embedding_loss
nn.functional.huber_loss nn.functional.instance_norm nn.functional.interpolate.area
nn.functional.interpolate.bicubic nn.functional.interpolate.bilinear
nn.functional.interpolate.linear nn.functional.interpolate.nearest
nn.functional.interpolate.nearest-exact nn.functional.interpolate.trilinear
nn.functional.kl_div nn.functional.l1_loss nn.functional.layer_norm nn.functional.leaky_relu
nn.functional.linear nn.functional.linear_cross_entropy
nn.functional.linear_cross_entropy.chunked nn.functional.linear_cross_entropy.chunked_none
nn.functional.local_response_norm nn.functional.logsigmoid nn.functional.margin_ranking_loss
nn.functional.max_pool1d nn.functional.max_pool2d nn.functional.max_pool3d
nn.functional.max_unpool1d nn.functional.max_unpool1d.grad nn.functional.max_unpool2d
nn.functional.max_unpool2d.grad nn.functional.max_unpool3d nn.functional.max_unpool3d.grad
nn.functional.mish nn.functional.mse_loss nn.functional.multi_head_attention_forward
nn.functional.multi_margin_loss nn.functional.multilabel_margin_loss
nn.functional.multilabel_soft_margin_loss nn.functional.nll_loss nn.functional.normalize
nn.functional.pad.circular nn.functional.pad.constant nn.functional.pad.reflect
nn.functional.pad.replicate nn.functional.pad.replicate_negative
nn.functional.pairwise_distance nn.functional.pdist nn.functional.pixel_shuffle
nn.functional.pixel_unshuffle nn.functional.poisson_nll_loss nn.functional.prelu
nn.functional.relu nn.functional.relu6 nn.functional.rms_norm
nn.functional.scaled_dot_product_attention nn.functional.selu nn.functional.silu
nn.functional.smooth_l1_loss nn.functional.soft_margin_loss nn.functional.softmin
nn.functional.softmin.with_dtype nn.functional.softplus nn.functional.softshrink
nn.functional.softsign nn.functional.tanhshrink nn.functional.threshold
nn.functional.triplet_margin_loss nn.functional.triplet_margin_with_distance_loss
nn.functional.unfold nn.functional.upsample_bilinear nn.functional.upsample_nearest nonzero
nonzero_static norm norm.fro norm.inf norm.nuc ones ones_like ormqr outer permute permute_copy
pinverse polar polygamma.polygamma_n_0 polygamma.polygamma_n_1 polygamma.polygamma_n_2
polygamma.polygamma_n_3 polygamma.polygamma_n_4 positive pow prod put qr quantile rad2deg ravel
real reciprocal remainder renorm repeat repeat_interleave reshape reshape_as resize_ resize_as_
resolve_conj resolve_neg roll rot90 round round.decimals_0 round.decimals_3
round.decimals_neg_3 rsqrt rsub scalar_tensor scatter scatter_add scatter_reduce.amax
scatter_reduce.amin scatter_reduce.mean scatter_reduce.prod scatter_reduce.sum searchsorted
select select_scatter sgn short sigmoid sign signal.windows.bartlett signal.windows.blackman
signal.windows.cosine signal.windows.exponential signal.windows.gaussian
signal.windows.general_cosine signal.windows.general_hamming signal.windows.hamming
signal.windows.hann signal.windows.kaiser signal.windows.nuttall signbit sin sinc sinh slice
slice_scatter softmax softmax.with_dtype sort special.airy_ai special.bessel_j0
special.bessel_j1 special.bessel_y0 special.bessel_y1 special.chebyshev_polynomial_t
special.chebyshev_polynomial_u special.chebyshev_polynomial_v special.chebyshev_polynomial_w
special.entr special.erfcx special.hermite_polynomial_h special.hermite_polynomial_he
special.i0e special.i1 special.i1e special.laguerre_polynomial_l special.legendre_polynomial_p
special.log_ndtr special.modified_bessel_i0 special.modified_bessel_i1
special.modified_bessel_k0 special.modified_bessel_k1 special.ndtr special.ndtri
special.polygamma.special_polygamma_n_0 special.scaled_modified_bessel_k0
special.scaled_modified_bessel_k1 special.shifted_chebyshev_polynomial_t
special.shifted_chebyshev_polynomial_u special.shifted_chebyshev_polynomial_v
special.shifted_chebyshev_polynomial_w special.spherical_bessel_j0 special.xlog1py special.zeta
split split.list_args split_with_sizes split_with_sizes_copy sqrt square squeeze
squeeze.multiple squeeze_copy stack std std.unbiased std_mean std_mean.unbiased stft sub sum
sum_to_size svd t t_copy take take_along_dim tan tanh tensor_split tensordot tile to topk
torch.ops.aten._safe_softmax.default trace transpose transpose_copy trapezoid trapz
triangular_solve tril triu true_divide trunc unbind unbind_copy unflatten unfold unfold_copy
unique unique_consecutive unsafe_chunk unsafe_split unsqueeze unsqueeze_copy var var.unbiased
var_mean var_mean.unbiased vdot view view_as view_as_complex view_copy vsplit vstack where
xlogy zero_ zeros zeros_like
""".split())

_SWEEP = {}


@pytest.fixture(scope="module")
def sweep():
    if "res" not in _SWEEP:
        _SWEEP["res"] = opinfo.sweep([torch.float32], max_samples=5, budget_s=4.0, hang_timeout_s=60)
        print("\n" + opinfo.format_tables(_SWEEP["res"], top_missing=10, top_failing=10))
    return _SWEEP["res"]


def test_float32_pass_rate(sweep):
    c = sweep.by_dtype()[torch.float32]
    rate = sweep.rate(c)
    assert rate >= F32_PASS_RATE_MIN, (
        f"float32 OpInfo pass rate {rate:.3f} < {F32_PASS_RATE_MIN} (measured {MEASURED_F32}); "
        f"counts {dict(c)}\n" + opinfo.format_tables(sweep, top_missing=15, top_failing=15))


def test_error_inputs_rate(sweep):
    c = sweep.error_totals()
    rate = sweep.rate(c)
    assert rate >= ERROR_INPUTS_PASS_RATE_MIN, (rate, dict(c))


def test_sweep_covers_op_db(sweep):
    assert sweep.ops_tried >= 650, sweep.ops_tried  # 677 OpInfos have float32 samples
    assert sweep.totals()["skipped"] <= 20, "time budget cut too many samples"
    assert sweep.fallback_calls == 0, "the CPU fallback ran during the sweep (it must be disabled)"


@pytest.mark.parametrize("name", MUST_PASS)
def test_must_pass(sweep, name):
    rs = [r for r in sweep.results if r.op == name and r.dtype == torch.float32]
    assert rs, f"{name}: not in op_db / not run"
    c = rs[0].counts
    bad = {k: c[k] for k in ("fail", "unsupported", "error", "xfail") if c[k]}
    assert not bad and c["pass"] > 0, f"{name}: {dict(c)} {rs[0].examples} {rs[0].note}"


# ---- the harness itself (fast, no sweep)


def test_classify_missing_op_message():
    e = NotImplementedError(
        "torch_tpu: aten::foo.out has no native tpu implementation and the CPU fallback is disabled")
    assert opinfo._classify_exception(e) == ("unsupported", "foo.out")
    assert opinfo._classify_exception(RuntimeError("boom"))[0] == "error"


def test_compare_detects_dtype_shape_value():
    tol = lambda d: (1.3e-6, 1e-5)  # noqa: E731
    x = torch.arange(4.0)
    opinfo.compare(x.to("tpu"), x, tol)
    opinfo.compare((x.to("tpu"), 3), (x, 3), tol)
    for bad in (x.double().to("tpu"), x[:3].to("tpu"), (x + 1).to("tpu")):
        with pytest.raises(opinfo.Mismatch):
            opinfo.compare(bad, x, tol)
    nan = torch.tensor([float("nan"), 1.0])
    opinfo.compare(nan.to("tpu"), nan, tol)


def test_int_sample_float_output_uses_float_tolerance():
    db = {opinfo.op_full_name(o): o for o in opinfo.load_op_db()}
    assert opinfo.tolerance(db["add"], torch.int32, torch.int32)[:2] == (0.0, 0.0)
    assert opinfo.tolerance(db["add"], torch.int32, torch.float32)[:2] == opinfo.DEFAULT_TOL[torch.float32]
