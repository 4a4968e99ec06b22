"""torch.tpu.pallas: JAX functions (Pallas kernels included) as PyTorch ops
on ``tpu`` tensors, with TorchTPU 0.2.0's names and signatures.

    @torch.tpu.pallas.jax_op("mylib::softplus")
    def softplus(x: jax.Array) -> jax.Array:
        return jnp.logaddexp(x, 0.0)

    y = softplus(torch.randn(8, device="tpu", requires_grad=True))

How it runs: JAX is imported when this API is first used, and only at trace
time. The first call per input signature (shapes, dtypes, static arguments)
lowers the function with ``jax.jit(fn).lower(...)`` to StableHLO (Pallas
kernels with ``interpret=True``); the runtime's StableHLO importer
(``tpulw_import_stablehlo``, runtime/src/lower/stablehlo.c) turns it into
the runtime's IR, and each call runs that graph like any op: it fuses in
Fused Eager, goes through the compilation cache, and runs on the vTPU or
through the PJRT executor. JAX never runs at execution time.

Lowerings are counted (``stats()``, also ``torch.tpu._get_cache_stats()
["pallas"]``) and cached in memory and, when
``TORCH_TPU_COMPILATION_CACHE_DIR`` is set, on disk under ``jax_op/``: a
restarted process does not call JAX to lower a known signature. The disk
key covers the op name, the function's qualified name, the source file it
is defined in, the static arguments, the input avals and the JAX version;
a change to a helper defined in ANOTHER file is not seen (clear the
directory then).

Autograd: the op's backward is ``jax.vjp`` of the function, lowered and
imported the same way (its own cached program). The fake (meta)
implementation uses ``jax.eval_shape``.

Not covered: ``mesh`` / partition specs other than None (one chip),
``donate_argnums`` (accepted; inputs are never invalidated), tensor-list
arguments, loops whose trip count depends on data (NotImplementedError),
the op subset listed in the README.
"""
import functools
import hashlib
import inspect
import json
import os
import pathlib
import threading
import time
import types
import typing

import torch

__all__ = ["jax_op", "get_pallas_mesh"]

_FORMAT = 1  # bump when the on-disk entry format changes
# tpu_dtype order (runtime/include/tpu_base.h)
_TPU_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
               torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
               torch.complex128]
_LOCK = threading.RLock()
_STATS = {"lowerings": 0, "disk_hits": 0, "memory_hits": 0, "imports": 0, "runs": 0,
          "lower_time_s": 0.0, "import_time_s": 0.0}


def stats():
    """Counters: ``lowerings`` (calls of JAX's lowering: one per new input
    signature, forward and backward separately), ``disk_hits`` (signatures
    loaded from the disk cache instead), ``memory_hits``, ``imports``
    (StableHLO -> IR imports), ``runs``, ``lower_time_s``, ``import_time_s``."""
    with _LOCK:
        return dict(_STATS)


def reset_stats():
    with _LOCK:
        for k in _STATS:
            _STATS[k] = 0.0 if k.endswith("_s") else 0


def _jax():
    try:
        import jax  # noqa: F401
        import jax.numpy  # noqa: F401
    except ImportError as e:  # pragma: no cover - make test installs jax
        raise ImportError("torch.tpu.pallas needs JAX: pip install jax") from e
    return jax


def _jax_dtype(dt):
    import jax.numpy as jnp
    m = {torch.float32: jnp.float32, torch.float64: jnp.float64, torch.float16: jnp.float16,
         torch.bfloat16: jnp.bfloat16, torch.int8: jnp.int8, torch.int16: jnp.int16,
         torch.int32: jnp.int32, torch.int64: jnp.int64, torch.uint8: jnp.uint8,
         torch.bool: jnp.bool_}
    if dt not in m:
        raise NotImplementedError(f"Unsupported dtype for pallas kernels: {dt}")
    return m[dt]


def _torch_dtype(jdt):
    import numpy as np
    name = np.dtype(jdt).name
    m = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
         "bfloat16": torch.bfloat16, "int8": torch.int8, "int16": torch.int16,
         "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8, "bool": torch.bool}
    if name not in m:
        raise NotImplementedError(f"Unsupported dtype for pallas kernels: {name}")
    return m[name]


