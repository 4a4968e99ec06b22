"""Bounded dynamism for ``torch.compile(backend="tpu")``: one program per
*bucket* of a dynamic dimension, exact results by padding and masking.

A dimension marked dynamic (``torch._dynamo.mark_dynamic(x, d, min=.., max=..)``,
or any dynamic dimension when ``torch.compile(..., options={"num_dynamic_buckets":
k, "bucket_size": s})`` is given: TorchTPU's option names and bucket policy) is
rounded up to its bucket's upper bound; the graph runs on the padded tensors,
with the true length ``n`` passed as a device scalar, so every length of a
bucket replays the same program.

Padding is exact only where no op mixes positions along the padded dimension.
:func:`plan` proves it over the ATen-level FX graph AOTAutograd hands the tpu
compilers (symbolic shapes in ``node.meta["val"]``), tracking per tensor which
dimensions hold the symbol ``S`` (also dimensions merged from it by a view,
``[B, S, D] -> [B*S, D]``, and shifted ones, ``S - 1`` after a slice):

* per-position ops (elementwise, layer_norm over other dims, matmuls that do
  not contract ``S``, embedding, causal ops along ``S`` such as cumsum, tril)
  keep garbage in the pad region and the exact values in the valid one;
* ops that reduce or contract over ``S`` get their operands masked with
  ``torch.where(pos < n, x, neutral)`` first (sum/mean: 0, mean divides by the
  true count; amax: -inf; softmax: -inf; matmul/bmm/layer_norm_backward/
  embedding_backward: 0 on every operand, never a multiply, so inf/nan in the
  pad region cannot leak; nll_loss: targets become ``ignore_index``);
* symbolic ints used as *values* (``x / x.shape[1]``, the ``1/S`` of a mean's
  backward) are computed from ``n`` on the device;
* user-visible outputs are sliced back to ``n``; tensors saved for the
  backward stay padded (the backward graph is planned with the forward's
  layouts); incoming tangents and user inputs are padded.

Any op the analysis does not know, or a use it cannot prove safe, refuses the
graph: it then compiles per exact length as before (counted, with the reason,
in ``torch.tpu._get_cache_stats()["compile"]``; ``TORCH_TPU_COMPILE_DEBUG=1``
prints the node). Never a wrong result.
"""
import functools
import math
import threading

import sympy
import torch

aten = torch.ops.aten

KNOWN_OPTIONS = ("num_dynamic_buckets", "bucket_size")
_MAX_DYNAMIC_BUCKETS = 8  # TorchTPU's limit

_tls = threading.local()


