"""``torch.compile(backend="tpu")``: whole-graph programs on the C runtime.

Dynamo captures the Python frame, AOTAutograd turns it into aten-level
forward and backward FX graphs (min-cut rematerialisation between them),
and each FX graph becomes ONE runtime program:

* First call with a given input layout (the *capture*): the device's
  recorder is put in capture mode (``tpug_capture_begin``), the FX graph
  runs node by node through the same ATen lowerings eager mode uses (no
  second lowering table), every op is deferred into one pending graph
  (index checks included: their errors surface when the program runs, as
  on a GPU), and ``tpug_capture_end`` merges it into one program through
  the shared compilation cache (memory + disk: a second process finds it
  on disk) and runs it. Intermediates never touch memory unless the
  executor needs them; dead ones are never written.
* Later calls with the same layout (the *replay*): no op is dispatched.
  The captured program runs again with its parameter and output views
  moved to the new inputs' storage and freshly allocated output storage
  (``tpug_capture_run``); random ops get fresh Philox keys from the
  device generator, which advances as it would have in eager mode.
* A graph whose capture was cut (an op that needs the host mid-graph,
  memory pressure, another stream) runs every time through Fused Eager
  instead: still correct, still fused, just not one program.

Ops without a native lowering inside a compiled graph raise
``NotImplementedError`` naming them when the CPU fallback is off
(``TORCH_TPU_CPU_FALLBACK=0``); otherwise they run through the counted CPU
fallback, the capture warns naming them, and the graph is not replayed as
one program.
"""
import collections
import contextlib
import functools
import itertools
import os
import threading
import warnings

import torch
import torch.fx
from torch.utils import _pytree as pytree

from . import _C

_MAX_LAYOUTS = 16  # captured programs kept per FX graph (one per input layout)
_DEBUG = os.environ.get("TORCH_TPU_COMPILE_DEBUG", "") == "1"
_REPLAY = True  # module switch for A/B runs and tests (_set_replay)

_stats_lock = threading.Lock()
_stats = collections.Counter()  # graphs, captures, replays, fused_runs, recompiles, ...


def _count(key, n=1):
    with _stats_lock:
        _stats[key] += n


def stats():
    """Counters of the compiled path (also in ``torch.tpu._get_cache_stats()``
    under ``"compile"``)."""
    with _stats_lock:
        d = dict(_stats)
        if _bucket_refusals:
            d["bucket_refusals"] = list(_bucket_refusals)
        return d


def _reset_stats():
    with _stats_lock:
        _stats.clear()
        _bucket_refusals.clear()


def _set_replay(on):
    """Enable (default) or disable replaying captured programs (A/B runs:
    disabled, every call re-dispatches its ops under capture/Fused Eager)."""
    global _REPLAY
    _REPLAY = bool(on)


# ---- running one FX graph as one program ------------------------------------------


def _storage_ptr(t):
    return t.untyped_storage().data_ptr()


def _arg_key(a, groups, ptrs):
    if isinstance(a, torch.Tensor):
        if a.device.type != "tpu":
            ptrs.append(None)
            return ("cpu", a.dtype, tuple(a.shape), tuple(a.stride()))
        p = _storage_ptr(a)
        ptrs.append(p)
        g = groups.setdefault(p, len(groups))
        return ("tpu", a.device.index, a.dtype, tuple(a.shape), tuple(a.stride()),
                a.storage_offset(), a.untyped_storage().nbytes(), g)
    ptrs.append(None)
    if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("sym", repr(a))
    return ("val", a) if isinstance(a, (int, float, bool, str, type(None))) else ("obj", id(a))


