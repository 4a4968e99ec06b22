"""OpInfo harness: ATen coverage of the tpu backend, proven against CPU.

For every OpInfo in PyTorch's ``op_db`` and every requested dtype the CPU
supports, up to ``max_samples`` samples of ``op.sample_inputs("cpu", dtype)``
run on CPU (the reference) and on copies moved to "tpu", with the CPU
fallback DISABLED and matmul precision HIGHEST. Outputs are compared with
``torch.testing.assert_close`` (dtype, shape and values; ``equal_nan=True``).
``op.error_inputs("cpu")`` must raise the same exception type on tpu.

Every sample gets one status:

- ``pass``        same dtype, shape and values (within tolerance)
- ``fail``        wrong value, dtype, shape or device, or a different exception
- ``unsupported`` NotImplementedError from the disabled fallback; the ATen op
                  named in the message is recorded ("missing ATen op")
- ``error``       any other exception on tpu where the CPU succeeded
- ``random``      random / uninitialised output: only structure, dtype and
                  shape were checked, and they matched (not in the pass rate)
- ``xfail``       a fail/error of an op listed in ``EXPECTED_FAILURES`` (the
                  comparison with CPU is not meaningful; not in the pass rate)
- ``cpu_error``   the CPU reference itself raised (sample not usable)
- ``skipped``     not run because the per-(op, dtype) time budget ran out

pass rate = pass / (pass + fail + unsupported + error).

Run it from a source checkout with ``python -m torch_tpu.ops --opinfo
[--dtypes float32|all] [--report docs/opinfo_report.md]`` (or ``python
tools/opinfo.py [--dtypes ...]``); ``tests/test_opinfo.py`` is the CI form. A
test harness, so it lives in tools/ and is not installed with the package.
"""
import collections
import faulthandler
import math
import re
import sys
import time
import warnings

import torch

# --------------------------------------------------------------------------
# configuration

ALL_DTYPES = (
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
)
DTYPE_NAMES = {d: str(d).replace("torch.", "") for d in ALL_DTYPES}

# (rtol, atol) per dtype; ints and bool are compared exactly.
DEFAULT_TOL = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.complex64: (1.3e-6, 1e-5),   # as float32 / float64, per component
    torch.complex128: (1e-7, 1e-7),
}

# Ops whose float tolerance is widened: {op_name: ({dtype: (rtol, atol)}, reason)}.
# Keep this list small and justified (measured against a float64 reference).
WIDENED_TOL = {
    # e.g. "addbmm": ({torch.float32: (1e-5, 5e-5)}, "why"). Empty: differences
    # that come from CPU rounding more (or summing in another order) are
    # judged against a float64 reference instead (see ref64_check).
}

# Random outputs: CPU and tpu use different generators (tpu: philox), so
# values cannot match. Structure, dtype and shape are still checked.
RANDOM_OPS = {
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal",
    "multinomial", "normal", "normal.in_place", "normal.number_mean",
    "uniform", "rand_like", "randn", "randn_like", "randint", "randint_like",
    "nn.functional.dropout", "nn.functional.dropout2d",
    "nn.functional.dropout3d", "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout.with_train", "nn.functional.rrelu",
    "svd_lowrank", "pca_lowrank",
}
# Ops with some random samples (dropout inside): {op_name: predicate(sample)}.
def _mha_dropout(s):
    return bool(s.kwargs.get("training", True)) and len(s.args) > 9 and \
        isinstance(s.args[9], (int, float)) and s.args[9] > 0


RANDOM_SAMPLES = {
    "nn.functional.scaled_dot_product_attention": lambda s: s.kwargs.get("dropout_p", 0.0) > 0,
    "nn.functional.multi_head_attention_forward": _mha_dropout,
}

# Uninitialised memory: values are meaningless on either device.
UNINITIALIZED_OPS = {
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
    "new_empty_strided",
}

# {op_name or "op_name:dtype": reason}: cases where matching the CPU result
# is not the right goal. Their fail/error samples count as "xfail" (excluded
# from the pass rate, shown in the report); an entry whose samples all pass
# is reported as an unexpected pass so the list gets pruned.
EXPECTED_FAILURES = {
    # e.g. "div.trunc_rounding:bfloat16": "CPU rounds the quotient to bf16 before
    # truncating" (now judged against float64 and passing, so not listed).
}


def expected_failure(name, dtype):
    """The EXPECTED_FAILURES reason for (op, dtype), or None."""
    return EXPECTED_FAILURES.get(name) or EXPECTED_FAILURES.get(f"{name}:{DTYPE_NAMES.get(dtype, dtype)}")


_MISSING_RE = re.compile(r"aten::([\w.]+) has no native tpu implementation")
_COULD_NOT_RUN_RE = re.compile(r"Could not run '(aten::)?([\w.]+)'")
_NOT_IMPL_RE = re.compile(r"^([\w.]+) not implemented")
_DTYPE_RE = re.compile(r"dtype (\w+) is not supported by the vTPU")

STATUSES = ("pass", "fail", "unsupported", "error", "crash", "random", "xfail",
            "cpu_error", "skipped")
RATE_STATUSES = ("pass", "fail", "unsupported", "error", "crash")