# ---- disk cache ----------------------------------------------------------------------------

def _cache_dir():
    d = os.environ.get("TORCH_TPU_COMPILATION_CACHE_DIR") or os.environ.get(
        "TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT")
    if not d:
        return None
    p = pathlib.Path(d) / "jax_op"
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return p


@functools.lru_cache(maxsize=None)
def _file_hash(path):
    try:
        return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()
    except OSError:
        return ""


def _fn_fingerprint(fn):
    """Stable across processes: qualified name + defining file's content (+
    partial's bound arguments)."""
    parts = []
    while isinstance(fn, functools.partial):
        parts.append(repr(fn.args) + repr(sorted(fn.keywords.items())))
        fn = fn.func
    fn = inspect.unwrap(fn)
    parts.append(getattr(fn, "__module__", "") + "." + getattr(fn, "__qualname__", repr(fn)))
    code = getattr(fn, "__code__", None)
    if code is not None:
        parts.append(_file_hash(code.co_filename))
        parts.append(hashlib.sha256(code.co_code + repr(code.co_consts).encode()).hexdigest())
    return "|".join(parts)


# ---- lowering + import ----------------------------------------------------------------------

class _Program:
    """One lowered signature: StableHLO text, output avals, imported graphs
    (one per matmul precision)."""

    def __init__(self, text, outs, tree):
        self.text = text
        self.outs = outs  # [(shape tuple, torch dtype)]
        self.tree = tree  # "single" | "tuple" | "none"
        self.graphs = {}


_PROGRAMS = {}


def _lower(key_parts, jfn, avals):
    """StableHLO program of jfn(*avals): memory, then disk, then JAX."""
    key = hashlib.sha256(json.dumps(key_parts, sort_keys=True, default=str).encode()).hexdigest()
    with _LOCK:
        p = _PROGRAMS.get(key)
        if p is not None:
            _STATS["memory_hits"] += 1
            return p
    d = _cache_dir()
    f = d / (key + ".json") if d is not None else None
    if f is not None and f.exists():
        try:
            e = json.loads(f.read_text())
            p = _Program(e["text"], [(tuple(s), getattr(torch, t)) for s, t in e["outs"]], e["tree"])
            with _LOCK:
                _STATS["disk_hits"] += 1
                _PROGRAMS[key] = p
            return p
        except (OSError, ValueError, KeyError, AttributeError):
            pass
    jax = _jax()
    t0 = time.perf_counter()
    with jax.enable_x64(True):
        lowered = jax.jit(jfn, keep_unused=True).lower(*avals)
        text = lowered.compiler_ir("stablehlo").operation.get_asm(
            print_generic_op_form=True, large_elements_limit=None)
        out_info = lowered.out_info
    leaves, treedef = jax.tree_util.tree_flatten(out_info)
    if not isinstance(out_info, (tuple, list)) and len(leaves) == 1:
        tree = "single"
    elif len(leaves) == 0:
        tree = "none"
    else:
        tree = "tuple"
    outs = [(tuple(int(s) for s in a.shape), _torch_dtype(a.dtype)) for a in leaves]
    p = _Program(text, outs, tree)
    with _LOCK:
        _STATS["lowerings"] += 1
        _STATS["lower_time_s"] += time.perf_counter() - t0
        _PROGRAMS[key] = p
    if f is not None:
        try:
            tmp = f.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps({"format": _FORMAT, "text": text, "tree": tree,
                                       "outs": [[list(s), str(t).split(".")[1]] for s, t in outs]}))
            os.replace(tmp, f)
        except OSError:
            pass
    return p


def _run_program(p, tensors):
    """Run program p on tpu tensors (the IR graph, imported once per precision)."""
    from . import _C
    dev = tensors[0].device.index if tensors else torch.tpu.current_device()
    prec = _C._get_precision()
    with _LOCK:
        h = p.graphs.get(prec)
    if h is None:
        t0 = time.perf_counter()
        h = _C._shlo_import(p.text, list(tensors), prec)
        with _LOCK:
            _STATS["imports"] += 1
            _STATS["import_time_s"] += time.perf_counter() - t0
            p.graphs[prec] = h
    with _LOCK:
        _STATS["runs"] += 1
    with torch.tpu.device(dev):
        outs = _C._shlo_run(h, list(tensors), dev)
    return outs