class _Program:
    """One captured program and how to rebuild its outputs on replay."""

    def __init__(self, handle, dev):
        self.handle = handle
        self.dev = dev
        self.in_ptr = []      # (first arg index, captured storage ptr) per input storage
        self.const_ptrs = []  # blocks owned by the graph module (kept alive by it)
        self.out_specs = []   # per output: ("val", v) | ("in", arg index | constant, meta)
        #                       | ("new", group, meta)
        self.new_groups = []  # per fresh output storage: (captured ptr, nbytes, solo output)
        self.rng = None       # ([key offset - generator offset at capture], offsets drawn)
        self.device = torch.device("tpu", dev)

    def finish(self):
        """Precompute what every replay needs: the relocation sources in order,
        and which fresh storages hold exactly one output that fills them (that
        output is made with one empty_strided instead of storage + set_)."""
        self.in_args = [i for i, _ in self.in_ptr]
        self.frm = [p for _, p in self.in_ptr] + list(self.const_ptrs) + \
            [p for p, _ in self.new_groups]
        users = collections.Counter(sp[1] for sp in self.out_specs if sp[0] == "new")
        groups = []
        for gi, (p, nbytes) in enumerate(self.new_groups):
            solo = None
            if users[gi] == 1:
                oi = next(k for k, sp in enumerate(self.out_specs)
                          if sp[0] == "new" and sp[1] == gi)
                dtype, size, stride, off = self.out_specs[oi][2]
                if off == 0 and all(st >= 0 for st in stride) and \
                        _extent_bytes(dtype, size, stride) == nbytes:
                    solo = oi
                    self.out_specs[oi] = ("solo",) + self.out_specs[oi][1:]
            groups.append((p, nbytes, solo))
        self.new_groups = groups

    def __del__(self):
        if self.handle:
            _C._capture_free(self.handle)
            self.handle = 0


def _extent_bytes(dtype, size, stride):
    if any(s == 0 for s in size):
        return 0
    return (sum((s - 1) * st for s, st in zip(size, stride)) + 1) * dtype.itemsize


def _meta(t):
    return (t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset())