def validate_options(options):
    """TorchTPU's ``torch.compile(..., options=...)`` keys for dynamic buckets
    (same checks and messages); returns the normalised dict."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise TypeError(f"torch.compile(backend='tpu'): options must be a dict, got "
                        f"{type(options).__name__}")
    out = {}
    for k, v in options.items():
        if k == "num_dynamic_buckets":
            v = 1 if v is None else v
            if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= _MAX_DYNAMIC_BUCKETS:
                raise ValueError("`num_dynamic_buckets` must be an integer between 1 and"
                                 f" {_MAX_DYNAMIC_BUCKETS}, got {v}")
        elif k == "bucket_size":
            v = 128 if v is None else v
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"`bucket_size` must be a positive integer, got {v}")
        else:
            raise ValueError(f"torch.compile(backend='tpu'): unknown option {k!r}; known options: "
                             f"{', '.join(KNOWN_OPTIONS)}")
        out[k] = v
    return out


def current_options():
    return getattr(_tls, "options", None)


def set_options(opts):
    _tls.options = opts


# ---- bucket policy (TorchTPU's DynamicCompiler: sym_bounds_manager) -------------------


def bucket_bounds(lower, upper, hint, num_buckets=1, bucket_step=128):
    """Upper bounds of the buckets, ascending: the first covers ``lower`` and
    the length that triggered compilation, rounded up to a multiple of
    ``bucket_step``; each next one ``bucket_step`` further; the last extends
    to ``upper`` when it is finite (TorchTPU's policy)."""
    start = max(lower, hint)
    first = -(-start // bucket_step) * bucket_step
    if first <= lower and (upper is None or upper > lower):
        first += bucket_step
    out = []
    for i in range(num_buckets):
        last = i == num_buckets - 1
        if upper is not None and out and out[-1] >= upper:
            break
        if last and upper is not None:
            ub = upper
        else:
            ub = first + i * bucket_step
            if upper is not None:
                ub = min(ub, upper)
        out.append(ub)
    return out


def pick_bucket(bounds, step, n):
    for b in bounds:
        if n <= b:
            return b
    # past the last bucket (no finite max): further buckets of the same step
    last = bounds[-1]
    return last + -(-(n - last) // step) * step


# ---- runtime helpers called from the bucketed FX graph --------------------------------


def _bk_mask(x, dim, inner, c, s, n_t, fill):
    """``x`` with every position of dimension ``dim`` that lies in the pad
    region of the bucketed symbol set to ``fill``: the dimension is a
    flattening whose S factor (size ``s + c``, ``s`` the bucket) has ``inner``
    elements after it; valid positions have S index < n + c."""
    size = x.shape[dim]
    pos = torch.arange(size, device=x.device)
    if inner != 1:
        pos = torch.div(pos, inner, rounding_mode="floor")
    if size != (s + c) * inner:
        pos = torch.remainder(pos, s + c)
    valid = pos < (n_t + c)
    shape = [1] * x.dim()
    shape[dim] = size
    if x.dtype == torch.bool:
        fill = bool(fill)
    elif not x.dtype.is_floating_point and not x.dtype.is_complex:
        fill = int(fill)
    return torch.where(valid.view(shape), x, fill)


def _bk_value(n_t, coeffs):
    """The polynomial ``sum(coeffs[i] * n**i)`` on the device (a symbolic int
    of the graph used as a value, evaluated at the true length)."""
    acc = None
    for i, k in enumerate(coeffs):
        if k == 0:
            continue
        term = n_t if i == 1 else (n_t ** i if i > 1 else None)
        term = k if term is None else (term * k if k != 1 else term)
        acc = term if acc is None else acc + term
    if acc is None:
        acc = n_t * 0
    if not isinstance(acc, torch.Tensor):
        acc = n_t * 0 + acc
    return acc


def _bk_count(n_t, const, cs):
    """Number of valid elements of a reduction: const * prod(n + c)."""
    acc = None
    for c in cs:
        t = n_t + c if c else n_t
        acc = t if acc is None else acc * t
    return acc * const if const != 1 else acc


def poly_int(coeffs, n):
    return sum(k * n ** i for i, k in enumerate(coeffs))


@functools.lru_cache(maxsize=4096)
def _strides_at(sym, exprs, n):
    """The exact-length graph's output strides (sympy: Max(1, s - 1), ...) at n."""
    return tuple(int(e.xreplace({sym: n})) if not e.is_Integer else int(e) for e in exprs)


def slice_back(t, spec, n, b):
    """A bucketed output cut back to the true length, with the strides the
    exact-length graph gives it (a view when they agree, else a copy)."""
    _, struct, strides = spec
    for d in range(len(struct) - 1, -1, -1):
        dd = struct[d]
        if dd is None:
            continue
        if dd.pure():
            c = dd.factors[0][1]
            t = t.narrow(d, 0, n + c)
            continue
        sizes, j = [], None
        for k, (sz, c) in enumerate(dd.factors):
            if c is None:
                sizes.append(int(sz))
            else:
                sizes.append(b + c)
                j, cj = k, c
        u = t.unflatten(d, sizes).narrow(d + j, 0, n + cj)
        t = u.flatten(d, d + len(sizes) - 1)
    want = _strides_at(strides[0], strides[1], n)
    if tuple(t.stride()) != want and t.numel() > 1:
        out = torch.empty_strided(t.shape, want, dtype=t.dtype, device=t.device)
        out.copy_(t)
        t = out
    return t


# ---- the analysis --------------------------------------------------------------------


class Refused(Exception):
    pass


def _ex(v):
    if isinstance(v, torch.SymInt):
        return v.node.expr
    if isinstance(v, int):
        return sympy.Integer(v)
    raise Refused(f"unexpected size {v!r}")


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


_POINTWISE = {
    "add.Tensor", "add.Scalar", "sub.Tensor", "sub.Scalar", "mul.Tensor", "mul.Scalar",
    "div.Tensor", "div.Scalar", "div.Tensor_mode", "neg.default", "exp.default", "log.default",
    "tanh.default", "relu.default", "gelu.default", "gelu_backward.default", "sigmoid.default",
    "sigmoid_backward.default", "tanh_backward.default", "silu.default", "silu_backward.default",
    "pow.Tensor_Scalar", "pow.Tensor_Tensor", "rsqrt.default", "sqrt.default", "abs.default",
    "threshold_backward.default", "where.self", "where.ScalarSelf", "where.ScalarOther",
    "masked_fill.Scalar", "masked_fill.Tensor", "eq.Scalar", "eq.Tensor", "ne.Scalar",
    "ne.Tensor", "lt.Scalar", "lt.Tensor", "le.Scalar", "le.Tensor", "gt.Scalar", "gt.Tensor",
    "ge.Scalar", "ge.Tensor", "logical_not.default", "logical_and.default",
    "logical_or.default", "bitwise_not.default", "bitwise_and.Tensor", "bitwise_or.Tensor",
    "clamp.default", "clamp_min.default", "clamp_max.default", "minimum.default",
    "maximum.default", "_to_copy.default", "clone.default", "detach.default", "alias.default",
    "lift_fresh_copy.default", "copy.default", "erf.default", "exp2.default", "log1p.default",
    "expm1.default", "reciprocal.default", "sin.default", "cos.default", "square.default",
    "sign.default", "fill.Scalar", "zeros_like.default", "ones_like.default",
    "full_like.default", "empty_like.default", "native_dropout_backward.default",
    "leaky_relu.default", "leaky_relu_backward.default", "hardtanh.default", "elu.default",
    "softplus.default", "mish.default", "isnan.default", "isinf.default", "nan_to_num.default",
    "logical_xor.default", "tril.default", "triu.default", "addcmul.default", "addcdiv.default",
    "lerp.Scalar", "lerp.Tensor", "atan.default", "floor.default", "ceil.default",
    "round.default", "trunc.default", "rsub.Scalar", "rsub.Tensor",
}
_VIEW_LIKE = {"view.default", "_unsafe_view.default", "reshape.default", "t.default",
              "transpose.int", "permute.default", "unsqueeze.default", "squeeze.dim",
              "squeeze.dims", "squeeze.default", "expand.default", "slice.Tensor", "select.int",
              "split.Tensor", "split_with_sizes.default", "alias.default", "detach.default",
              "as_strided.default", "view_as.default", "unflatten.int", "flatten.using_ints"}
_SCALAR_TO_TENSOR = {
    aten.div.Scalar: aten.div.Tensor, aten.mul.Scalar: aten.mul.Tensor,
    aten.add.Scalar: aten.add.Tensor, aten.sub.Scalar: aten.sub.Tensor,
}
_VIEWS = {"view.default", "_unsafe_view.default", "reshape.default"}
_SHAPE_OPS = {"sym_size.int", "sym_numel.default", "sym_stride.int"}


def _opname(target):
    if isinstance(target, torch._ops.OpOverload):
        if target.namespace != "aten":
            return None
        return f"{target._opname}.{target._overloadname}"
    return None


class _Dim:
    """A padded dimension: a flattening of factors (size, c) with exactly one
    S factor (c is its offset: size S + c, valid n + c)."""

    __slots__ = ("factors",)

    def __init__(self, factors):
        self.factors = tuple(factors)
        if sum(1 for _, c in self.factors if c is not None) != 1:
            raise Refused("a dimension that merges the dynamic dimension twice")

    def __eq__(self, o):
        return isinstance(o, _Dim) and self.factors == o.factors

    def __hash__(self):
        return hash(self.factors)

    def s_factor(self):
        for i, (_, c) in enumerate(self.factors):
            if c is not None:
                inner = 1
                for sz, _ in self.factors[i + 1:]:
                    if not sz.is_Integer:
                        raise Refused("a dynamic dimension merged with another dynamic one")
                    inner *= int(sz)
                return inner, c
        raise AssertionError

    def pure(self):
        return len(self.factors) == 1

    def plain_const(self):
        k = 1
        for sz, c in self.factors:
            if c is None:
                if not sz.is_Integer:
                    raise Refused("a dynamic dimension merged with another dynamic one")
                k *= int(sz)
        return k


class Plan:
    """What one FX graph needs to run bucketed, or why it cannot."""

    def __init__(self, kind):
        self.kind = kind
        self.ok = False
        self.reason = None
        self.gm = None           # the bucketed graph module
        self.sym = None
        self.s_idx = None        # placeholder index of S
        self.sym_inputs = []     # (arg index, coeffs): other symbolic-int inputs (in S)
        self.tensor_inputs = []  # (arg index, [(dim, inner, c, pure)])
        self.outputs = []        # per output: None | ("sym", coeffs) | ("t", [(dim, inner, c, pure, factor sizes)])
        self.out_names = []
        self.saved_k = 0         # trailing outputs saved for the backward (stay padded)
        self.bounds = None
        self.step = 128
        self.linked = False      # forward: its backward is bucketed too
        self.saved_structs = {}
        self.op = None           # the op that refused it

    def refuse(self, why):
        self.ok = False
        if self.reason is None:
            self.reason = why


def _poly(expr, sym):
    try:
        p = sympy.Poly(expr, sym)
    except sympy.PolynomialError:
        raise Refused(f"symbolic value {expr} is not a polynomial of {sym}")
    coeffs = p.all_coeffs()[::-1]
    if not all(getattr(k, "is_Integer", False) for k in coeffs):
        raise Refused(f"symbolic value {expr} has non-integer coefficients")
    return tuple(int(k) for k in coeffs)


def _find_symbol(gm):
    syms = set()
    sym_ph = {}
    for i, n in enumerate(p for p in gm.graph.nodes if p.op == "placeholder"):
        v = _val(n)
        if isinstance(v, torch.SymInt):
            e = v.node.expr
            syms |= e.free_symbols
            if isinstance(e, sympy.Symbol):
                sym_ph[e] = (i, v)
        elif isinstance(v, torch.Tensor):
            for s in list(v.shape) + list(v.stride()) + [v.storage_offset()]:
                if isinstance(s, torch.SymInt):
                    syms |= s.node.expr.free_symbols
        elif isinstance(v, (torch.SymFloat, torch.SymBool)):
            raise Refused("a symbolic float/bool input")
        elif v is None and n.meta.get("val", 0) is None:
            pass
    if not syms:
        return None, None, None
    if len(syms) != 1:
        raise Refused(f"{len(syms)} dynamic symbols ({', '.join(sorted(map(str, syms)))}); "
                      "buckets need exactly one")
    s = next(iter(syms))
    if s not in sym_ph:
        raise Refused(f"symbol {s} is not a graph input")
    return s, sym_ph[s][0], sym_ph[s][1]


def _policy(symint, sym, opts):
    """Bucket upper bounds for the symbol, or None when it is not bucketed
    (no finite max and no bucket option: exact lengths, today's behaviour)."""
    env = symint.node.shape_env
    rng = env.var_to_range.get(sym)
    def finite(x):
        try:
            return int(x) if x.is_finite and abs(int(x)) < (1 << 62) else None
        except Exception:  # noqa: BLE001 - sympy/torch infinities
            return None

    lower = (finite(rng.lower) if rng is not None else None) or 0
    upper = finite(rng.upper) if rng is not None else None
    if upper is None and not opts:
        return None, None
    hint = symint.node.hint
    hint = int(hint) if hint is not None else lower
    step = (opts or {}).get("bucket_size", 128)
    nb = (opts or {}).get("num_dynamic_buckets", 1)
    return bucket_bounds(lower, upper, hint, nb, step), step


class _Analyzer:
    def __init__(self, gm, plan, sym, saved_structs):
        self.gm = gm
        self.plan = plan
        self.S = sym
        self.saved = saved_structs or {}
        self.st = {}      # node -> structure (tuple per dim: None | _Dim) or tuple of them
        self.masks = []   # (node, arg path, dims [(dim, _Dim)], fill)
        self.values = []  # (node, arg index, coeffs, new target)
        self.means = {}   # node -> (reduced dims structures, const)
        self.root = {}    # node -> the node whose storage it views (views only)

    # -- structures
    def dim_from_expr(self, e):
        if self.S not in e.free_symbols:
            return None
        d = sympy.expand(e - self.S)
        if d.is_Integer:
            return _Dim([(self.S, int(d))])
        raise Refused(f"cannot tell the layout of a dimension of size {e}")

    def from_shape(self, v):
        return tuple(self.dim_from_expr(_ex(s)) for s in v.shape)

    def has_s(self, v):
        if isinstance(v, torch.Tensor):
            return any(isinstance(s, torch.SymInt) and self.S in s.node.expr.free_symbols
                       for s in v.shape)
        if isinstance(v, (list, tuple)):
            return any(self.has_s(x) for x in v)
        if isinstance(v, torch.SymInt):
            return self.S in v.node.expr.free_symbols
        return False

    def struct(self, a):
        """Structure of an FX argument that is a tensor node."""
        if not isinstance(a, torch.fx.Node):
            return None
        s = self.st.get(a)
        return s

    def tensor_struct(self, a, what):
        v = _val(a)
        if not isinstance(v, torch.Tensor):
            raise Refused(f"{what}: expected a tensor argument")
        s = self.st.get(a)
        if s is None:
            return (None,) * v.dim()
        return s

    def nll_structs(self, x, t, what):
        """(struct of the scores, struct of the targets) of an nll_loss node;
        refuses scores padded apart from their targets or along the classes."""
        st = self.tensor_struct(t, what)
        sx = self.tensor_struct(x, what)
        if st and sx[0] != st[0]:
            raise Refused("nll_loss operands padded differently")
        if any(d is not None for d in sx[len(st):]):
            raise Refused("nll_loss over padded classes")
        return sx, st

    def check_plain(self, a):
        if isinstance(a, torch.fx.Node):
            s = self.st.get(a)
            if isinstance(s, tuple) and any(d is not None and not isinstance(d, tuple) for d in s):
                return False
            if self.has_s(_val(a)):
                return False
        elif isinstance(a, (list, tuple)):
            return all(self.check_plain(x) for x in a)
        return True

    # -- the walk
    def run(self):
        ph = 0
        for n in self.gm.graph.nodes:
            if n.op == "placeholder":
                self.placeholder(n, ph)
                ph += 1
            elif n.op == "call_function":
                try:
                    self.call(n)
                except Refused as e:
                    self.plan.op = str(n.target)
                    raise Refused(f"{n.format_node()}: {e}") from None
            elif n.op == "output":
                self.output(n)
            elif n.op == "get_attr":
                if self.has_s(_val(n)):
                    raise Refused(f"constant {n.target} has the dynamic dimension")
            else:
                raise Refused(f"{n.op} node {n.name}")

    def placeholder(self, n, i):
        v = _val(n)
        if isinstance(v, torch.SymInt):
            e = v.node.expr
            if self.S in e.free_symbols and i != self.plan.s_idx:
                self.plan.sym_inputs.append((i, _poly(e, self.S)))
            return
        if isinstance(v, torch.Tensor):
            if n.name in self.saved:
                s = self.saved[n.name]
                if len(s) != v.dim():
                    raise Refused(f"saved tensor {n.name}: rank differs")
                self.st[n] = s
                self.plan.tensor_inputs.append((i, None))  # arrives padded
                return
            s = self.from_shape(v)
            if any(d is not None for d in s):
                for sz in v.stride():
                    pass
                self.st[n] = s
                self.plan.tensor_inputs.append(
                    (i, [(d, 1, dd.factors[0][1]) for d, dd in enumerate(s) if dd is not None]))
            return
        if v is None:
            return
        if self.has_s(v):
            raise Refused(f"input {n.name} of kind {type(v).__name__}")

    def output(self, n):
        outs = n.args[0]
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        self.plan.out_roots = []
        for o in outs:
            self.plan.out_names.append(o.name if isinstance(o, torch.fx.Node) else None)
            if isinstance(o, torch.fx.Node):
                r = self.root.get(o, o)
                self.plan.out_roots.append(("input" if r.op == "placeholder" else r.name))
            else:
                self.plan.out_roots.append(None)
            v = _val(o)
            if isinstance(v, torch.SymInt) and self.S in v.node.expr.free_symbols:
                self.plan.outputs.append(("sym", _poly(v.node.expr, self.S)))
            elif isinstance(v, torch.Tensor) and isinstance(o, torch.fx.Node) and \
                    self.st.get(o) is not None and any(d is not None for d in self.st[o]):
                s = self.st[o]
                strides = (self.S, tuple(_ex(x) for x in v.stride()))
                self.plan.outputs.append(("t", s, strides))
            elif self.has_s(v):
                raise Refused(f"output {o} has the dynamic dimension in an unknown layout")
            else:
                self.plan.outputs.append(None)

    def mask(self, node, argi, dims, fill, sub=None):
        dims = [(d, dd) for d, dd in dims if dd is not None]
        if dims:
            self.masks.append((node, argi, sub, dims, fill))

    def value_args(self, n):
        """Symbolic-int arguments of an elementwise op are values: from n."""
        for i, a in enumerate(n.args):
            v = _val(a)
            if isinstance(v, torch.SymInt) and self.S in v.node.expr.free_symbols:
                tgt = _SCALAR_TO_TENSOR.get(n.target, n.target)
                if tgt not in (aten.div.Tensor, aten.mul.Tensor, aten.add.Tensor,
                               aten.sub.Tensor) or i != 1:
                    raise Refused("a symbolic size used as a value by this op")
                self.values.append((n, i, _poly(v.node.expr, self.S), tgt))
            elif isinstance(v, (torch.SymFloat, torch.SymBool)):
                raise Refused("a symbolic float/bool used as a value")
        for k, a in n.kwargs.items():
            if self.has_s(_val(a)) and not isinstance(_val(a), torch.Tensor):
                raise Refused(f"symbolic keyword argument {k}")

    def broadcast(self, n, args, out_v):
        """Elementwise: the output's structure from the (broadcast) inputs."""
        rank = out_v.dim()
        res = [None] * rank
        seen = [False] * rank
        for a in args:
            v = _val(a)
            if not isinstance(v, torch.Tensor):
                continue
            s = self.tensor_struct(a, "elementwise")
            off = rank - v.dim()
            for d in range(v.dim()):
                e = _ex(v.shape[d])
                if e == 1 and _ex(out_v.shape[off + d]) != 1:
                    continue
                sd = s[d]
                if sd is None and self.S in e.free_symbols:
                    raise Refused("an operand of unknown layout along the dynamic dimension")
                if seen[off + d] and res[off + d] != sd:
                    raise Refused("operands padded in different layouts")
                res[off + d] = sd
                seen[off + d] = True
        for d in range(rank):
            if not seen[d]:
                res[d] = self.dim_from_expr(_ex(out_v.shape[d]))
        return tuple(res)

    def regroup(self, s_in, v_in, out_sizes):
        q = []
        for d in range(v_in.dim()):
            if s_in[d] is None:
                e = _ex(v_in.shape[d])
                if self.S in e.free_symbols:
                    raise Refused("view of a dimension of unknown layout")
                q.append((e, None))
            else:
                q.extend(s_in[d].factors)
        q = [f for f in q if not (f[1] is None and f[0] == 1)]
        out = []
        for o in out_sizes:
            o = _ex(o)
            if o == 1:
                out.append(None)
                continue
            taken, prod = [], sympy.Integer(1)
            while sympy.expand(prod - o) != 0:
                if not q:
                    raise Refused("view that splits the dynamic dimension")
                f = q.pop(0)
                need = sympy.simplify(o / prod)
                fsz = f[0] if f[1] is None else self.S + f[1]
                if f[1] is None and f[0].is_Integer and need.is_Integer and f[0] != need:
                    if int(need) < int(f[0]) and int(f[0]) % int(need) == 0:
                        taken.append((need, None))
                        q.insert(0, (sympy.Integer(int(f[0]) // int(need)), None))
                        prod = prod * need
                        continue
                    if int(f[0]) > int(need) or int(need) % int(f[0]) != 0:
                        raise Refused("view that regroups across the dynamic dimension")
                taken.append(f)
                prod = sympy.expand(prod * fsz)
                if prod.is_Integer and o.is_Integer and int(prod) > int(o):
                    raise Refused("view that regroups across the dynamic dimension")
            if any(c is not None for _, c in taken):
                # merge adjacent plain factors to keep structures canonical
                merged = []
                for sz, c in taken:
                    if c is None and merged and merged[-1][1] is None:
                        merged[-1] = (merged[-1][0] * sz, None)
                    else:
                        merged.append((sz, c))
                out.append(_Dim(merged))
            else:
                out.append(None)
        if any(not (c is None and sz == 1) for sz, c in q):
            raise Refused("view that does not consume every factor")
        return tuple(out)

    def call(self, n):
        import operator

        tgt = n.target
        v = _val(n)
        a0 = n.args[0] if n.args else None
        if isinstance(a0, torch.fx.Node) and (tgt is operator.getitem or
                                              _opname(tgt) in _VIEW_LIKE):
            self.root[n] = self.root.get(a0, a0)
        if tgt is operator.getitem:
            src = self.st.get(n.args[0])
            if isinstance(src, list):
                self.st[n] = src[n.args[1]]
            elif self.has_s(v):
                raise Refused("getitem of an unknown result")
            return
        name = _opname(tgt)
        if name is None:
            # python arithmetic on symbolic ints (shapes): evaluated with the bucket
            if isinstance(v, (torch.SymInt, int)) and tgt in (
                    operator.mul, operator.add, operator.sub, operator.floordiv,
                    operator.neg, operator.mod):
                if tgt in (operator.floordiv, operator.mod) and self.has_s(v):
                    raise Refused("floor division/modulo of the dynamic size")
                return
            if self.check_plain(list(n.args)) and not self.has_s(v):
                return
            raise Refused(f"unknown function {getattr(tgt, '__name__', tgt)}")
        args = n.args
        if name in _SHAPE_OPS:
            return
        if name in _POINTWISE:
            if name in ("tril.default", "triu.default"):
                s0 = self.tensor_struct(args[0], name)
                if any(d is not None and not d.pure() for d in s0[-2:]):
                    raise Refused("tril/triu over a merged dynamic dimension")
            self.value_args(n)
            self.st[n] = self.broadcast(n, [a for a in args if isinstance(a, torch.fx.Node)] +
                                        [a for a in n.kwargs.values() if isinstance(a, torch.fx.Node)], v)
            return
        if name in _VIEWS:
            self.st[n] = self.regroup(self.tensor_struct(args[0], name), _val(args[0]), v.shape)
            return
        if name in ("t.default", "transpose.int", "permute.default"):
            s = self.tensor_struct(args[0], name)
            r = len(s)
            if name == "t.default":
                perm = list(range(r))[::-1]
            elif name == "transpose.int":
                a, b = args[1] % max(r, 1), args[2] % max(r, 1)
                perm = list(range(r))
                perm[a], perm[b] = perm[b], perm[a]
            else:
                perm = [p % r for p in args[1]]
            self.st[n] = tuple(s[p] for p in perm)
            return
        if name == "unsqueeze.default":
            s = list(self.tensor_struct(args[0], name))
            d = args[1] % (len(s) + 1)
            s.insert(d, None)
            self.st[n] = tuple(s)
            return
        if name in ("squeeze.dim", "squeeze.dims", "squeeze.default"):
            s = self.tensor_struct(args[0], name)
            vin = _val(args[0])
            if name == "squeeze.default":
                dims = [d for d in range(vin.dim()) if _ex(vin.shape[d]) == 1]
            elif name == "squeeze.dim":
                dims = [args[1] % max(vin.dim(), 1)]
            else:
                dims = [d % max(vin.dim(), 1) for d in args[1]]
            self.st[n] = tuple(sd for d, sd in enumerate(s)
                               if not (d in dims and _ex(vin.shape[d]) == 1))
            return
        if name == "expand.default":
            s = self.tensor_struct(args[0], name)
            vin = _val(args[0])
            off = v.dim() - vin.dim()
            res = []
            for d in range(v.dim()):
                if d >= off and not (_ex(vin.shape[d - off]) == 1 and _ex(v.shape[d]) != 1):
                    res.append(s[d - off])
                else:
                    res.append(self.dim_from_expr(_ex(v.shape[d])))
            self.st[n] = tuple(res)
            return
        if name in ("ones.default", "zeros.default", "empty.memory_format", "full.default",
                    "new_zeros.default", "new_ones.default", "new_empty.default",
                    "new_full.default", "scalar_tensor.default", "arange.default",
                    "arange.start", "arange.start_step", "empty_strided.default"):
            if name == "scalar_tensor.default" and self.has_s(_val(args[0])):
                raise Refused("scalar_tensor of a symbolic size")
            if name == "full.default" or name == "new_full.default":
                fv = args[-1] if name == "full.default" else args[2]
                if self.has_s(_val(fv)) or isinstance(_val(fv), (torch.SymInt, torch.SymFloat)):
                    raise Refused("fill value is a symbolic size")
            if name.startswith("arange"):
                if name != "arange.default" and (self.has_s(_val(args[0])) or
                                                 (len(args) > 2 and args[2] != 1)):
                    raise Refused("arange with a symbolic start or a step")
            if name == "empty_strided.default" and self.has_s(v):
                raise Refused("empty_strided with symbolic strides")
            self.st[n] = self.from_shape(v)
            return
        if name == "slice.Tensor":
            self.slice(n, v)
            return
        if name == "select.int":
            s = self.tensor_struct(args[0], name)
            d = args[1] % len(s)
            if s[d] is not None:
                raise Refused("select along the dynamic dimension")
            self.st[n] = s[:d] + s[d + 1:]
            return
        if name == "select_backward.default":
            s = self.tensor_struct(args[0], name)
            d = args[2] % (len(s) + 1)
            self.st[n] = s[:d] + (None,) + s[d:]
            if _ex(v.shape[d]) != 1 and self.S in _ex(v.shape[d]).free_symbols:
                raise Refused("select_backward along the dynamic dimension")
            return
        if name == "slice_backward.default":
            self.slice_backward(n, v)
            return
        if name == "split.Tensor" or name == "split_with_sizes.default":
            s = self.tensor_struct(args[0], name)
            d = (args[2] if len(args) > 2 else 0) % len(s)
            if s[d] is not None:
                raise Refused("split along the dynamic dimension")
            self.st[n] = [s for _ in v]
            return
        if name == "cat.default":
            self.cat(n, v)
            return
        if name == "constant_pad_nd.default":
            self.pad(n, v)
            return
        if name in ("sum.dim_IntList", "sum.default", "mean.dim", "mean.default", "amax.default",
                    "amin.default", "logsumexp.default", "argmax.default", "argmin.default",
                    "max.dim", "min.dim", "any.dim", "all.dim", "prod.dim_int"):
            self.reduce(n, name, v)
            return
        if name in ("_softmax.default", "_log_softmax.default", "_safe_softmax.default"):
            s = self.tensor_struct(args[0], name)
            d = args[1] % len(s)
            self.mask(n, 0, [(d, s[d])], float("-inf"))
            self.st[n] = s
            return
        if name in ("_softmax_backward_data.default", "_log_softmax_backward_data.default"):
            s = self.tensor_struct(args[0], name)
            d = args[2] % len(s)
            if self.tensor_struct(args[1], name) != s:
                raise Refused("softmax backward operands padded differently")
            self.mask(n, 0, [(d, s[d])], 0.0)
            self.mask(n, 1, [(d, s[d])], 0.0)
            self.st[n] = s
            return
        if name == "cumsum.default":
            s = self.tensor_struct(args[0], name)
            d = args[1] % len(s)
            if s[d] is not None and not s[d].pure():
                raise Refused("cumsum along a merged dynamic dimension")
            self.st[n] = s
            return
        if name in ("mm.default", "addmm.default", "bmm.default", "baddbmm.default"):
            self.matmul(n, name, v)
            return
        if name == "native_layer_norm.default":
            s = self.tensor_struct(args[0], name)
            k = len(args[1])
            if any(d is not None for d in s[len(s) - k:]):
                raise Refused("layer_norm over the dynamic dimension")
            st = s[:len(s) - k] + (None,) * k
            self.st[n] = [s, st, st]
            return
        if name == "native_layer_norm_backward.default":
            s = self.tensor_struct(args[1], name)
            k = len(args[2])
            if any(d is not None for d in s[len(s) - k:]):
                raise Refused("layer_norm over the dynamic dimension")
            dims = list(enumerate(s))
            for i in (0, 1, 3, 4):
                si = self.tensor_struct(args[i], name)
                if si[:len(s) - k] != s[:len(s) - k]:
                    raise Refused("layer_norm_backward operands padded differently")
                self.mask(n, i, dims, 0.0)
            self.st[n] = [s, (None,) * (_val(args[5]).dim() if args[5] is not None else 0),
                          (None,) * (_val(args[6]).dim() if args[6] is not None else 0)]
            return
        if name == "embedding.default":
            si = self.tensor_struct(args[1], name)
            self.mask(n, 1, list(enumerate(si)), 0)
            self.st[n] = si + (None,)
            return
        if name == "embedding_dense_backward.default":
            if len(args) > 4 and args[4]:
                raise Refused("embedding backward with scale_grad_by_freq")
            si = self.tensor_struct(args[1], name)
            self.mask(n, 0, list(enumerate(si)), 0.0)
            self.mask(n, 1, list(enumerate(si)), 0)
            self.st[n] = (None,) * v.dim()
            return
        if name == "nll_loss_forward.default":
            x, t, _, red, ign = args[:5]
            sx, st = self.nll_structs(x, t, name)
            self.mask(n, 1, list(enumerate(st)), ign)
            self.mask(n, 0, [(0, sx[0])] if st else [], 0.0)
            self.st[n] = [st if red == 0 else (), ()]
            return
        if name == "nll_loss_backward.default":
            g, x, t, _, red, ign = args[:6]
            sx, st = self.nll_structs(x, t, name)
            self.mask(n, 2, list(enumerate(st)), ign)
            self.st[n] = sx
            return
        # anything else: fine only if nothing about it is dynamic
        if all(self.check_plain(a) for a in list(args) + list(n.kwargs.values())) \
                and not self.has_s(v):
            return
        raise Refused(f"no bucketing rule for aten.{name}")

    def slice(self, n, v):
        x, d = n.args[0], n.args[1]
        start = n.args[2] if len(n.args) > 2 else None
        end = n.args[3] if len(n.args) > 3 else None
        step = n.args[4] if len(n.args) > 4 else 1
        s = self.tensor_struct(x, "slice")
        d %= len(s)
        if s[d] is None:
            self.st[n] = s
            if self.has_s(_val(start)) or (self.has_s(_val(end)) and
                                           self.S not in _ex(_val(x).shape[d]).free_symbols):
                raise Refused("slice bounds depend on the dynamic size")
            return
        if step != 1 or not s[d].pure():
            raise Refused("strided slice or slice of a merged dynamic dimension")
        c_in = s[d].factors[0][1]
        a = 0 if start is None else start
        if not isinstance(a, int) or a < 0:
            raise Refused("slice of the dynamic dimension with a start from its end")
        size = self.S + c_in
        if end is None or (isinstance(end, int) and end >= (1 << 62)):
            dd = 0
        elif isinstance(end, int):
            if end >= 0:
                raise Refused("slice of the dynamic dimension to a constant end")
            dd = end
        else:
            e = _val(end)
            if not isinstance(e, torch.SymInt):
                raise Refused("slice end")
            dd = sympy.expand(e.node.expr - size)
            if not dd.is_Integer or int(dd) > 0:
                raise Refused(f"slice end {e} of the dynamic dimension")
            dd = int(dd)
        if a == 0 and dd == 0:
            self.st[n] = s
            return
        res = list(s)
        res[d] = _Dim([(self.S, c_in + dd - a)])
        self.st[n] = tuple(res)

    def slice_backward(self, n, v):
        g, sizes, d, start, end, step = n.args[:6]
        s = self.tensor_struct(g, "slice_backward")
        d %= len(s)
        if s[d] is None:
            if self.S in _ex(v.shape[d]).free_symbols:
                raise Refused("slice_backward into the dynamic dimension")
            self.st[n] = s
            return
        if step != 1 or not isinstance(start, int) or start < 0:
            raise Refused("slice_backward of the dynamic dimension")
        self.mask(n, 0, [(d, s[d])], 0.0)
        res = list(s)
        res[d] = self.dim_from_expr(_ex(v.shape[d]))
        self.st[n] = tuple(res)

    def cat(self, n, v):
        ts, d = n.args[0], (n.args[1] if len(n.args) > 1 else 0)
        d %= v.dim()
        structs = [self.tensor_struct(t, "cat") for t in ts]
        other = None
        for t, s in zip(ts, structs):
            if _val(t).dim() == 1 and _ex(_val(t).shape[0]) == 0 and v.dim() != 1:
                continue  # legacy empty tensor
            rest = s[:d] + s[d + 1:]
            if other is not None and rest != other:
                raise Refused("cat of tensors padded differently")
            other = rest
        along = [i for i, s in enumerate(structs) if len(s) > d and s[d] is not None]
        if not along:
            if self.S in _ex(v.shape[d]).free_symbols:
                raise Refused("cat along the dynamic dimension")
            self.st[n] = other[:d] + (None,) + other[d:]
            return
        # only the last input may be padded along d: the others are a constant prefix
        last = along[-1]
        if along != [len(ts) - 1] or not structs[last][d].pure():
            raise Refused("cat along the dynamic dimension")
        k = 0
        for t in ts[:-1]:
            e = _ex(_val(t).shape[d]) if _val(t).dim() > d else sympy.Integer(0)
            if not e.is_Integer:
                raise Refused("cat along the dynamic dimension")
            k += int(e)
        res = list(structs[last])
        res[d] = _Dim([(self.S, structs[last][d].factors[0][1] + k)])
        self.st[n] = tuple(res)

    def pad(self, n, v):
        x, pads = n.args[0], n.args[1]
        value = n.args[2] if len(n.args) > 2 else 0
        s = self.tensor_struct(x, "constant_pad_nd")
        res = list(s)
        for i in range(len(pads) // 2):
            d = len(s) - 1 - i
            lo, hi = pads[2 * i], pads[2 * i + 1]
            if not isinstance(lo, int) or not isinstance(hi, int):
                raise Refused("symbolic padding")
            if s[d] is None:
                continue
            if lo < 0 or hi < 0 or not s[d].pure():
                raise Refused("cropping pad along the dynamic dimension")
            # the pad region must read as the pad value: mask first
            self.mask(n, 0, [(d, s[d])], value)
            res[d] = _Dim([(self.S, s[d].factors[0][1] + lo + hi)])
        self.st[n] = tuple(res)

    def reduce(self, n, name, v):
        x = n.args[0]
        s = self.tensor_struct(x, name)
        r = len(s)
        if name in ("sum.default", "mean.default"):
            dims, keep = list(range(r)), False
        elif name in ("argmax.default", "argmin.default"):
            dd = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim")
            dims = list(range(r)) if dd is None else [dd % r]
            keep = n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False)
        elif name in ("max.dim", "min.dim", "any.dim", "all.dim", "prod.dim_int"):
            dims = [n.args[1] % r]
            keep = n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False)
        else:
            dd = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim")
            dims = list(range(r)) if dd is None or dd == [] else [k % r for k in dd]
            keep = n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False)
        red = [(d, s[d]) for d in dims if s[d] is not None]
        out = tuple(None if d in dims else s[d] for d in range(r) if keep or d not in dims)
        if red:
            if name in ("any.dim", "all.dim", "prod.dim_int"):
                raise Refused(f"{name} over the dynamic dimension")
            if name in ("argmax.default", "argmin.default", "max.dim", "min.dim") and \
                    any(not sd.pure() for _, sd in red):
                raise Refused("an index over a merged dynamic dimension")
            fp = _val(x).dtype.is_floating_point
            if name.startswith("sum") or name.startswith("mean"):
                fill = 0
            elif name in ("amax.default", "argmax.default", "max.dim", "logsumexp.default"):
                fill = float("-inf") if fp else torch.iinfo(_val(x).dtype).min
            else:
                fill = float("inf") if fp else torch.iinfo(_val(x).dtype).max
            self.mask(n, 0, red, fill)
            if name.startswith("mean"):
                const = 1
                for d in dims:
                    if s[d] is None:
                        e = _ex(_val(x).shape[d])
                        if not e.is_Integer:
                            raise Refused("mean over a symbolic plain dimension")
                        const *= int(e)
                    else:
                        const *= s[d].plain_const()
                self.means[n] = (const, [sd.s_factor()[1] for _, sd in red])
        self.st[n] = [out, out] if name in ("max.dim", "min.dim") else out

    def matmul(self, n, name, v):
        args = n.args
        if name in ("addmm.default", "baddbmm.default"):
            bias, a, b = args[:3]
            ai, bi = 1, 2
        else:
            bias, a, b = None, args[0], args[1]
            ai, bi = 0, 1
        sa = self.tensor_struct(a, name)
        sb = self.tensor_struct(b, name)
        if sa[-1] != sb[-2]:
            raise Refused("matmul operands padded differently along the contraction")
        if sa[-1] is not None:
            self.mask(n, ai, [(len(sa) - 1, sa[-1])], 0.0)
            self.mask(n, bi, [(len(sb) - 2, sb[-2])], 0.0)
        if len(sa) == 3 and sa[0] != sb[0]:
            raise Refused("bmm operands padded differently along the batch")
        out = tuple(sa[:-1]) + (sb[-1],)
        if bias is not None:
            sbias = self.tensor_struct(bias, name)
            vb = _val(bias)
            off = len(out) - vb.dim()
            for d in range(vb.dim()):
                if _ex(vb.shape[d]) != 1 and sbias[d] != out[off + d]:
                    raise Refused("bias padded differently")
        self.st[n] = out


def plan(gm, kind, opts=None, fw_plan=None):
    """Analyse one AOTAutograd graph; a :class:`Plan` (``ok`` or with the
    ``reason`` it cannot be bucketed), or None when the graph has no dynamic
    dimension to bucket."""
    p = Plan(kind)
    try:
        S, s_idx, symint = _find_symbol(gm)
    except Refused as e:
        p.refuse(str(e))
        return p
    if S is None:
        return None
    bounds, step = _policy(symint, S, opts)
    if bounds is None:
        return None
    p.sym, p.s_idx, p.bounds, p.step = S, s_idx, bounds, step
    saved = None
    if kind == "backward":
        if fw_plan is None or not fw_plan.ok:
            p.refuse("its forward is not bucketed" if fw_plan is not None else
                     "no bucketed forward to take the saved tensors' layouts from")
            return p
        saved = fw_plan.saved_structs
    an = _Analyzer(gm, p, S, saved)
    try:
        an.run()
        if kind == "backward":
            names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
            nsaved = sum(1 for nm in names if not nm.startswith("tangents"))
            if set(names[:nsaved]) != set(fw_plan.out_names[len(fw_plan.out_names) - nsaved:]):
                raise Refused("backward inputs do not match the forward's saved outputs")
            if fw_plan.bounds != bounds or fw_plan.sym != S:
                raise Refused("forward and backward disagree on the buckets")
            try:
                check_user_outputs(fw_plan, len(fw_plan.outputs) - nsaved)
            except Refused as e:
                fw_plan.op = "output alias"
                raise Refused(f"forward: {e}") from None
            fw_plan.saved_k = nsaved
        if kind == "inference":  # (backward outputs are gradients: no aliasing to keep)
            check_user_outputs(p, len(p.outputs))
        p.gm = _rewrite(gm, an, p)
    except Refused as e:
        p.refuse(str(e))
        return p
    p.saved_structs = {nm: an.st.get(o) for nm, o in _out_nodes(gm)}
    p.saved_structs = {k: v for k, v in p.saved_structs.items() if v is not None}
    p.ok = True
    return p


def check_user_outputs(p, nuser):
    """Outputs the user sees are cut back (a view or a copy): one that views a
    graph input or shares storage with another user output would lose the
    aliasing AOTAutograd expects, so such a graph is not bucketed."""
    roots = {}
    for i in range(nuser):
        spec, r = p.outputs[i], p.out_roots[i]
        if r is None:
            continue
        if spec is not None and spec[0] == "t" and r == "input":
            raise Refused(f"output {p.out_names[i]} is a view of an input")
        roots.setdefault(r, []).append(i)
    for r, idx in roots.items():
        if r != "input" and len(idx) > 1 and any(
                p.outputs[i] is not None and p.outputs[i][0] == "t" for i in idx):
            raise Refused(f"outputs {', '.join(p.out_names[i] for i in idx)} share storage")


def link_plain_backward(fw_plan, gm):
    """A bucketed forward whose backward has no dynamic dimension (it saved
    nothing padded, no padded output needs a gradient): the backward runs as
    is; the forward only needs to know which of its outputs it saves."""
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    nsaved = sum(1 for nm in names if not nm.startswith("tangents"))
    try:
        if set(names[:nsaved]) != set(fw_plan.out_names[len(fw_plan.out_names) - nsaved:]):
            raise Refused("backward inputs do not match the forward's saved outputs")
        check_user_outputs(fw_plan, len(fw_plan.outputs) - nsaved)
    except Refused as e:
        fw_plan.refuse(str(e))
        return False
    fw_plan.saved_k = nsaved
    fw_plan.linked = True
    return True


def _out_nodes(gm):
    out = next(n for n in gm.graph.nodes if n.op == "output")
    outs = out.args[0]
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    return [(o.name, o) for o in outs if isinstance(o, torch.fx.Node)]


def _rewrite(gm, an, p):
    """The bucketed graph: a new placeholder for n (int64 scalar on the
    device), masks before the ops that need them, symbolic values from n,
    means as masked sums over the true count."""
    g = torch.fx.Graph()
    env = {}
    out = g.graph_copy(gm.graph, env)
    g.output(out)
    phs = [env[n] for n in gm.graph.nodes if n.op == "placeholder"]
    s_node = phs[p.s_idx]
    with g.inserting_after(phs[-1]):
        n_node = g.placeholder("bucket_n")
    for node, argi, sub, dims, fill in an.masks:
        new = env[node]
        a = new.args[argi]
        if a is None:
            continue
        with g.inserting_before(new):
            for d, dd in dims:
                inner, c = dd.s_factor()
                a = g.call_function(_bk_mask, (a, d, inner, c, s_node, n_node, fill))
        args = list(new.args)
        args[argi] = a
        new.args = tuple(args)
    for node, i, coeffs, tgt in an.values:
        new = env[node]
        with g.inserting_before(new):
            val = g.call_function(_bk_value, (n_node, coeffs))
        args = list(new.args)
        args[i] = val
        new.args = tuple(args)
        new.target = tgt
    for node, (const, cs) in an.means.items():
        new = env[node]
        name = _opname(node.target)
        x = new.args[0]
        if name == "mean.default":
            dtype = new.kwargs.get("dtype")
            with g.inserting_before(new):
                sm = g.call_function(aten.sum.dim_IntList, (x, list(range(_val(node.args[0]).dim())),
                                                            False), {"dtype": dtype})
        else:
            dims = new.args[1]
            keep = new.args[2] if len(new.args) > 2 else new.kwargs.get("keepdim", False)
            dtype = new.kwargs.get("dtype")
            with g.inserting_before(new):
                sm = g.call_function(aten.sum.dim_IntList, (x, dims, keep), {"dtype": dtype})
        with g.inserting_before(new):
            cnt = g.call_function(_bk_count, (n_node, const, tuple(cs)))
            res = g.call_function(aten.div.Tensor, (sm, cnt))
        new.replace_all_uses_with(res)
        g.erase_node(new)
    g.lint()
    return torch.fx.GraphModule(gm, g)