def import_stablehlo(text, example_inputs):
    """Import generic-form StableHLO text (see module doc) for inputs shaped
    like ``example_inputs`` (tpu tensors); returns a function running it."""
    p = _Program(text, None, "tuple")

    def run(*tensors):
        return tuple(_run_program(p, tensors))
    run(*example_inputs)  # import now: errors surface here
    return run


# ---- signature handling ----------------------------------------------------------------------

def _is_tensor_ann(ann):
    import jax
    return ann in (jax.Array, torch.Tensor) or ann in ("jax.Array", "torch.Tensor", "Array",
                                                       "Tensor")


def _return_schema(ann):
    import jax
    if ann is None or ann is type(None):
        return "()"
    if _is_tensor_ann(ann):
        return "Tensor"
    origin = typing.get_origin(ann)
    if origin in (tuple, list):
        args = typing.get_args(ann)
        if len(args) == 2 and args[1] is Ellipsis:
            return "Tensor[]"
        if all(_is_tensor_ann(a) for a in args):
            return "(" + ", ".join("Tensor" for _ in args) + ")"
    raise ValueError(f"Unsupported return type annotation: {ann} (jax.Array or a tuple of "
                     f"jax.Array, as in TorchTPU)")


_SCALAR = {int: "SymInt", float: "float", bool: "bool", str: "str"}


def _schema(sig):
    params = []
    for p in sig.parameters.values():
        if p.annotation is inspect.Parameter.empty:
            raise ValueError(f"Missing argument type annotation for JAX function: {sig}.")
        if _is_tensor_ann(p.annotation):
            t = "Tensor"
        elif p.annotation in _SCALAR:
            t = _SCALAR[p.annotation]
        else:
            raise ValueError(f"Invalid signature for JAX function: {sig}. Argument {p.name!r}: "
                             f"only jax.Array and int/float/bool/str are supported.")
        s = f"{t} {p.name}"
        if p.default is not inspect.Parameter.empty:
            s += "=" + (str(p.default) if not isinstance(p.default, str) else repr(p.default)
                        .replace("'", '"'))
        if p.kind is inspect.Parameter.KEYWORD_ONLY and "*" not in [x.split()[0] for x in params]:
            params.append("*")
        params.append(s)
    return "(" + ", ".join(params) + ") -> " + _return_schema(sig.return_annotation)