class _TpuGraph:
    """The compiled form of one AOTAutograd FX graph (boxed calling convention)."""

    def __init__(self, gm, kind, tree_outputs=False, from_cache=False):
        self._boxed_call = not tree_outputs  # instance attribute: wrappers copy __dict__
        self.tree_outputs = tree_outputs  # outputs keep gm's structure (export), else a list
        self.out_tree = None
        self.gm = gm
        self.kind = kind
        self.split = _split_at_collectives(gm, kind)  # None: no collective in the graph
        self.programs = collections.OrderedDict()  # layout key -> _Program | None (fused)
        self.lock = threading.Lock()
        self.bucket = None  # _buckets.Plan when a dynamic dimension is bucketed
        self.consts = [v for v in itertools.chain(gm.parameters(), gm.buffers())]
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                v = getattr(gm, node.target, None)
                if isinstance(v, torch.Tensor):
                    self.consts.append(v)
        _count("graphs")
        _count(f"graphs_{kind}")
        if from_cache:  # read back from AOTAutogradCache / the Dynamo cache, not traced
            _count("graphs_loaded")

    # -- entry point
    def __call__(self, *a):
        # boxed (one list, which is cleared as PyTorch's convention wants) or
        # positional (when a wrapper on the way dropped _boxed_call)
        if len(a) == 1 and type(a[0]) is list and self._boxed_call:
            args = list(a[0])
            a[0].clear()
        else:
            args = list(a)
        dev = _device_of(args)
        if dev is None:  # nothing on tpu: plain eager (the aten graph on CPU)
            return self._result(self._run_gm(args))
        if self.split is not None:  # programs and collectives in turn
            _count("split_runs")
            return self._result(self._run_gm(args, split=True))
        plan = self.bucket
        if plan is not None and plan.ok and (plan.kind != "forward" or plan.linked):
            return self._bucketed(plan, args, dev)
        return self._call(args, dev, self.gm)

    def _call(self, args, dev, gm):
        from . import compiler

        opts = compiler.current_options()
        groups, ptrs = {}, []
        key = (_C._get_precision(), compiler._options_key(),
               tuple([_arg_key(a, groups, ptrs) for a in args]))
        with self.lock:
            prog = self.programs.get(key, False)
            if prog is not False:
                self.programs.move_to_end(key)
        if prog is not False and prog is not None and _REPLAY and opts.get("replay", True):
            return self._replay(prog, args, ptrs)
        with torch.tpu.device(dev), _precision_override(opts.get("precision")):
                if prog is False:
                    return self._capture(key, args, dev, gm)
                return self._fused(args, dev, gm)

    # -- bounded dynamism: pad to the bucket, run its program, slice back
    def _bucketed(self, plan, args, dev):
        from . import _buckets

        n = args[plan.s_idx]
        if not isinstance(n, int):
            return self._call(args, dev, self.gm)
        b = _buckets.pick_bucket(plan.bounds, plan.step, n)
        padded = list(args)
        padded[plan.s_idx] = b
        for i, coeffs in plan.sym_inputs:
            padded[i] = _buckets.poly_int(coeffs, b)
        for i, dims in plan.tensor_inputs:
            if dims is None:  # saved by the bucketed forward: already padded
                continue
            t = args[i]
            pads = [0] * (2 * t.dim())
            for d, _, c in dims:
                have, want = t.shape[d], b + c
                if have != want:
                    if have != n + c:
                        raise RuntimeError(
                            f"torch.compile(backend='tpu'): bucketed input {i} has size {have} "
                            f"along dim {d}, expected {n + c} or {want}")
                    pads[2 * (t.dim() - 1 - d) + 1] = want - have
            if any(pads):
                padded[i] = torch.constant_pad_nd(t, pads, 0)
        padded.append(_n_tensor(n, dev))
        _count("bucketed_calls")
        outs = self._call(padded, dev, plan.gm)
        nout = len(outs)
        first_saved = nout - plan.saved_k
        for i, spec in enumerate(plan.outputs):
            if spec is None:
                continue
            if spec[0] == "sym":
                outs[i] = _buckets.poly_int(spec[1], n)
            elif i < first_saved:
                outs[i] = _buckets.slice_back(outs[i], spec, n, b)
        return outs

    # -- first call of a layout: record every op into one program
    def _capture(self, key, args, dev, gm):
        if gm is not self.gm:  # one per bucket (a program, or a cut capture run fused)
            _count("bucket_programs")
            _count(f"bucket_programs_{self.kind}")
        gen = _C._get_default_generator(dev)
        off0 = gen.get_offset()
        fb0 = dict(_C._fallback_counts())
        _C._capture_begin(dev)
        try:
            outs = self._run_gm(args, dev, gm)
        except BaseException:
            h, _ = _C._capture_end(dev)
            if h:
                _C._capture_free(h)
            raise
        handle, cut = _C._capture_end(dev)
        off1 = gen.get_offset()
        fell_back = sorted(k for k, v in _C._fallback_counts() if v > fb0.get(k, 0))
        if fell_back:
            _count("graphs_with_fallback")
            warnings.warn(
                "torch.compile(backend='tpu'): op(s) without a native tpu lowering ran through "
                f"the counted CPU fallback inside a compiled graph: {', '.join(fell_back)}")
        prog = None
        why = _C._flush_reason(cut)
        if handle:
            prog = self._describe(handle, dev, args, outs, gen, off0, off1)
            why = "unbound memory" if prog is None else None
        if prog is None:
            _count("broken_captures")
            _count(f"broken_by_{why}")
        else:
            _count("captures")
        with self.lock:
            self.programs[key] = prog
            while len(self.programs) > _MAX_LAYOUTS:
                self.programs.popitem(last=False)
        return self._result(outs)

    def _run_gm(self, args, dev=None, gm=None, split=False):
        gm = self.gm if gm is None else gm
        r = self.split(*args) if split else \
            _DebugInterpreter(gm, dev).run(*args) if _DEBUG and dev is not None else gm(*args)
        if not self.tree_outputs:
            return _as_list(r)
        flat, self.out_tree = pytree.tree_flatten(r)
        return flat

    def _result(self, outs):
        return pytree.tree_unflatten(outs, self.out_tree) if self.tree_outputs else outs

    def _describe(self, handle, dev, args, outs, gen, off0, off1):
        """Map every block the program touches to an input, an output or a
        constant of the graph module; None (and the handle freed) when some
        block is none of these (the program cannot be replayed)."""
        prog = _Program(handle, dev)
        if any(isinstance(a, torch.Tensor) and a.device.type != "tpu" for a in args):
            return _unbound("a host tensor input (fed as a constant)")
        known = {}
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor) and a.device.type == "tpu":
                p = _storage_ptr(a)
                known.setdefault(p, ("in", i))
        for c in self.consts:
            if c.device.type == "tpu":
                known.setdefault(_storage_ptr(c), ("const", c))
        groups = {}
        for o in outs:
            if not isinstance(o, torch.Tensor):
                prog.out_specs.append(("val", o))
                continue
            if o.device.type != "tpu":
                return _unbound("a host tensor output")
            p = _storage_ptr(o)
            k = known.get(p)
            if k is not None and k[0] == "in":
                prog.out_specs.append(("in", k[1], _meta(o)))
            elif k is not None and p != 0:  # (a view of) a graph constant, e.g. a folded arange
                prog.out_specs.append(("in", k[1], _meta(o)))
            else:
                if p not in groups:
                    groups[p] = len(prog.new_groups)
                    prog.new_groups.append((p, o.untyped_storage().nbytes()))
                prog.out_specs.append(("new", groups[p], _meta(o)))
        for b in _C._capture_bases(handle):
            if b not in known and b not in groups:
                if _DEBUG:
                    print(f"[torch_tpu compile] block {b:#x} is no input, output or constant "
                          f"of the graph; known: {[hex(k) for k in known]}, outputs: "
                          f"{[hex(k) for k in groups]}", flush=True)
                    print("   made by", _debug_ptrs.get(b))
                return None
        prog.in_ptr = [(i, p) for p, (kind, i) in known.items() if kind == "in"]
        prog.const_ptrs = [b for b, k in known.items() if k[0] == "const"]
        prog.finish()
        keys = _C._capture_rng(handle)
        if keys:
            seed = gen.initial_seed()
            seeds, offs = keys[0::2], keys[1::2]
            if any(s & 0xFFFFFFFFFFFFFFFF != seed for s in seeds) or any(
                    not (off0 <= o < max(off1, off0 + 1)) for o in offs):
                return _unbound("a random op drew from another generator")
            prog.rng = ([o - off0 for o in offs], off1 - off0)
        return prog

    # -- later calls: run the captured program on the new memory
    def _replay(self, prog, args, ptrs):
        frm = prog.frm  # inputs' and constants' captured blocks, then fresh outputs'
        to = [ptrs[i] for i in prog.in_args]
        to += prog.const_ptrs
        dev = prog.device
        storages = []
        for p, nbytes, solo in prog.new_groups:
            if solo is not None:  # the one output of a storage it fills exactly
                dtype, size, stride, _ = prog.out_specs[solo][2]
                t = torch.empty_strided(size, stride, dtype=dtype, device=dev)
                s = t
                to.append(t.untyped_storage().data_ptr())
            else:
                s = torch.empty(nbytes, dtype=torch.uint8, device=dev).untyped_storage()
                to.append(s.data_ptr())
            storages.append(s)
        keys = []
        if prog.rng is not None:
            gen = _C._get_default_generator(prog.dev)
            seed, base = gen.initial_seed(), gen.get_offset()
            rel, used = prog.rng
            for r in rel:
                keys += [_as_i64(seed), base + r]
            gen.set_offset(base + used)
        _C._capture_run(prog.handle, prog.dev, frm, to, keys)
        outs = []
        for spec in prog.out_specs:
            if spec[0] == "val":
                outs.append(spec[1])
                continue
            dtype, size, stride, off = spec[2]
            if spec[0] == "in":
                src = spec[1] if isinstance(spec[1], torch.Tensor) else args[spec[1]]
                outs.append(src.as_strided(size, stride, off) if
                            (tuple(src.shape), tuple(src.stride()), src.storage_offset(), src.dtype)
                            != (size, stride, off, dtype) else src)
            elif spec[0] == "solo":
                outs.append(storages[spec[1]])
            else:
                t = torch.empty(0, dtype=dtype, device=dev)
                t.set_(storages[spec[1]], off, size, stride)
                outs.append(t)
        _count("replays")
        return self._result(outs)

    # -- graphs that cannot be one program: Fused Eager, flushed at the end
    def _fused(self, args, dev, gm):
        prev = _C._get_fused()
        _C._set_fused(True)
        try:
            outs = self._run_gm(args, None, gm)
            _C._flush(dev)
        finally:
            if not prev:
                _C._set_fused(False)
        _count("fused_runs")
        return self._result(outs)


