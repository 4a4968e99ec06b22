"""PJRT plugin discovery and executor selection (ARCHITECTURE §6).

The C runtime runs every program through one executor: the vTPU (default)
or PJRT (``TORCH_TPU_BACKEND=pjrt``), whose plugin is
``TORCH_TPU_PJRT_PLUGIN=/path/plugin.so``. When that variable is unset this
module fills it in from the installed plugins, at import time (before the
runtime's first use):

* ``libtpu`` (pip ``libtpu``: ``libtpu/libtpu.so``) - TPUs
* ``jax-cuda13-pjrt`` / ``jax-cuda12-pjrt``
  (``jax_plugins/xla_cuda1x/xla_cuda_plugin.so``) - NVIDIA GPUs
* ``xla-cpu-pjrt`` (``xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so``) - XLA:CPU

``TORCH_TPU_BACKEND=pjrt`` takes the first of TPU, CUDA, CPU found. With
``TORCH_TPU_BACKEND`` unset, an accelerator plugin (TPU or CUDA) selects
``auto``: PJRT when the plugin starts, else the vTPU (the reason is kept;
see ``torch.tpu.get_device_name()``). Without one the vTPU stays the default.
No JAX is imported: only the plugin files are located.
"""
import importlib.util
import os

_PLUGINS = (
    ("tpu", "libtpu", "libtpu.so"),
    ("cuda", "jax_plugins.xla_cuda13", "xla_cuda_plugin.so"),
    ("cuda", "jax_plugins.xla_cuda12", "xla_cuda_plugin.so"),
    ("cpu", "xla_plugins.xla_cpu_pjrt", "xla_cpu_pjrt.so"),
)


def _find(module, filename):
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    dirs = list(spec.submodule_search_locations or [])
    if spec.origin:
        dirs.append(os.path.dirname(spec.origin))
    for d in dirs:
        path = os.path.join(d, filename)
        if os.path.exists(path):
            return path
    return None


def discover():
    """Installed PJRT plugins: {"tpu"|"cuda"|"cpu": path} (first found per kind)."""
    found = {}
    for kind, module, filename in _PLUGINS:
        if kind not in found:
            path = _find(module, filename)
            if path:
                found[kind] = path
    return found


def configure(environ=os.environ):
    """Fill TORCH_TPU_PJRT_PLUGIN / TORCH_TPU_BACKEND from the installed
    plugins (see the module docstring). Returns the plugin path chosen, or None."""
    backend = environ.get("TORCH_TPU_BACKEND", "")
    if environ.get("TORCH_TPU_PJRT_PLUGIN"):
        return environ["TORCH_TPU_PJRT_PLUGIN"]
    if backend not in ("", "pjrt", "auto"):
        return None
    found = discover()
    kinds = ("tpu", "cuda", "cpu") if backend == "pjrt" else ("tpu", "cuda")
    for kind in kinds:
        if kind in found:
            environ["TORCH_TPU_PJRT_PLUGIN"] = found[kind]
            if not backend:
                environ["TORCH_TPU_BACKEND"] = "auto"
            return found[kind]
    return None


def stats():
    """PJRT executor counters: compiles (executables XLA compiled),
    executions, fallbacks (programs that ran on the vTPU because StableHLO
    lacks one of their ops; only with TORCH_TPU_PJRT_FALLBACK=vtpu),
    compile_time_s, emits (StableHLO programs emitted), disk_loads /
    disk_stores (serialized executables read from / written to
    TORCH_TPU_COMPILATION_CACHE_DIR), donated_inputs (inputs an output
    overwrote in place), direct_outputs (outputs written straight into
    their storage), bytes_h2d / bytes_d2h (bytes the plugin copied)."""
    from . import _C

    return _C._pjrt_stats()


def executor():
    """Name of the active executor ("vtpu" or "pjrt"); raises RuntimeError
    with the plugin's message if the selected executor cannot start."""
    from . import _C

    return _C._executor_name()


def set_executor(name):
    """Switch the process to the "vtpu" or "pjrt" executor (benchmarks, A/B
    tests): queued work is finished first. Raises RuntimeError with the
    plugin's message if PJRT cannot start (TORCH_TPU_PJRT_PLUGIN, or the
    discovered XLA:CPU plugin, is used)."""
    import os

    import torch

    from . import _C

    if name == "pjrt" and not os.environ.get("TORCH_TPU_PJRT_PLUGIN"):
        found = discover()
        for kind in ("tpu", "cuda", "cpu"):
            if kind in found:
                os.environ["TORCH_TPU_PJRT_PLUGIN"] = found[kind]
                break
    for i in range(torch.tpu.device_count()):
        if _C._is_initialized(i):
            torch.tpu.synchronize(i)
    _C._set_executor(name)