class _JaxOp:
    """State of one jax_op: the function, its tensor/static split, lowering."""

    def __init__(self, name, fn, sig):
        self.name, self.fn, self.sig = name, fn, sig
        self.pnames = list(sig.parameters)
        self.is_tensor = [_is_tensor_ann(p.annotation) for p in sig.parameters.values()]
        self.fp = _fn_fingerprint(fn)

    def split(self, args, kwargs):
        b = self.sig.bind(*args, **kwargs)
        b.apply_defaults()
        vals = [b.arguments[n] for n in self.pnames]
        tensors = [v for v, t in zip(vals, self.is_tensor) if t]
        statics = [(n, v) for n, v, t in zip(self.pnames, vals, self.is_tensor) if not t]
        return tensors, statics

    def _closed(self, statics):
        """fn of the tensor arguments only (statics bound by name)."""
        fn, pnames, is_tensor = self.fn, self.pnames, self.is_tensor
        sd = dict(statics)
        kinds = {n: p.kind for n, p in self.sig.parameters.items()}

        def f(*ts):
            it = iter(ts)
            pos, kw = [], {}
            for n, t in zip(pnames, is_tensor):
                v = next(it) if t else sd[n]
                if kinds[n] is inspect.Parameter.KEYWORD_ONLY:
                    kw[n] = v
                else:
                    pos.append(v)
            return fn(*pos, **kw)
        return f

    def _avals(self, tensors):
        jax = _jax()
        return [jax.ShapeDtypeStruct(tuple(t.shape), _jax_dtype(t.dtype)) for t in tensors]

    def _key(self, tag, tensors, statics, extra=()):
        jax = _jax()
        return [_FORMAT, self.name, tag, self.fp, repr(statics),
                [(list(t.shape), str(t.dtype)) for t in tensors], list(extra), jax.__version__]

    def forward_program(self, tensors, statics):
        return _lower(self._key("fwd", tensors, statics), self._closed(statics), self._avals(tensors))

    def backward_program(self, tensors, statics, diff, cts):
        jax = _jax()
        f = self._closed(statics)
        nt = len(tensors)

        def bwd(*xs):
            prim, ct = list(xs[:nt]), list(xs[nt:])

            def g(*d):
                full = list(prim)
                for i, v in zip(diff, d):
                    full[i] = v
                return f(*full)
            out, vjp = jax.vjp(g, *[prim[i] for i in diff])
            if isinstance(out, (tuple, list)):
                cot = type(out)(ct)
            else:
                cot = ct[0]
            return tuple(vjp(cot))
        key = self._key("bwd", list(tensors) + list(cts), statics, extra=diff)
        return _lower(key, bwd, self._avals(list(tensors) + list(cts)))

    def run(self, args, kwargs):
        tensors, statics = self.split(args, kwargs)
        if not tensors or any(t.device.type != "tpu" for t in tensors):
            return self.run_jax(tensors, statics)
        p = self.forward_program(tensors, statics)
        outs = _run_program(p, [t for t in tensors])
        return _pack(p, outs)

    def run_jax(self, tensors, statics):
        """CPU tensors: run the JAX function itself (a reference path)."""
        jax = _jax()
        import numpy as np
        with jax.enable_x64(True):
            arrs = [jax.numpy.asarray(t.detach().cpu().float().numpy() if t.dtype == torch.bfloat16
                                      else t.detach().cpu().numpy()).astype(_jax_dtype(t.dtype))
                    for t in tensors]
            out = jax.jit(self._closed(statics))(*arrs)
        leaves = jax.tree_util.tree_leaves(out)
        res = [torch.from_numpy(np.asarray(a).astype(np.float32)).to(torch.bfloat16)
               if np.asarray(a).dtype.name == "bfloat16" else torch.from_numpy(np.array(a))
               for a in leaves]
        if isinstance(out, (tuple, list)):
            return tuple(res)
        return res[0] if res else None

    def fake(self, args, kwargs):
        tensors, statics = self.split(args, kwargs)
        jax = _jax()
        dev = tensors[0].device if tensors else torch.device("meta")
        with jax.enable_x64(True):
            out = jax.eval_shape(self._closed(statics), *self._avals(tensors))
        leaves = jax.tree_util.tree_leaves(out)
        res = [torch.empty(tuple(a.shape), dtype=_torch_dtype(a.dtype), device=dev) for a in leaves]
        if isinstance(out, (tuple, list)):
            return tuple(res)
        return res[0] if res else None


def _pack(p, outs):
    if p.tree == "single":
        return outs[0]
    if p.tree == "none":
        return None
    return tuple(outs)