_debug_ptrs = {}
_n_tensors = {}  # (device, n) -> int64 scalar on the device: the true length of a bucketed call


def _n_tensor(n, dev):
    t = _n_tensors.get((dev, n))
    if t is None:
        if len(_n_tensors) > 4096:
            _n_tensors.clear()
        t = _n_tensors[(dev, n)] = torch.tensor(n, dtype=torch.int64, device=torch.device("tpu", dev))
    return t

# ---- collectives: the graph is cut around them ---------------------------------------

_COLLECTIVE_NAMESPACES = frozenset({"_c10d_functional", "_c10d_functional_autograd", "c10d_functional"})


def _is_collective(node):
    return node.op == "call_function" and \
        getattr(node.target, "namespace", None) in _COLLECTIVE_NAMESPACES


class _Part(torch.nn.Module):
    """A collective-free piece of a cut graph: one captured program."""

    def __init__(self, graph):
        super().__init__()
        self.graph = graph

    def forward(self, *args):
        return self.graph(*args)


def _split_at_collectives(gm, kind):
    """A graph with functional collectives (``_c10d_functional.*``: what
    DTensor, FSDP2 and ``torch.distributed._functional_collectives`` emit)
    is cut at each run of collective nodes: the pieces between run as
    captured programs (each one program, replayed), the collectives run
    eagerly between them through the process group (the backend orders
    them on the chip's streams). None if `gm` has no collective."""
    if not any(_is_collective(n) for n in gm.graph.nodes):
        return None
    from torch.fx.passes.split_module import split_module

    part, idx, in_coll = {}, 0, None
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "output"):
            continue
        c = _is_collective(n)
        if in_coll is not None and c != in_coll:
            idx += 1
        in_coll = c
        part[n.name] = (idx, c)
    colls = {i for i, c in part.values() if c}
    top = split_module(gm, None, lambda n: part[n.name][0], keep_original_order=True)
    for name, sub in list(top.named_children()):
        i = int(name.rsplit("_", 1)[1])
        if i not in colls:
            setattr(top, name, _Part(_TpuGraph(sub, f"{kind}_part", tree_outputs=True)))
    _count("split_graphs")
    return top


