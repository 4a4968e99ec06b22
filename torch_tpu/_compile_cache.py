"""The serializable compiled artifact of ``torch.compile(backend="tpu")``.

Each AOTAutograd FX graph compiles to a :class:`TpuOutputCode` (an inductor
``OutputCode``, the type PyTorch's AOTAutogradCache and Dynamo's precompile
cache know how to store). Stored are the graph module (its code and
constants) and the torch_tpu build id; the captured programs live in the
runtime's compilation cache (memory + disk), so an artifact loaded in a new
process captures once per input layout and finds its programs there.

What this enables (PyTorch's own caches, nothing torch_tpu-specific to call):

* AOTAutogradCache (on by default): a graph Dynamo traces again in a new
  process skips AOTAutograd's tracing and partitioning.
* ``torch._dynamo.config.caching_precompile = True`` (or
  ``TORCH_CACHING_PRECOMPILE=1``) and ``torch.compiler.save_cache_artifacts()``
  after the first steps: a new process with the same setting skips Dynamo's
  tracing too (bytecode, guards and these artifacts come from the Dynamo
  cache); ``torch.compiler.load_cache_artifacts(blob)`` moves the cache
  between machines.

Every key includes :func:`build_id` (through ``cache_key_tag`` while the tpu
backend compiles), and a stored artifact of another build refuses to load
(PyTorch treats that as a miss).
"""
import os

import torch
from torch._inductor.output_code import OutputCode

from . import _compile

__all__ = ["TpuOutputCode", "build_id"]

_build_id = None


def build_id():
    """Identity of this torch_tpu build: its Python sources and its glue
    library (lowerings, meta functions and decompositions of another build may
    trace a different graph)."""
    global _build_id
    if _build_id is None:
        import hashlib

        h = hashlib.sha256()
        pkg = os.path.dirname(os.path.abspath(__file__))
        for root, dirs, files in os.walk(pkg):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for f in sorted(files):
                path = os.path.join(root, f)
                if f.endswith(".py"):
                    h.update(os.path.relpath(path, pkg).encode())
                    with open(path, "rb") as fh:
                        h.update(fh.read())
                elif f.endswith(".so"):
                    st = os.stat(path)
                    h.update(f"{f}:{st.st_size}:{st.st_mtime_ns}".encode())
        _build_id = "torch_tpu-" + h.hexdigest()[:32]
    return _build_id


def _dump_gm(gm):
    """The graph itself, node by node (``GraphModule.__reduce__`` would keep
    only its Python code and re-trace that on load, which runs every call
    without tensor inputs once and freezes its result as a constant: a
    ``rand`` would return the same numbers forever). Node metadata is left out;
    tensor constants (on tpu) travel with it."""
    from torch.fx._graph_pickler import GraphPickler, Options

    # a clean module: the graph and the attributes its get_attr nodes read, not
    # the traced module's other state (its meta holds fake tensors)
    g = torch.fx.Graph()
    g.output(g.graph_copy(gm.graph, {}), type_expr=None)
    clean = torch.fx.GraphModule(gm, g)
    return GraphPickler.dumps(clean, Options(ops_filter=None,
                                             node_metadata_key_filter=lambda k: False))


def _load_gm(data):
    from torch._subclasses import FakeTensorMode
    from torch.fx._graph_pickler import GraphPickler

    gm = GraphPickler.loads(data, FakeTensorMode())
    gm.recompile()
    return gm


class TpuOutputCode(OutputCode):
    """One AOTAutograd FX graph compiled for tpu (boxed calling convention)."""

    def __init__(self, gm, kind):
        self._boxed_call = True  # an instance attribute: wrappers copy __dict__
        self.kind = kind
        self.graph = _compile._TpuGraph(gm, kind)
        self._gm_state = None

    def __call__(self, *inputs):  # boxed, or positional behind a wrapper that dropped _boxed_call
        g = self.graph
        if g is None:  # loaded from a cache: built at the first call (copies stay cheap)
            g = self.graph = _compile._TpuGraph(_load_gm(self._gm_state), self.kind,
                                                from_cache=True)
            self._gm_state = None
        return g(*inputs)

    def prepare_for_serialization(self):
        pass

    def post_compile(self, example_inputs, constants, graph_kwargs):
        pass

    def set_triton_bundle(self, triton_bundle):
        pass

    def __copy__(self):  # AOTAutogradCache copies before pickling: no need to serialize twice
        new = TpuOutputCode.__new__(TpuOutputCode)
        new.__dict__.update(self.__dict__)
        return new

    def __getstate__(self):
        if self.graph is not None and self.graph.bucket is not None and self.graph.bucket.ok:
            # the bucketed graph lives only in this process (its plan needs the
            # symbolic shapes a stored graph does not keep): not cached
            from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache

            raise BypassAOTAutogradCache("torch_tpu: a bucketed (bounded dynamic) graph")
        if self.graph is None:
            gm_state = self._gm_state
        else:
            # AOTAutograd saves its entry while its fake mode is active
            from torch.utils._python_dispatch import _disable_current_modes

            with _disable_current_modes():
                gm_state = _dump_gm(self.graph.gm)
        return {"kind": self.kind, "build": build_id(), "gm": gm_state}

    def __setstate__(self, st):
        if st.get("build") != build_id():
            # raised while the entry is read back: PyTorch's caches count a miss
            raise RuntimeError("torch.compile(backend='tpu'): the cached artifact was made by "
                               "another torch_tpu build")
        self._boxed_call = True
        self.kind = st["kind"]
        self.graph = None
        self._gm_state = st["gm"]