def op_full_name(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def load_op_db():
    """PyTorch's OpInfo database (imports torch.testing internals: seconds)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
    return op_db


# --------------------------------------------------------------------------
# tolerances


def _opinfo_tolerance(op, dtype):
    """(rtol, atol): the widest toleranceOverride the OpInfo declares for
    `dtype` on a TestCommon test (test_compare_cpu, test_out, test_numpy_refs,
    ...: tolerances PyTorch accepts between two implementations of the op),
    ignoring MPS-only entries; None if there is none."""
    best = None
    for info in getattr(op, "decorators", ()) or ():
        if not hasattr(info, "decorators"):
            continue
        if getattr(info, "cls_name", None) not in (None, "TestCommon"):
            continue
        if getattr(info, "device_type", None) == "mps" or "mps" in str(getattr(info, "test_name", "")):
            continue
        dts = getattr(info, "dtypes", None)
        if dts is not None and dtype not in dts:
            continue
        for dec in info.decorators:
            d = getattr(dec, "d", None)
            if isinstance(d, dict) and dtype in d:
                t = d[dtype]
                cand = (float(t.rtol), float(t.atol))
                best = cand if best is None else (max(best[0], cand[0]), max(best[1], cand[1]))
    return best


def tolerance(op, dtype, out_dtype=None):
    """(rtol, atol, source) for comparing an output of dtype `out_dtype`
    (default: `dtype`; None for a Python float) of `op` run on `dtype` samples.
    Integer and bool outputs are exact; float outputs use the table for the
    output's dtype (an int sample may give a float output), widened by
    WIDENED_TOL and the OpInfo's own overrides."""
    if out_dtype is None:
        out_dtype = dtype if dtype in DEFAULT_TOL else torch.float32
    if out_dtype not in DEFAULT_TOL:
        return 0.0, 0.0, "exact"
    rtol, atol = DEFAULT_TOL[out_dtype]
    src = "default"
    name = op_full_name(op)
    if name in WIDENED_TOL and out_dtype in WIDENED_TOL[name][0]:
        wr, wa = WIDENED_TOL[name][0][out_dtype]
        rtol, atol, src = max(rtol, wr), max(atol, wa), "widened"
    ov = _opinfo_tolerance(op, dtype if dtype in DEFAULT_TOL else out_dtype)
    if ov is not None and (ov[0] > rtol or ov[1] > atol):
        rtol, atol, src = max(rtol, ov[0]), max(atol, ov[1]), "opinfo"
    return rtol, atol, src


class _Tol:
    """Per (op, sample dtype) tolerance lookup by output dtype (cached)."""

    def __init__(self, op, dtype):
        self.op, self.dtype, self.cache = op, dtype, {}

    def __call__(self, out_dtype):
        if out_dtype not in self.cache:
            self.cache[out_dtype] = tolerance(self.op, self.dtype, out_dtype)[:2]
        return self.cache[out_dtype]


# --------------------------------------------------------------------------
# moving samples to tpu


# Ops whose non-input tensor arguments must stay on the CPU (PyTorch semantics).
KEEP_ARGS_ON_CPU = {
    "tensor_split": "tensor_indices_or_sections must be a CPU tensor",
}


def _to_tpu(x, key=None):
    if isinstance(x, torch.Tensor):
        t = x.detach().to("tpu")
        return t
    if isinstance(x, torch.device):
        return torch.device("tpu") if x.type == "cpu" else x
    if isinstance(x, str) and (x == "cpu" or (key == "device" and x.startswith("cpu"))):
        return "tpu"  # a device spec (e.g. Tensor.to("cpu", ...)): target tpu instead
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # namedtuple
        return type(x)(*(_to_tpu(v) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(_to_tpu(v) for v in x)
    if isinstance(x, dict):
        return {k: _to_tpu(v, k) for k, v in x.items()}
    return x


def _clone_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone(memory_format=torch.preserve_format) if x.layout == torch.strided else x
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(_clone_cpu(v) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(_clone_cpu(v) for v in x)
    if isinstance(x, dict):
        return {k: _clone_cpu(v) for k, v in x.items()}
    return x


# --------------------------------------------------------------------------
# comparison


class Mismatch(Exception):
    pass


def _first_line(s, n=160):
    s = str(s).strip().splitlines()
    s = s[0] if s else ""
    return s if len(s) <= n else s[: n - 3] + "..."


def _mismatch_summary(msg):
    """Condense assert_close's message to one line."""
    lines = [l.strip() for l in str(msg).splitlines() if l.strip()]
    keep = [l for l in lines if l.startswith(("Mismatched elements", "Greatest absolute", "Greatest relative"))]
    if keep:
        return "; ".join(keep)
    return _first_line(msg, 200)


def compare(actual, expected, tol, values=True, path="out"):
    """Raise Mismatch if `actual` (tpu) differs from `expected` (cpu).
    `tol(out_dtype)` -> (rtol, atol); out_dtype None for Python floats."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise Mismatch(f"{path}: expected a Tensor, got {type(actual).__name__}")
        if actual.dtype != expected.dtype:
            raise Mismatch(f"{path}: dtype {actual.dtype} != cpu {expected.dtype}")
        if tuple(actual.shape) != tuple(expected.shape):
            raise Mismatch(f"{path}: shape {tuple(actual.shape)} != cpu {tuple(expected.shape)}")
        if expected.device.type == "cpu" and actual.device.type != "tpu":
            raise Mismatch(f"{path}: result on {actual.device}, expected tpu")
        if expected.layout != torch.strided or actual.layout != torch.strided:
            if actual.layout != expected.layout:
                raise Mismatch(f"{path}: layout {actual.layout} != cpu {expected.layout}")
            return
        if not values:
            return
        a = actual.cpu()
        rtol, atol = tol(expected.dtype)
        try:
            torch.testing.assert_close(a, expected, rtol=rtol, atol=atol, equal_nan=True,
                                       check_device=False)
        except AssertionError as e:
            raise Mismatch(f"{path}: {_mismatch_summary(e)}") from None
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise Mismatch(f"{path}: expected a sequence of {len(expected)}, got {type(actual).__name__}"
                           + (f" of {len(actual)}" if isinstance(actual, (list, tuple)) else ""))
        for i, (a, e) in enumerate(zip(actual, expected)):
            compare(a, e, tol, values, f"{path}[{i}]")
        return
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(actual) != set(expected):
            raise Mismatch(f"{path}: dict keys differ")
        for k in expected:
            compare(actual[k], expected[k], tol, values, f"{path}[{k!r}]")
        return
    if isinstance(expected, bool) or isinstance(expected, (int, float, complex)):
        if isinstance(actual, torch.Tensor) or not isinstance(actual, (bool, int, float, complex)):
            raise Mismatch(f"{path}: expected a Python {type(expected).__name__}, got {type(actual).__name__}")
        if not values:
            return
        if isinstance(expected, float) and math.isnan(expected) and isinstance(actual, float) and math.isnan(actual):
            return
        rtol, atol = tol(None) if isinstance(expected, float) else (0.0, 0.0)
        try:
            torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True,
                                       check_dtype=False)
        except AssertionError as e:
            raise Mismatch(f"{path}: {actual!r} != cpu {expected!r} ({_first_line(e, 80)})") from None
        return
    if expected is None:
        if actual is not None:
            raise Mismatch(f"{path}: expected None, got {type(actual).__name__}")
        return
    # torch.Size, dtype, str, ...
    if type(actual) is not type(expected) or actual != expected:
        raise Mismatch(f"{path}: {actual!r} != cpu {expected!r}")


def _upcast64(x):
    """Float (complex) tensors of any precision -> float64 (complex128)
    copies, recursively."""
    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x.is_complex():
            return x.to(torch.complex128)
        return x.to(torch.float64) if x.is_floating_point() else x.clone()
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(_upcast64(v) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(_upcast64(v) for v in x)
    if isinstance(x, dict):
        return {k: _upcast64(v) for k, v in x.items()}
    return x


def _flat_tensors(x, out):
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _flat_tensors(v, out)
    elif isinstance(x, dict):
        for k in x:
            _flat_tensors(x[k], out)
    else:
        out.append(x)
    return out


def ref64_check(actual, expected, ref, tol):
    """Judge a value mismatch against a float64 reference `ref` (the op run
    on float64 upcasts of the inputs): every float output element must be
    within the usual tolerance of ref plus the CPU's own error,
    |tpu - ref| <= |cpu - ref| + atol + rtol * |ref| (tpu at least as
    accurate as CPU). Non-float outputs must match the CPU exactly.
    Returns (ok, "max |tpu-f64| = .., max |cpu-f64| = ..")."""
    fa, fe, fr = _flat_tensors(actual, []), _flat_tensors(expected, []), _flat_tensors(ref, [])
    if not (len(fa) == len(fe) == len(fr)):
        return False, "float64 reference has a different structure"
    ok, et_max, ec_max, worst = True, 0.0, 0.0, ""
    for a, e, r in zip(fa, fe, fr):
        if not isinstance(e, torch.Tensor):
            if isinstance(e, float) and isinstance(a, (int, float)) and isinstance(r, (int, float)):
                a, e, r = (torch.tensor(float(v), dtype=torch.float64) for v in (a, e, r))
            else:
                if a != e:
                    ok = False
                continue
        if not isinstance(a, torch.Tensor) or not isinstance(r, torch.Tensor) or \
                tuple(r.shape) != tuple(e.shape) or tuple(a.shape) != tuple(e.shape):
            return False, "float64 reference has a different shape"
        a = a.cpu()
        if e.is_complex() and a.is_complex() and r.is_complex():  # judge per component
            a, e, r = (torch.view_as_real(v.resolve_conj()) for v in (a, e, r))
        if not e.is_floating_point():
            if not torch.equal(a, e):
                ok = False
            continue
        rtol, atol = tol(e.dtype)
        a64, e64, r64 = a.to(torch.float64), e.to(torch.float64), r.to(torch.float64)
        et, ec = (a64 - r64).abs(), (e64 - r64).abs()
        same = (a64 == e64) | (a64 == r64) | (torch.isnan(a64) & (torch.isnan(e64) | torch.isnan(r64)))
        excess = et - ec - (atol + rtol * r64.abs())
        good = same | (excess <= 0)
        if not bool(good.all()):
            if ok:  # describe the worst element of the first failing output
                ex = torch.where(good, torch.full_like(excess, -float("inf")),
                                 torch.nan_to_num(excess, nan=float("inf")))
                j = int(ex.flatten().argmax())
                idx = tuple(int(v) for v in torch.unravel_index(torch.tensor(j), e.shape)) if e.dim() else ()
                worst = (f"worst at {idx}: tpu {a64.flatten()[j].item():.6g}, cpu {e64.flatten()[j].item():.6g}, "
                         f"f64 {r64.flatten()[j].item():.6g}")
            ok = False
        fin = torch.isfinite(et) & torch.isfinite(ec)
        if fin.any():
            et_max = max(et_max, float(et[fin].max()))
            ec_max = max(ec_max, float(ec[fin].max()))
    info = f"max |tpu-f64| = {et_max:.3g}, max |cpu-f64| = {ec_max:.3g}"
    return ok, (f"{worst}; {info}" if worst else info)


def _arg(s, pos, key, default):
    """Argument `pos` of sample.args (after the input) or kwargs[key]."""
    if len(s.args) > pos:
        return s.args[pos]
    return s.kwargs.get(key, default)


# Ops returning indices that are ambiguous when the input has ties (PyTorch
# does not define which of equal elements is returned): {op: dim(sample)}.
# Their int64 index outputs are checked by gathering the input at the tpu
# indices instead of comparing indices with CPU's.
TIE_INDEX_OPS = {
    "topk": lambda s: _arg(s, 1, "dim", -1),
    "sort": lambda s: None if s.kwargs.get("stable") else _arg(s, 0, "dim", -1),
    "argsort": lambda s: None if s.kwargs.get("stable") else _arg(s, 0, "dim", -1),
    "kthvalue": lambda s: _arg(s, 1, "dim", -1),
    "mode": lambda s: _arg(s, 0, "dim", -1),
    "median": lambda s: _arg(s, 0, "dim", None),
    "nanmedian": lambda s: _arg(s, 0, "dim", None),
    "max.reduction_with_dim": lambda s: _arg(s, 0, "dim", None),
    "min.reduction_with_dim": lambda s: _arg(s, 0, "dim", None),
}


def tie_index_check(sample, dim, actual, expected, tol):
    """Compare the values output normally; the index output (the last one:
    (values, indices), or argsort's only output) must select, from the input
    along `dim`, the same values CPU's indices select."""
    x = sample.input
    acts = actual if isinstance(actual, (list, tuple)) else (actual,)
    exps = expected if isinstance(expected, (list, tuple)) else (expected,)
    if len(acts) != len(exps):
        raise Mismatch("out: different number of outputs")
    for i, (a, e) in enumerate(zip(acts, exps)):
        path = f"out[{i}]" if isinstance(expected, (list, tuple)) else "out"
        is_index = i == len(exps) - 1  # (values, indices) or argsort's indices
        if not (is_index and isinstance(e, torch.Tensor) and e.dtype == torch.int64
                and isinstance(a, torch.Tensor)):
            compare(a, e, tol, True, path)
            continue
        compare(a, e, tol, False, path)  # dtype/shape/device
        ai, ei = a.cpu(), e
        d = dim if dim >= 0 else dim + max(x.dim(), 1)
        if x.dim() == 0:
            if not torch.equal(ai, ei):
                raise Mismatch(f"{path}: index {ai.tolist()} != cpu {ei.tolist()}")
            continue
        if ai.dim() < x.dim():
            ai, ei = ai.unsqueeze(d), ei.unsqueeze(d)
        ga, ge = x.gather(d, ai), x.gather(d, ei)
        try:
            torch.testing.assert_close(ga, ge, rtol=0, atol=0, equal_nan=True)
        except AssertionError as err:
            raise Mismatch(f"{path}: indices select different values: {_mismatch_summary(err)}") from None


def _classify_exception(e):
    """('unsupported', aten_op) or ('error', message)."""
    msg = str(e)
    m = _MISSING_RE.search(msg)
    if m:
        return "unsupported", m.group(1)
    if isinstance(e, NotImplementedError):
        m = _COULD_NOT_RUN_RE.search(msg)
        if m:
            return "unsupported", m.group(2)
        m = _NOT_IMPL_RE.search(msg)
        if m:  # e.g. convolution_overrideable's default kernel
            return "unsupported", m.group(1)
        m = _DTYPE_RE.search(msg)
        if m:
            return "unsupported", f"<dtype {m.group(1)}>"
        return "unsupported", "?" + _first_line(msg, 60)
    return "error", f"{type(e).__name__}: {_first_line(msg)}"


# --------------------------------------------------------------------------
# the sweep


class OpResult:
    """Per (op, dtype) counts and a few example messages."""

    __slots__ = ("op", "dtype", "counts", "missing", "examples", "seconds", "note")

    def __init__(self, op, dtype):
        self.op = op
        self.dtype = dtype
        self.counts = collections.Counter()
        self.missing = collections.Counter()  # aten op -> samples blocked
        self.examples = []  # (status, message), a few
        self.seconds = 0.0
        self.note = ""

    def to_json(self):
        return {"op": self.op, "dtype": DTYPE_NAMES[self.dtype] if self.dtype is not None else None,
                "counts": dict(self.counts), "missing": dict(self.missing),
                "examples": [list(e) for e in self.examples], "seconds": self.seconds,
                "note": self.note}

    @classmethod
    def from_json(cls, d):
        r = cls(d["op"], getattr(torch, d["dtype"]) if d["dtype"] else None)
        r.counts.update(d["counts"])
        r.missing.update(d["missing"])
        r.examples = [tuple(e) for e in d["examples"]]
        r.seconds, r.note = d["seconds"], d["note"]
        return r

    def add(self, status, detail=None):
        self.counts[status] += 1
        if status == "pass" and detail == "ref64":
            self.counts["pass_ref64"] += 1  # passed against the float64 reference
            return
        if status == "pass" and detail == "ties":
            self.counts["pass_ties"] += 1  # index outputs differ on ties only
            return
        if status == "unsupported" and detail:
            self.missing[detail] += 1
        if status in ("fail", "error", "xfail", "unsupported", "crash") and detail and len(self.examples) < 3:
            if (status, detail) not in self.examples:
                self.examples.append((status, detail))


def _sync():
    torch.tpu.synchronize()


def run_sample(op, sample, dtype, tol, values=True, keep_args_on_cpu=False):
    """Run one sample on CPU and tpu; returns (status, detail)."""
    try:
        if keep_args_on_cpu:
            args_t = (_to_tpu(sample.input), sample.args, sample.kwargs)
        else:
            args_t = _to_tpu((sample.input, sample.args, sample.kwargs))
        _sync()
    except Exception as e:  # moving the inputs is already an ATen op (copy)
        return _classify_exception(e)
    cpu_in = _clone_cpu((sample.input, sample.args, sample.kwargs))
    # Like PyTorch's test_compare_cpu: outputs that are not unique (signs of
    # singular vectors, eigenvector phases) are canonicalised by the
    # sample's output_process_fn_grad (identity for most ops) on both sides.
    post = getattr(sample, "output_process_fn_grad", None) or (lambda x: x)
    try:
        expected = post(op(cpu_in[0], *cpu_in[1], **cpu_in[2]))
    except Exception as e:
        return "cpu_error", f"{type(e).__name__}: {_first_line(e)}"
    try:
        actual = post(op(args_t[0], *args_t[1], **args_t[2]))
        _sync()
    except Exception as e:
        return _classify_exception(e)
    try:
        compare(actual, expected, tol, values)
    except Mismatch as e:
        msg = str(e)
        dim = None
        if values and op_full_name(op) in TIE_INDEX_OPS:
            try:
                dim = TIE_INDEX_OPS[op_full_name(op)](sample)
            except Exception:
                dim = None
        if isinstance(dim, int):
            try:
                tie_index_check(sample, dim, actual, expected, tol)
                return "pass", "ties"
            except Mismatch as e2:
                msg = str(e2)
            except Exception as e2:
                msg += f" (tie check failed: {type(e2).__name__}: {_first_line(e2, 80)})"
        if values and dtype in DEFAULT_TOL and "Mismatched elements" in msg:
            # value mismatch on float samples: judge against a float64 reference
            try:
                f64 = _upcast64((sample.input, sample.args, sample.kwargs))
                ref = post(op(f64[0], *f64[1], **f64[2]))
                ok, info = ref64_check(actual, expected, ref, tol)
            except Exception as e2:
                ok, info = False, f"no float64 reference ({type(e2).__name__})"
            if ok:
                return "pass", "ref64"
            msg = msg.replace(": ", f": [{info}] ", 1)
        return "fail", msg
    except Exception as e:  # reading the result back failed
        st, d = _classify_exception(e)
        return st, "reading result: " + d
    return "pass", None


def run_error_input(op, einput):
    """The tpu must raise the same exception type as the CPU."""
    s = einput.sample_input
    cpu_in = _clone_cpu((s.input, s.args, s.kwargs))
    cpu_exc = None
    try:
        op(cpu_in[0], *cpu_in[1], **cpu_in[2])
    except Exception as e:
        cpu_exc = e
    if cpu_exc is None:
        return "cpu_error", "CPU raised nothing"
    try:
        args_t = _to_tpu((s.input, s.args, s.kwargs))
        op(args_t[0], *args_t[1], **args_t[2])
        _sync()
    except Exception as e:
        if type(e) is type(cpu_exc):
            return "pass", None
        st, d = _classify_exception(e)
        if st == "unsupported":
            return st, d
        return "fail", f"raised {type(e).__name__} (cpu {type(cpu_exc).__name__}): {_first_line(e, 100)}"
    return "fail", f"raised nothing (cpu {type(cpu_exc).__name__}: {_first_line(cpu_exc, 100)})"


class SweepResult:
    def __init__(self, dtypes, max_samples, budget_s):
        self.dtypes = list(dtypes)
        self.max_samples = max_samples
        self.budget_s = budget_s
        self.results = []  # OpResult for samples
        self.error_results = []  # OpResult for error_inputs (dtype None)
        self.ops_tried = 0
        self.ops_total = 0
        self.seconds = 0.0
        self.native_ops = 0
        self.torch_version = torch.__version__
        self.exit_crashes = []  # the sweep process died after finishing its ops
        self.fallback_calls = 0  # CPU fallback calls counted during the sweep (must be 0)

    # ---- aggregation
    def by_dtype(self):
        out = collections.OrderedDict()
        for d in self.dtypes:
            out[d] = collections.Counter()
        for r in self.results:
            out[r.dtype].update(r.counts)
        return out

    def totals(self):
        c = collections.Counter()
        for r in self.results:
            c.update(r.counts)
        return c

    def error_totals(self):
        c = collections.Counter()
        for r in self.error_results:
            c.update(r.counts)
        return c

    @staticmethod
    def rate(c):
        den = sum(c[s] for s in RATE_STATUSES)
        return (c["pass"] / den) if den else float("nan")

    def missing_ops(self):
        c = collections.Counter()
        users = collections.defaultdict(set)
        for r in self.results + self.error_results:
            c.update(r.missing)
            for k in r.missing:
                users[k].add(r.op)
        return c, users

    def per_op(self):
        """{op_name: Counter over all dtypes} for samples."""
        d = collections.defaultdict(collections.Counter)
        for r in self.results:
            d[r.op].update(r.counts)
        return d

    def op_passes_all(self, name, dtype=None):
        rs = [r for r in self.results if r.op == name and (dtype is None or r.dtype == dtype)]
        if not rs:
            return False
        tot = collections.Counter()
        for r in rs:
            tot.update(r.counts)
        bad = sum(tot[s] for s in ("fail", "unsupported", "error", "crash", "skipped"))
        return tot["pass"] > 0 and bad == 0

    def failing_ops(self):
        """[(op, [dtypes], n_bad, n_samples, examples)] worst first, one row
        per OpInfo (dtypes merged); bad = fail + error + crash."""
        agg = collections.OrderedDict()
        for r in self.results:
            bad = r.counts["fail"] + r.counts["error"] + r.counts["crash"]
            if not bad:
                continue
            row = agg.setdefault(r.op, [r.op, [], 0, 0, []])
            row[1].append(r.dtype)
            row[2] += bad
            row[3] += sum(r.counts[s] for s in RATE_STATUSES)
            for e in r.examples:
                if e[0] in ("fail", "error", "crash") and len(row[4]) < 3:
                    row[4].append(e)
        rows = [tuple(v) for v in agg.values()]
        rows.sort(key=lambda x: (-x[2], x[0]))
        return rows


def sweep(dtypes=(torch.float32,), max_samples=5, budget_s=2.0, ops=None,
          error_inputs=True, verbose=False, hang_timeout_s=120, log=None, isolate=True):
    """Run the OpInfo sweep. `ops`: optional iterable of op names to restrict
    to. Returns a SweepResult. No exception from an op stops the sweep.

    isolate=True (default) runs the sweep in a child process (all OpInfos in
    that one process); if the child dies (segfault, abort, hang past
    `hang_timeout_s`) the (op, dtype) it was running is recorded as a
    ``crash`` and a fresh child resumes after it. isolate=False runs in this
    process (a crash then ends the sweep)."""
    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    if not isolate:
        res = SweepResult(dtypes, max_samples, budget_s)
        t0 = time.perf_counter()
        _sweep_inproc(res, dtypes, max_samples, budget_s, ops, error_inputs, verbose,
                      hang_timeout_s, log)
        res.seconds = time.perf_counter() - t0
        return res
    return _sweep_isolated(dtypes, max_samples, budget_s, ops, error_inputs, verbose,
                           hang_timeout_s, log)


def _units(op, dtypes, error_inputs):
    """The work units of one OpInfo: dtype positions, then "E" for error_inputs."""
    try:
        supported = op.supported_dtypes("cpu")
    except Exception:
        supported = set()
    units = [k for k, d in enumerate(dtypes) if d in supported]
    if units and error_inputs and getattr(op, "error_inputs_func", None) is not None:
        units.append(len(dtypes))
    return units


def _sweep_inproc(res, dtypes, max_samples, budget_s, ops, error_inputs, verbose,
                  hang_timeout_s, log, start=(0, 0), emit=None):
    import torch_tpu  # noqa: F401
    from torch_tpu.execution_mode import cpu_fallback_mode

    op_db = load_op_db()
    wanted = set(ops) if ops is not None else None
    res.native_ops = len(torch.tpu.native_ops())
    res.ops_total = len(op_db)
    if emit:
        emit({"meta": {"native_ops": res.native_ops, "ops_total": res.ops_total}})
    fh_enabled = faulthandler.is_enabled()
    if not fh_enabled:
        faulthandler.enable()
    try:
        with warnings.catch_warnings(), cpu_fallback_mode(False), \
                torch.tpu.precision(torch.tpu.Precision.HIGHEST):
            warnings.simplefilter("ignore")
            for i, op in enumerate(op_db):
                if i < start[0]:
                    continue
                name = op_full_name(op)
                if wanted is not None and name not in wanted:
                    continue
                units = _units(op, dtypes, error_inputs)
                if units and not (i == start[0] and start[1] > 0):  # else counted by the previous child
                    res.ops_tried += 1
                    if emit:
                        emit({"tried": name})
                for k in units:
                    if i == start[0] and k < start[1]:
                        continue
                    if emit:
                        emit({"start": [i, k, name]})
                    if hang_timeout_s:
                        faulthandler.dump_traceback_later(hang_timeout_s, exit=True)
                    if k < len(dtypes):
                        r = _sweep_op_dtype(op, name, dtypes[k], max_samples, budget_s)
                        res.results.append(r)
                    else:
                        r = _sweep_error_inputs(op, name, max_samples, budget_s)
                        res.error_results.append(r)
                    if emit:
                        emit({"r": r.to_json()})
                    if verbose:
                        dn = DTYPE_NAMES[r.dtype] if r.dtype is not None else "error_inputs"
                        log(f"[{i + 1}/{len(op_db)}] {name} {dn}: "
                            f"{dict(r.counts)} {r.seconds:.2f}s {r.note}")
    finally:
        if hang_timeout_s:
            faulthandler.cancel_dump_traceback_later()
        if not fh_enabled:
            faulthandler.disable()
        try:
            torch.tpu.synchronize()
        except Exception:
            pass
    try:
        fb = {k: int(v) for k, v in dict(torch.tpu.fallback_counts()).items() if v}
    except Exception:
        fb = {}
    res.fallback_calls = sum(fb.values())
    if emit:
        emit({"fallbacks": fb})
        emit({"done": True})
    return res


def _child_main():
    """Entry of the isolated sweep child: config (JSON) in argv[1]."""
    import json

    cfg = json.loads(sys.argv[1])
    out = open(cfg["out"], "a", buffering=1)

    def emit(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    dtypes = [getattr(torch, d) for d in cfg["dtypes"]]
    res = SweepResult(dtypes, cfg["max_samples"], cfg["budget_s"])
    _sweep_inproc(res, dtypes, cfg["max_samples"], cfg["budget_s"], cfg["ops"],
                  cfg["error_inputs"], cfg["verbose"], cfg["hang_timeout_s"],
                  lambda s: print(s, file=sys.stderr, flush=True),
                  start=tuple(cfg["start"]), emit=emit)
    out.close()


def _sweep_isolated(dtypes, max_samples, budget_s, ops, error_inputs, verbose,
                    hang_timeout_s, log, max_restarts=50):
    import json
    import os
    import shutil
    import subprocess
    import tempfile
    import threading

    t0 = time.perf_counter()
    res = SweepResult(dtypes, max_samples, budget_s)
    tmpdir = tempfile.mkdtemp(prefix="torch_tpu_opinfo_")
    out_path = os.path.join(tmpdir, "results.jsonl")
    env = dict(os.environ)
    # The child gets its own vTPU chips (a private lock dir), so it never
    # collides with this process or other users of the machine.
    env["TORCH_TPU_LOCK_DIR"] = os.path.join(tmpdir, "locks")
    env["TORCH_TPU_CPU_FALLBACK"] = "0"
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    start = [0, 0]
    restarts = 0
    seen = 0
    while True:
        cfg = {"out": out_path, "dtypes": [DTYPE_NAMES[d] for d in dtypes],
               "max_samples": max_samples, "budget_s": budget_s,
               "ops": list(ops) if ops is not None else None, "error_inputs": error_inputs,
               "verbose": verbose, "hang_timeout_s": hang_timeout_s, "start": start}
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.path.insert(0, %r); import opinfo as o; "
             "o._child_main()" % os.path.dirname(os.path.abspath(__file__)), json.dumps(cfg)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
        tail = collections.deque(maxlen=40)

        def pump():
            for line in proc.stderr:
                tail.append(line.rstrip("\n"))
                if verbose:
                    print(line, end="", file=sys.stderr, flush=True)

        th = threading.Thread(target=pump, daemon=True)
        th.start()
        rc = proc.wait()
        th.join(timeout=10)
        with open(out_path) as f:
            lines = f.readlines()
        new, seen = lines[seen:], len(lines)
        running = None
        done = False
        for line in new:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if "meta" in obj:
                res.native_ops = obj["meta"]["native_ops"]
                res.ops_total = obj["meta"]["ops_total"]
            elif "tried" in obj:
                res.ops_tried += 1
            elif "start" in obj:
                running = obj["start"]
            elif "r" in obj:
                r = OpResult.from_json(obj["r"])
                (res.results if r.dtype is not None else res.error_results).append(r)
                running = None
            elif "fallbacks" in obj:
                res.fallback_calls += sum(obj["fallbacks"].values())
            elif "done" in obj:
                done = True
        if done and rc == 0:
            break
        if running is None:
            if done or new:
                # every unit it started finished: it died at exit (teardown)
                why = _crash_reason(rc, tail)
                res.exit_crashes.append(why)
                log(f"opinfo: the sweep process died after its last op ({why})")
                if done:
                    break
                # died between units: resume after the last finished one
                last = None
                for line in new:
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        continue
                    if "start" in obj:
                        last = obj["start"]
                if last is None:
                    break
                start = [last[0], last[1] + 1]
                restarts += 1
                if restarts > max_restarts:
                    break
                continue
            # died before starting a unit (import error, ...): give up
            msg = "\n".join(tail)
            raise RuntimeError(f"OpInfo sweep child exited with {rc} before running an op:\n{msg}")
        i, k, name = running
        dtype = dtypes[k] if k < len(dtypes) else None
        why = _crash_reason(rc, tail)
        r = OpResult(name, dtype)
        r.add("crash", why)
        r.note = "process crashed"
        (res.results if dtype is not None else res.error_results).append(r)
        log(f"opinfo: {name} {DTYPE_NAMES.get(dtype, 'error_inputs')}: CRASH ({why}); restarting after it")
        restarts += 1
        if restarts > max_restarts:
            log("opinfo: too many crashes, stopping")
            break
        start = [i, k + 1]
    res.seconds = time.perf_counter() - t0
    shutil.rmtree(tmpdir, ignore_errors=True)  # the results file and the child's lock dir
    return res


def _crash_reason(rc, tail):
    import signal

    if rc is not None and rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
    else:
        sig = f"exit {rc}"
    lines = [l.strip() for l in tail if l.strip() and not l.startswith(("Extension modules", "  File", "Thread ", "Current thread"))]
    hint = ""
    # glibc / assert / timeout messages first, Python's generic "Fatal Python error" last
    for keys in (("free()", "corrupted", "malloc", "double free", "Assertion", "Timeout", "Segmentation",
                  "terminate called", "what()"),
                 ("Fatal Python error",)):
        for l in lines:
            if any(k in l for k in keys):
                hint = l
                break
        if hint:
            break
    return f"{sig}" + (f": {hint[:150]}" if hint else "")


def _sweep_op_dtype(op, name, dtype, max_samples, budget_s):
    r = OpResult(name, dtype)
    t0 = time.perf_counter()
    deadline = t0 + budget_s
    tol = _Tol(op, dtype)
    random_op = name in RANDOM_OPS or name in UNINITIALIZED_OPS
    xfail = expected_failure(name, dtype)
    n = 0
    try:
        torch.manual_seed(0)
        for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
            if n >= max_samples:
                break
            n += 1
            if time.perf_counter() > deadline:
                r.add("skipped")
                r.note = "time budget"
                continue
            rnd = random_op
            if not rnd and name in RANDOM_SAMPLES:
                try:
                    rnd = bool(RANDOM_SAMPLES[name](sample))
                except Exception:
                    rnd = False
            try:
                status, detail = run_sample(op, sample, dtype, tol, values=not rnd,
                                            keep_args_on_cpu=name in KEEP_ARGS_ON_CPU)
            except Exception as e:  # harness bug or exotic output: never stop the sweep
                status, detail = "error", f"harness: {type(e).__name__}: {_first_line(e)}"
            if rnd and status == "pass":
                status = "random"
            if xfail and status in ("fail", "error"):
                status, detail = "xfail", f"{detail} [expected: {xfail}]"
            r.add(status, detail)
    except Exception as e:
        r.note = f"sample_inputs raised {type(e).__name__}: {_first_line(e, 100)}"
    try:
        torch.tpu.synchronize()
    except Exception:
        pass
    r.seconds = time.perf_counter() - t0
    return r


def _sweep_error_inputs(op, name, max_samples, budget_s):
    r = OpResult(name, None)
    t0 = time.perf_counter()
    deadline = t0 + budget_s
    n = 0
    try:
        for ei in op.error_inputs("cpu"):
            if n >= max_samples:
                break
            n += 1
            if time.perf_counter() > deadline:
                r.add("skipped")
                continue
            try:
                status, detail = run_error_input(op, ei)
            except Exception as e:
                status, detail = "error", f"harness: {type(e).__name__}: {_first_line(e)}"
            r.add(status, detail)
    except Exception as e:
        r.note = f"error_inputs raised {type(e).__name__}: {_first_line(e, 100)}"
    try:
        torch.tpu.synchronize()
    except Exception:
        pass
    r.seconds = time.perf_counter() - t0
    return r


# --------------------------------------------------------------------------
# reporting


def _pct(x):
    return "n/a" if x != x else f"{100 * x:.1f}%"


def format_tables(res, top_missing=30, top_failing=30, markdown=False):
    """The summary as text (markdown tables when markdown=True)."""
    out = []
    P = out.append

    def table(header, rows):
        if markdown:
            P("| " + " | ".join(header) + " |")
            P("|" + "|".join("---" for _ in header) + "|")
            for row in rows:
                P("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |")
        else:
            cols = [header] + [[str(c) for c in row] for row in rows]
            w = [max(len(r[i]) for r in cols) for i in range(len(header))]
            for j, row in enumerate(cols):
                P("  ".join(c.ljust(w[i]) for i, c in enumerate(row)).rstrip())
                if j == 0:
                    P("  ".join("-" * x for x in w))
        P("")

    tot = res.totals()
    P(("## Summary" if markdown else "OpInfo sweep"))
    P("")
    summary = [
        ("torch", res.torch_version),
        ("dtypes", ", ".join(DTYPE_NAMES[d] for d in res.dtypes)),
        ("OpInfos in op_db", res.ops_total),
        ("OpInfos tried", res.ops_tried),
        ("native ATen overloads (torch.tpu.native_ops())", res.native_ops),
        ("max samples per (op, dtype)", res.max_samples),
        ("time budget per (op, dtype)", f"{res.budget_s:g} s"),
        ("samples run", sum(tot[s] for s in STATUSES if s != "skipped")),
        ("overall pass rate", _pct(res.rate(tot))),
        ("sweep time", f"{res.seconds:.0f} s"),
        ("CPU fallback calls during the sweep", res.fallback_calls),
        ("process crashes (ops marked `crash`, then resumed)",
         sum(r.counts["crash"] for r in res.results + res.error_results)),
    ]
    if res.exit_crashes:
        summary.append(("crashes at process exit", "; ".join(res.exit_crashes)))
    table(["", "value"], summary)

    P("### Samples per dtype" if markdown else "Samples per dtype")
    P("")
    rows = []
    for d, c in res.by_dtype().items():
        nops = sum(1 for r in res.results if r.dtype == d)
        rows.append([DTYPE_NAMES[d], nops] + [c[s] for s in STATUSES]
                    + [c["pass_ref64"], c["pass_ties"], _pct(res.rate(c))])
    rows.append(["all", len(res.results)] + [tot[s] for s in STATUSES]
                + [tot["pass_ref64"], tot["pass_ties"], _pct(res.rate(tot))])
    table(["dtype", "ops"] + list(STATUSES) + ["(pass by f64 ref)", "(pass, index ties)", "pass rate"], rows)
    if markdown:
        P("pass rate = pass / (pass + fail + unsupported + error); `random` = random or "
          "uninitialised output, shape/dtype checked only; `(pass by f64 ref)` = of the passes, "
          "samples whose tpu result differs from CPU beyond tolerance but is at least as close "
          "to a float64 reference as CPU's (|tpu-f64| <= |cpu-f64| + tol, elementwise); "
          "`(pass, index ties)` = of the passes, samples whose index output differs from CPU's "
          "only between equal elements (topk, sort, kthvalue, ...: the gathered values match); "
          "`xfail` = listed in "
          "`EXPECTED_FAILURES`; `cpu_error` = the CPU reference raised; `skipped` = "
          "time budget.")
        P("")

    et = res.error_totals()
    if res.error_results:
        P("### error_inputs (same exception type as CPU)" if markdown else "error_inputs (same exception type as CPU)")
        P("")
        table(["ops", "pass", "fail", "unsupported", "error", "crash", "cpu_error", "skipped", "pass rate"],
              [[len(res.error_results), et["pass"], et["fail"], et["unsupported"], et["error"],
                et["crash"], et["cpu_error"], et["skipped"], _pct(res.rate(et))]])

        erows = []
        for r in res.error_results:
            bad = r.counts["fail"] + r.counts["error"] + r.counts["crash"]
            if bad:
                ex = [e for e in r.examples if e[0] in ("fail", "error", "crash")]
                erows.append([r.op, bad, _first_line(ex[0][1], 200) if ex else ""])
        if erows:
            P("error_inputs with a different (or no) exception on tpu:")
            P("")
            table(["OpInfo", "bad", "first message"], erows)

    miss, users = res.missing_ops()
    P(f"### Top {top_missing} missing ATen ops (samples blocked)" if markdown
      else f"Top {top_missing} missing ATen ops (samples blocked)")
    P("")
    rows = []
    for k, n in miss.most_common(top_missing):
        u = sorted(users[k])
        label = k if k.startswith(("<", "?")) else f"aten::{k}"
        rows.append([label, n, len(u), ", ".join(u[:6]) + (" ..." if len(u) > 6 else "")])
    table(["ATen op", "samples", "OpInfos", "e.g."], rows)

    fails = res.failing_ops()
    P(f"### Top {top_failing} failing OpInfos (wrong result or error)" if markdown
      else f"Top {top_failing} failing OpInfos (wrong result or error)")
    P("")
    rows = []
    for op, dts, bad, n, ex in fails[:top_failing]:
        msg = ex[0][1] if ex else ""
        dn = ", ".join(DTYPE_NAMES[d] for d in dts) if len(dts) < len(res.dtypes) or len(dts) == 1 else "all"
        rows.append([op, dn, f"{bad}/{n}", ex[0][0] if ex else "", _first_line(msg, 240)])
    table(["OpInfo", "dtypes", "bad/samples", "kind", "first message (first failing dtype)"], rows)
    return "\n".join(out)


def format_markdown(res, command=None):
    XF, WT = EXPECTED_FAILURES, WIDENED_TOL
    out = ["# OpInfo coverage report", ""]
    out.append("Generated by `tools/opinfo.py`"
               + (f" with `{command}`" if command else "") + ". Every OpInfo of PyTorch's "
               "`op_db` runs its samples on CPU and on tpu (CPU fallback disabled, precision "
               "HIGHEST) and the outputs are compared (dtype, shape, values).")
    out.append("")
    out.append(format_tables(res, markdown=True))
    out.append("### Per-OpInfo status")
    out.append("")
    per = res.per_op()
    full, partial, none_ = [], [], []
    for op, c in sorted(per.items()):
        bad = sum(c[s] for s in ("fail", "unsupported", "error", "crash"))
        if c["pass"] + c["random"] > 0 and bad == 0:
            full.append(op)
        elif c["pass"] > 0:
            partial.append(op)
        else:
            none_.append(op)
    out.append(f"- fully passing ({len(full)}): " + ", ".join(f"`{x}`" for x in full))
    out.append(f"- partially passing ({len(partial)}): " + ", ".join(f"`{x}`" for x in partial))
    out.append(f"- no passing sample ({len(none_)}): " + ", ".join(f"`{x}`" for x in none_))
    out.append("")
    out.append("### Expected failures and widened tolerances")
    out.append("")
    if XF:
        for k, v in sorted(XF.items()):
            name, _, dname = k.partition(":")
            rs = [r for r in res.results if r.op == name and (not dname or DTYPE_NAMES[r.dtype] == dname)]
            c = collections.Counter()
            for r in rs:
                c.update(r.counts)
            state = ("not run" if not rs else
                     f"{c['xfail']} xfail, {c['pass']} pass" + (" (UNEXPECTED PASS: remove the entry)"
                                                                 if c["pass"] and not c["xfail"] else ""))
            out.append(f"- `{k}` ({state}): {v}")
    else:
        out.append("- (no expected failures)")
    for k, (tols, why) in sorted(WT.items()):
        t = ", ".join(f"{DTYPE_NAMES[d]} rtol={r:g} atol={a:g}" for d, (r, a) in tols.items())
        out.append(f"- tolerance `{k}` ({t}): {why}")
    out.append(f"- random / uninitialised (shape/dtype only): "
               + ", ".join(f"`{x}`" for x in sorted(RANDOM_OPS | UNINITIALIZED_OPS)))
    out.append(f"- random only for samples with dropout > 0 (shape/dtype only): "
               + ", ".join(f"`{x}`" for x in sorted(RANDOM_SAMPLES)))
    out.append("")
    return "\n".join(out)


def fully_passing(res, dtype=torch.float32):
    """OpInfos whose `dtype` samples all pass (at least one pass; no fail,
    unsupported, error, crash, xfail or skipped sample)."""
    out = []
    for r in res.results:
        if r.dtype != dtype:
            continue
        c = r.counts
        if c["pass"] > 0 and not any(c[k] for k in ("fail", "unsupported", "error", "crash",
                                                      "xfail", "skipped")):
            out.append(r.op)
    return sorted(set(out))


def save_json(res, path):
    import json

    with open(path, "w") as f:
        json.dump({"dtypes": [DTYPE_NAMES[d] for d in res.dtypes], "max_samples": res.max_samples,
                   "budget_s": res.budget_s, "ops_total": res.ops_total, "ops_tried": res.ops_tried,
                   "native_ops": res.native_ops, "seconds": res.seconds, "torch": res.torch_version,
                   "exit_crashes": res.exit_crashes, "fallback_calls": res.fallback_calls,
                   "results": [r.to_json() for r in res.results],
                   "error_results": [r.to_json() for r in res.error_results]}, f, indent=0)


def load_json(path):
    import json

    with open(path) as f:
        d = json.load(f)
    res = SweepResult([getattr(torch, x) for x in d["dtypes"]], d["max_samples"], d["budget_s"])
    for k in ("ops_total", "ops_tried", "native_ops", "seconds", "exit_crashes"):
        setattr(res, k, d[k])
    res.fallback_calls = d.get("fallback_calls", 0)
    res.torch_version = d["torch"]
    res.results = [OpResult.from_json(x) for x in d["results"]]
    res.error_results = [OpResult.from_json(x) for x in d["error_results"]]
    return res


def parse_dtypes(spec):
    if spec in (None, "", "float32"):
        return [torch.float32]
    if spec == "all":
        return list(ALL_DTYPES)
    out = []
    for s in spec.split(","):
        d = getattr(torch, s.strip(), None)
        if not isinstance(d, torch.dtype):
            raise ValueError(f"unknown dtype {s!r}")
        out.append(d)
    return out


def main(dtypes="float32", report=None, max_samples=None, budget_s=None, ops=None,
         verbose=False, command=None, json_path=None, hang_timeout_s=None):
    """CLI entry (used by ``python -m torch_tpu.ops --opinfo`` and ``python tools/opinfo.py``)."""
    dts = parse_dtypes(dtypes)
    full = len(dts) > 1
    if max_samples is None:
        max_samples = 5 if not full else 10
    if budget_s is None:
        budget_s = 2.0 if not full else 5.0
    if hang_timeout_s is None:
        hang_timeout_s = 60 if not full else 120
    res = sweep(dts, max_samples=max_samples, budget_s=budget_s, ops=ops, verbose=verbose,
                hang_timeout_s=hang_timeout_s)
    print(format_tables(res))
    if report:
        with open(report, "w") as f:
            f.write(format_markdown(res, command=command))
        print(f"report written to {report}")
    if json_path:
        save_json(res, json_path)
        print(f"results written to {json_path}")
    return res


if __name__ == "__main__":  # python tools/opinfo.py ARGS = python -m torch_tpu.ops --opinfo ARGS
    import os

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from torch_tpu.ops.__main__ import main as _ops_main

    sys.exit(_ops_main(["--opinfo"] + sys.argv[1:]))