def _unbound(why):
    if _DEBUG:
        print(f"[torch_tpu compile] not replayable: {why}", flush=True)
    return None


class _DebugInterpreter(torch.fx.Interpreter):
    """TORCH_TPU_COMPILE_DEBUG=1: name the FX node whose op cut a capture
    (the device's pending op count drops when something forces a flush)."""

    def __init__(self, gm, dev):
        super().__init__(gm)
        self.dev = dev
        self.reported = False
        self.stride_reported = False

    def run_node(self, n):
        r = super().run_node(n)
        if isinstance(r, torch.Tensor) and r.device.type == "tpu":
            _debug_ptrs[_storage_ptr(r)] = n.format_node()
            v = n.meta.get("val")
            if isinstance(v, torch.Tensor) and not self.stride_reported and \
                    tuple(v.shape) == tuple(r.shape) and r.numel() > 1 and \
                    tuple(v.stride()) != tuple(r.stride()):
                self.stride_reported = True
                print(f"[torch_tpu compile] {n.name} has strides {tuple(r.stride())} on tpu, "
                      f"{tuple(v.stride())} when traced: {n.format_node()}", flush=True)
        if _C._capturing(self.dev) == 2 and not self.reported:
            self.reported = True
            print(f"[torch_tpu compile] capture cut at node {n.name}: {n.format_node()}",
                  flush=True)
        return r


def _as_i64(u):
    return u - (1 << 64) if u >= (1 << 63) else u


def _as_list(r):
    if isinstance(r, (list, tuple)):
        return list(r)
    return [r]


def _device_of(args):
    for a in args:
        if isinstance(a, torch.Tensor) and a.device.type == "tpu":
            return a.device.index or 0
    return None


def _precision_override(name):
    if name is None:
        return contextlib.nullcontext()
    return torch.tpu.precision(torch.tpu.Precision[name.upper()])


# ---- the Dynamo backend -----------------------------------------------------------------


def _fx_compiler(kind):
    def compile_fn(gm, example_inputs):
        from ._compile_cache import TpuOutputCode

        out = TpuOutputCode(gm, kind)
        _plan_buckets(out.graph, gm, kind)
        return out

    compile_fn.__name__ = f"tpu_{kind}_compiler"
    from torch._functorch.aot_autograd import SerializableAOTDispatchCompiler
    from torch._inductor.output_code import OutputCode

    return SerializableAOTDispatchCompiler(OutputCode, compile_fn)


