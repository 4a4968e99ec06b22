"""OpInfo CI form: PyTorch's op_db samples (float32, <= 5 per op) run on CPU
and on tpu with the CPU fallback disabled; see torch_tpu/opinfo.py.

The full sweep (all dtypes, 10 samples per op) is
``python -m torch_tpu.ops --opinfo --dtypes all --report docs/opinfo_report.md``.
"""
import pytest
import torch

from torch_tpu import opinfo

# Measured float32 pass rate of the CI form (5 samples per OpInfo) when this
# threshold was last raised: see MEASURED_F32. The target is 95%.
# Keep the threshold just below the measured value so regressions fail;
# raise both when lowerings land.
MEASURED_F32 = 0.481
F32_PASS_RATE_MIN = 0.47
ERROR_INPUTS_PASS_RATE_MIN = 0.85  # measured 0.871

# OpInfos that pass every float32 sample of the CI form today (random and
# uninitialised ops excluded: only their shape/dtype is checked). A
# regression in any of them fails test_must_pass.
MUST_PASS = sorted("""
H T __radd__ __rdiv__ __rmatmul__ __rmod__ __rmul__ __rpow__ __rsub__ abs acos acosh add
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
    assert sum(c["skipped"] for c in [sweep.totals()]) <= 20, "time budget cut too many samples"


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