def jax_op(name, fn=None, /, *, donate_argnums=None, mesh=None, input_partition_specs=None,
           output_partition_specs=None):
    """Register a JAX function as the PyTorch custom op ``name``
    ("namespace::op"), TorchTPU's signature. Arguments annotated
    ``jax.Array`` (or ``torch.Tensor``) are tensors; int/float/bool/str
    arguments are static (part of the lowering's key). The return annotation
    must be ``jax.Array`` or a tuple of them. Returns the
    ``torch.library.CustomOpDef`` (callable; ``fn=None``: a decorator).

    ``mesh`` and partition specs describe multi-chip kernels, which need the
    TPU's Pallas Mosaic backend: only None is accepted here.
    ``donate_argnums`` is accepted and ignored (inputs stay valid)."""
    if "::" not in name:
        raise ValueError(f"Op name {name} does not contain a namespace.")
    if len(name.split("::")) != 2:
        raise ValueError(f"Op name {name} must have exactly one '::' separator.")
    if mesh is not None or input_partition_specs is not None or output_partition_specs is not None:
        raise NotImplementedError("jax_op: mesh / partition specs (multi-chip Pallas kernels) "
                                  "are not supported on the vTPU")

    def dec(fn):
        _jax()
        sig = inspect.signature(inspect.unwrap(fn), eval_str=True)
        # functools.partial keywords are bound already
        op = _JaxOp(name, fn, sig)
        schema = _schema(sig)

        def impl(*args, **kwargs):
            return op.run(args, kwargs)

        cop = torch.library.custom_op(name, impl, mutates_args=(), schema=schema)
        cop.register_fake(lambda *a, **k: op.fake(a, k))

        def setup_context(ctx, inputs, output, keyword_only_inputs=None):
            tensors, statics = op.split(inputs, keyword_only_inputs or {})
            ctx.statics = statics
            ctx.diff = [i for i, t in enumerate(tensors) if t.is_floating_point()]
            ctx.ntensors = len(tensors)
            ctx.save_for_backward(*tensors)
            outs = output if isinstance(output, (tuple, list)) else (output,)
            ctx.out_meta = [(tuple(o.shape), o.dtype, o.device) for o in outs]

        def backward(ctx, *grads):
            tensors = list(ctx.saved_tensors)
            cts = [g if g is not None else torch.zeros(s, dtype=dt, device=dv)
                   for g, (s, dt, dv) in zip(grads, ctx.out_meta)]
            cts = [c.contiguous() for c in cts]
            if any(t.device.type != "tpu" for t in tensors + cts):
                raise NotImplementedError("jax_op backward runs on tpu tensors")
            p = op.backward_program(tensors, ctx.statics, ctx.diff, cts)
            gi = _run_program(p, tensors + cts)
            per_tensor = [None] * ctx.ntensors
            for i, g in zip(ctx.diff, gi):
                per_tensor[i] = g
            it = iter(per_tensor)
            grads_all = [next(it) if t else None for t in op.is_tensor]
            return tuple(g for g, p in zip(grads_all, op.sig.parameters.values())
                         if p.kind is not inspect.Parameter.KEYWORD_ONLY)

        cop.register_autograd(backward, setup_context=setup_context)
        cop._jax_op = op
        return cop

    if fn is None:
        return dec
    return dec(fn)


class _Device(types.SimpleNamespace):
    """A stand-in jax.Device for a tpu chip of this process group (JAX
    never runs on it: jax_op kernels are lowered, not executed by JAX)."""

    def __hash__(self):
        return hash((self.id, self.process_index))


def get_pallas_mesh(axis_names, mesh_shape=None, process_group=None):
    """A ``jax.sharding.Mesh`` with one entry per rank of ``process_group``
    (default: the world), TorchTPU's signature. Needs torch.distributed to
    be initialised (RuntimeError otherwise); ``mesh_shape`` is required for
    several axes and its product must equal the world size (ValueError)."""
    import numpy as np
    import torch.distributed as dist
    jax = _jax()
    if not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialized. dist.init_process_group()")
    world = dist.get_world_size()
    if process_group is not None and dist.get_world_size(process_group) != world:
        raise ValueError("torch_tpu pallas kernels currently require full world-size meshes only.")
    names = (axis_names,) if isinstance(axis_names, str) else tuple(axis_names)
    if mesh_shape is None:
        if len(names) > 1:
            raise ValueError("mesh_shape must be explicitly specified for more than one axis")
        mesh_shape = (world,)
    if len(names) != len(mesh_shape):
        raise ValueError(f"axis_names {names} does not match length of mesh_shape {mesh_shape}")
    if int(np.prod(mesh_shape)) != world:
        raise ValueError(f"Pallas mesh shape {tuple(mesh_shape)} product must match world size "
                         f"({world}).")
    devs = np.empty(world, dtype=object)
    for i in range(world):
        devs[i] = _Device(id=i, process_index=i, device_kind="vTPU", platform="tpu")
    return jax.sharding.Mesh(devs.reshape(tuple(mesh_shape)), axis_names=names)