def _plan_buckets(graph, gm, kind):
    """Bounded dynamism (see _buckets): plan the graph's buckets, or record
    why it runs per exact length. A forward is bucketed only together with its
    backward (the tensors it saves stay padded)."""
    from . import _buckets

    fw = getattr(_buckets._tls, "last_forward", None)
    if kind != "backward":
        _buckets._tls.last_forward = None
    try:
        p = _buckets.plan(gm, kind, _buckets.current_options(), fw if kind == "backward" else None)
    except Exception as e:  # noqa: BLE001 - an analysis bug must not break compilation
        p = _buckets.Plan(kind)
        p.refuse(f"internal error in the bucket analysis: {type(e).__name__}: {e}")
    if p is None:
        if kind == "backward" and fw is not None and fw.ok:
            if _buckets.link_plain_backward(fw, gm):
                _count("bucket_graphs")
            else:
                _note_bucket_refusal(fw)
        return
    graph.bucket = p
    if kind == "forward":
        _buckets._tls.last_forward = p
        if not p.ok:
            _note_bucket_refusal(p)
        return
    if kind == "backward":
        _buckets._tls.last_forward = None
        if fw is not None:
            if p.ok:
                fw.linked = True
                _count("bucket_graphs", 2)
            elif fw.ok:
                fw.refuse(f"its backward cannot be bucketed: {p.reason}")
        _note_bucket_refusal(p)
        return
    if p.ok:
        _count("bucket_graphs")
    else:
        _note_bucket_refusal(p)


def _note_bucket_refusal(p):
    if p.ok or getattr(p, "_noted", False):
        return
    p._noted = True
    _count("bucket_refused")
    _count(f"bucket_refused[{p.op or 'other'}]")
    with _stats_lock:
        _bucket_refusals.append(f"{p.kind}: {p.reason}")
        del _bucket_refusals[:-16]
    if _DEBUG:
        print(f"[torch_tpu compile] {p.kind} graph runs per exact length (no buckets): {p.reason}",
              flush=True)


_bucket_refusals = []  # the last reasons (stats()["bucket_refusals"])


_recompiles = collections.Counter()  # frame id -> recompiles seen
_RECOMPILE_WARN_AT = 3


def _note_recompile():
    cid = torch._guards.CompileContext.current_compile_id()
    if cid is None or not getattr(cid, "frame_compile_id", 0):
        return
    _count("recompiles")
    fid = getattr(cid, "frame_id", None)
    _recompiles[fid] += 1
    if _recompiles[fid] == _RECOMPILE_WARN_AT:
        reason = _last_guard_failure()
        warnings.warn(
            f"torch.compile(backend='tpu'): frame {fid} was recompiled {_recompiles[fid]} times; "
            f"last cause: {reason}. Mark changing dimensions dynamic "
            "(torch._dynamo.mark_dynamic) or keep shapes/dtypes/Python constants stable.")


def _last_guard_failure():
    try:
        from torch._dynamo.utils import guard_failures

        last = None
        for reasons in guard_failures.values():
            if reasons:
                last = reasons[-1]
        return str(last) if last is not None else "unknown guard"
    except Exception:  # noqa: BLE001 - diagnostics only
        return "unknown guard"


def tpu_backend(gm, example_inputs, **kwargs):
    """The ``"tpu"`` Dynamo backend: AOTAutograd with a forward and a backward
    compiler that each turn one FX graph into one runtime program."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    from . import _buckets

    _ensure_registered()
    opts = _buckets.validate_options(kwargs.pop("options", None))
    _note_recompile()
    _count("dynamo_graphs")
    backend = aot_autograd(
        fw_compiler=_fx_compiler("forward"),
        bw_compiler=_fx_compiler("backward"),
        inference_compiler=_fx_compiler("inference"),
        partition_fn=min_cut_rematerialization_partition,
        keep_inference_input_mutations=True,
    )
    prev = _buckets.current_options()
    _buckets.set_options(opts)
    try:
        with _cache_scope(opts):
            return backend(gm, example_inputs, **kwargs)
    finally:
        _buckets.set_options(prev)


@contextlib.contextmanager
def _cache_scope(bucket_opts=None):
    """While the tpu backend compiles: AOTAutogradCache stores our artifacts
    themselves ("bundled": there is no inductor FXGraphCache entry to point
    to), and every cache key carries the torch_tpu build id and the compiler
    options in effect (PyTorch's ``cache_key_tag``, extended, not replaced)."""
    from torch._functorch import config as fconfig
    from torch.compiler import config as cconfig

    from . import compiler
    from ._compile_cache import build_id

    tag = "|".join(x for x in (cconfig.cache_key_tag, build_id(),
                               repr(compiler._options_key()) if compiler._options_key() else "",
                               repr(sorted(bucket_opts.items())) if bucket_opts else "")
                   if x)
    # the backward is compiled with the forward, inside this scope, so the cache
    # entry (written once both exist) is written here too
    with fconfig.patch(bundled_autograd_cache=True, force_non_lazy_backward_lowering=True), \
            cconfig.patch(cache_key_tag=tag):
        yield


# ---- Dynamo device interface ---------------------------------------------------------


def _make_device_interface():
    from torch._dynamo.device_interface import DeviceInterface

    class TpuInterface(DeviceInterface):
        """What Dynamo asks of a device (streams, sync, properties)."""

        class Worker:
            @staticmethod
            def set_device(device):
                torch.tpu.set_device(device)

            @staticmethod
            def current_device():
                return torch.tpu.current_device()

            @staticmethod
            def get_device_properties(device=None):
                return torch.tpu.get_device_properties(device)

        device = torch.tpu.device
        Event = torch.Event
        Stream = torch.Stream

        @staticmethod
        def current_device():
            return torch.tpu.current_device()

        @staticmethod
        def set_device(device):
            torch.tpu.set_device(device)

        @staticmethod
        def maybe_exchange_device(device):
            prev = torch.tpu.current_device()
            if device != prev:
                torch.tpu.set_device(device)
            return prev

        @staticmethod
        def exchange_device(device):
            prev = torch.tpu.current_device()
            torch.tpu.set_device(device)
            return prev

        @staticmethod
        def device_count():
            return torch.tpu.device_count()

        @staticmethod
        def is_available():
            return torch.tpu.is_available()

        @staticmethod
        def stream(stream):
            return torch.tpu.stream(stream)

        @staticmethod
        def current_stream(device=None):
            return torch.tpu.current_stream(device)

        @staticmethod
        def set_stream(stream):
            torch.tpu.set_stream(stream)

        @staticmethod
        def _set_stream_by_id(stream_id, device_index, device_type):
            torch.tpu.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index,
                                              device_type=device_type))

        @staticmethod
        def get_raw_stream(device_idx):
            return _C._current_stream_id(device_idx)

        @staticmethod
        def synchronize(device=None):
            torch.tpu.synchronize(device)

        @staticmethod
        def get_device_properties(device=None):
            return torch.tpu.get_device_properties(device)

        @staticmethod
        def get_compute_capability(device=None):
            return ""

        @staticmethod
        def is_bf16_supported(including_emulation=False):
            return True

        @staticmethod
        def is_dtype_supported(dtype, including_emulation=False):
            return dtype not in (torch.complex32,)

        @staticmethod
        def memory_allocated(device=None):
            return torch.tpu.memory_allocated(device)

        @staticmethod
        def is_triton_capable(device=None):
            return False

        @staticmethod
        def raise_if_triton_unavailable(device=None):
            raise RuntimeError("the tpu device has no Triton backend; use backend='tpu'")

    return TpuInterface


# ---- default backend selection (TorchTPU's behaviour) ------------------------------


def _has_tpu_inputs(example_inputs):
    flat, _ = pytree.tree_flatten(example_inputs)
    return any(isinstance(x, torch.Tensor) and x.device.type == "tpu" for x in flat)


def _default_backend_selector(gm, example_inputs, **kwargs):
    """torch.compile without a backend: "tpu" when the graph's inputs live on
    the tpu device, PyTorch's default (inductor) otherwise."""
    from torch._dynamo.backends.registry import lookup_backend

    if _has_tpu_inputs(example_inputs):
        return tpu_backend(gm, example_inputs, **kwargs)
    return lookup_backend("inductor")(gm, example_inputs, **kwargs)


_INDUCTOR_TPU_ERROR = (
    "torch.compile(..., backend='inductor') does not support the tpu device; pass "
    "backend='tpu', or leave `backend` out to pick it from the inputs' device")


_installed = False
_registered = False
_reg_lock = threading.Lock()


def _ensure_registered():
    """Register the "tpu" Dynamo backend and device interface (imports
    torch._dynamo, so it happens at the first torch.compile, not at import)."""
    global _registered
    with _reg_lock:
        if _registered:
            return
        from torch._dynamo.backends.registry import _BACKENDS, register_backend
        from torch._dynamo.device_interface import register_interface_for_device

        if _BACKENDS.get("tpu") is None:
            register_backend(compiler_fn=tpu_backend, name="tpu")
        register_interface_for_device("tpu", _make_device_interface())
        _patch_optimizer_capturable()
        _patch_grouped_mm_meta()
        _registered = True


def _patch_grouped_mm_meta():
    """``aten::_grouped_mm`` on tpu (MoE layers: transformers calls it for tpu
    weights in every dtype) runs PyTorch's composite kernel over our mm in
    eager, for float32/float16/bfloat16; upstream's meta function, which
    fake tensors use while Dynamo/AOTAutograd trace, only admits CUDA's bf16.
    Tpu inputs get checks matching eager; other devices keep upstream's."""
    import torch._meta_registrations as mr

    orig = mr._meta_grouped_mm_common
    if getattr(orig, "_torch_tpu", False):
        return

    def common(mat_a, mat_b, scale_a, scale_b, offs=None, bias=None, scale_result=None,
               out_dtype=None, *args, **kwargs):
        dev = getattr(mat_a, "fake_device", mat_a.device)  # meta kernels see "meta"
        if dev.type != "tpu" or scale_a is not None or scale_b is not None:
            return orig(mat_a, mat_b, scale_a, scale_b, offs=offs, bias=bias,
                        scale_result=scale_result, out_dtype=out_dtype, *args, **kwargs)
        floats = (torch.float32, torch.float16, torch.bfloat16)
        torch._check(mat_a.dtype == mat_b.dtype and mat_a.dtype in floats,
                     lambda: f"grouped_mm(): expected float inputs of one dtype, got "
                             f"{mat_a.dtype} and {mat_b.dtype}")
        torch._check(mat_a.dim() in (2, 3) and mat_b.dim() in (2, 3),
                     lambda: "grouped_mm(): expected 2D or 3D inputs")
        if mat_a.dim() == 2 or mat_b.dim() == 2:
            torch._check(offs is not None and offs.dim() == 1 and
                         offs.dtype in (torch.int32, torch.int64),
                         lambda: "grouped_mm(): 2D inputs need 1D int32/int64 offsets")
        return mr._create_grouped_mm_output_tensor(mat_a, mat_b, offs, out_dtype)

    common._torch_tpu = True
    mr._meta_grouped_mm_common = common


def _patch_optimizer_capturable():
    """A compiled optimizer step keeps its step counters on the device
    (``capturable=True``) when its parameters are on tpu, as Dynamo does for
    CUDA: the whole step is then device work, one replayable program."""
    from torch._dynamo.variables.optimizer import OptimizerVariable

    orig = OptimizerVariable._set_capturable
    if getattr(orig, "_torch_tpu", False):
        return

    def _set_capturable(self, tx):
        opt = self.value
        for group in opt.param_groups:
            ps = group.get("params", [])
            if ("capturable" in group and ps and all(p.device.type == "tpu" for p in ps)
                    and all(p not in opt.state for p in ps)):
                group["capturable"] = True
        return orig(self, tx)

    _set_capturable._torch_tpu = True
    OptimizerVariable._set_capturable = _set_capturable


def install():
    """Make torch.compile default to the tpu backend for tpu inputs and refuse
    inductor on tpu inputs, as TorchTPU does (idempotent, cheap: Dynamo is
    imported at the first torch.compile)."""
    global _installed
    if _installed:
        return
    _installed = True
    orig_compile = torch.compile

    @functools.wraps(orig_compile)
    def compile(*args, **kwargs):  # noqa: A001 - mirrors torch.compile
        _ensure_registered()
        if kwargs.get("backend") is None:
            kwargs["backend"] = _default_backend_selector
        return orig_compile(*args, **kwargs)

    compile._torch_tpu_orig = orig_compile
    torch.compile = compile

    wrapper = torch._TorchCompileInductorWrapper
    orig_call = wrapper.__call__

    @functools.wraps(orig_call)
    def inductor_call(self, model_, inputs_, *a, **kw):
        if _has_tpu_inputs(inputs_):
            raise RuntimeError(_INDUCTOR_TPU_ERROR)
        return orig_call(self, model_, inputs_, *a, **kw)

    wrapper.__call__ = inductor_call
