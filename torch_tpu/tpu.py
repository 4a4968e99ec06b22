"""The ``torch.tpu`` device module (TorchTPU-compatible names).

Devices are the vTPU chips this process sees (``TPU_VISIBLE_CHIPS``); memory
figures are the runtime's real per-chip HBM statistics; streams and events
are runtime queues and events.
"""
import contextlib
import dataclasses
import enum
import importlib
import importlib.abc
import importlib.util
import os
import sys
import threading
import types

import torch

from . import _C
from .execution_mode import EagerMode, set_eager_mode  # noqa: F401  (TorchTPU names)

OutOfMemoryError = torch.OutOfMemoryError

# ---- devices -----------------------------------------------------------------


def _index(device=None):
    if device is None:
        return _C._current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "tpu":
            raise ValueError(f"Expected a tpu device, but got: {device}")
        return _C._current_device() if device.index is None else device.index
    raise TypeError(f"Invalid device {device!r}")


def is_available():
    """True if at least one vTPU chip is visible."""
    return _C._device_count() > 0


def device_count():
    return _C._device_count()


def current_device():
    return _C._current_device()


def set_device(device):
    _C._set_device(_index(device))


def is_initialized():
    return True


def _lazy_init():
    pass


def _is_in_bad_fork():
    return False


class device:
    """Context manager that changes the current tpu device."""

    def __init__(self, device):
        self.idx = _index(device) if device is not None else -1
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C._current_device()
        if self.idx >= 0:
            _C._set_device(self.idx)

    def __exit__(self, *exc):
        if self.idx >= 0:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager: the current device becomes the given tensor's."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.is_tpu else None)


@dataclasses.dataclass(frozen=True)
class _TpuDeviceProperties:
    """What TorchTPU reports (``name``, ``total_memory`` = HBM bytes of one
    device, ``multi_processor_count`` = 1), plus the vTPU's own fields."""

    name: str
    total_memory: int
    multi_processor_count: int = 1
    physical_chip: int = 0
    num_threads: int = 1
    type: str = "vTPU"


def get_device_name(device=None):
    """The device programs run on: the vTPU chip, or the PJRT device (e.g.
    "NVIDIA H200 (cuda via PJRT, ...)") with TORCH_TPU_BACKEND=pjrt. Raises
    RuntimeError with the plugin's message if the PJRT plugin cannot start
    (e.g. libtpu on a machine without a TPU)."""
    idx = _index(device)
    if _C._executor_name() == "pjrt":
        return _C._executor_device_name()
    return f"vTPU chip {_C._physical_chip(idx)} (host CPU executor)"


def get_device_properties(device=None):
    idx = _index(device)
    if not 0 <= idx < device_count():
        raise AssertionError(f"Invalid device id {idx}: {device_count()} tpu devices")
    return _TpuDeviceProperties(name=get_device_name(idx), total_memory=_C._hbm_capacity(idx),
                                physical_chip=_C._physical_chip(idx),
                                num_threads=_C._get_num_threads(),
                                type="PJRT" if _C._executor_name() == "pjrt" else "vTPU")


def get_device_capability(device=None):
    return (0, 0)


def synchronize(device=None):
    """Wait for all work queued on the device's streams (all devices if None
    and several are in use). Raises errors reported by queued ops."""
    if device is None:
        for i in range(device_count()):
            if _C._is_initialized(i):
                _C._synchronize(i)
    else:
        _C._synchronize(_index(device))


# ---- RNG ------------------------------------------------------------------------


def _gen(device=None):
    return _C._get_default_generator(_index(device))


def manual_seed(seed):
    _gen().manual_seed(int(seed))


def manual_seed_all(seed):
    for i in range(device_count()):
        _gen(i).manual_seed(int(seed))


def seed():
    _gen().seed()


def seed_all():
    for i in range(device_count()):
        _gen(i).seed()


def initial_seed():
    return _gen().initial_seed()


def get_rng_state(device="tpu"):
    return _gen(device).get_state()


def set_rng_state(new_state, device="tpu"):
    _gen(device).set_state(new_state)


def get_rng_state_all():
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states):
    for i, s in enumerate(new_states):
        set_rng_state(s, i)



# ---- streams and events -------------------------------------------------------------


class Stream(torch.Stream):
    """A tpu stream: its own runtime queue (worker) on a chip."""

    def __new__(cls, device=None, priority=0, **kwargs):
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        with torch.tpu.device(device):
            return super().__new__(cls, device=torch.device("tpu", _index(device)),
                                   priority=priority)


class Event:
    """A tpu event (a runtime event recorded on a stream). Returns a
    ``torch.Event`` on the tpu device (torch.Event methods check the exact
    type, so this is a factory rather than a subclass)."""

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False,
                external=False, device=None):
        # external is accepted for CUDA API compatibility (as TorchTPU does):
        # every tpu event is visible to all streams of its chip.
        if device is None:
            device = torch.device("tpu", _C._current_device())
        elif isinstance(device, int):
            device = torch.device("tpu", device)
        else:
            device = torch.device(device)
            if device.type != "tpu":
                raise ValueError(f"Expected a tpu device, but got: {device}")
        return torch.Event(device=device, enable_timing=enable_timing,
                           blocking=blocking, interprocess=interprocess)


def _wrap(s):
    return Stream(stream_id=s.stream_id, device_index=s.device_index,
                  device_type=s.device_type)


def current_stream(device=None):
    return _wrap(torch.accelerator.current_stream(_index(device)))


def default_stream(device=None):
    s = torch.accelerator.current_stream(_index(device))
    return Stream(stream_id=0, device_index=s.device_index, device_type=s.device_type)


def set_stream(stream):
    if stream is not None:
        torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(s):
    """Context manager: make `s` the current stream of its device."""
    if s is None:
        yield
        return
    prev = torch.accelerator.current_stream(s.device_index)
    torch.accelerator.set_stream(s)
    try:
        yield
    finally:
        torch.accelerator.set_stream(prev)


# ---- memory ----------------------------------------------------------------------------


def memory_stats(device=None):
    return dict(_C._memory_stats(_index(device)))


def memory_allocated(device=None):
    return _C._memory_stats(_index(device))["allocated_bytes.all.current"]


def max_memory_allocated(device=None):
    return _C._memory_stats(_index(device))["allocated_bytes.all.peak"]


def memory_reserved(device=None):
    return _C._memory_stats(_index(device))["reserved_bytes.all.current"]


def max_memory_reserved(device=None):
    return _C._memory_stats(_index(device))["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None):
    _C._reset_peak_memory_stats(_index(device))


def empty_cache():
    for i in range(device_count()):
        if _C._is_initialized(i):
            _C._empty_cache(i)


def mem_get_info(device=None):
    """(free, total) bytes of the chip's HBM."""
    s = _C._memory_stats(_index(device))
    return s["capacity"] - s["reserved_bytes.all.current"], s["capacity"]


# ---- precision ----------------------------------------------------------------------------


class Precision(enum.IntEnum):
    """MXU precision for float32 matmul-class ops: 1, 3 or 6 bf16 passes."""

    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2


_PREC_NAMES = {"medium": Precision.DEFAULT, "default": Precision.DEFAULT,
               "high": Precision.HIGH, "highest": Precision.HIGHEST}


def _as_precision(p):
    if isinstance(p, str):
        try:
            return _PREC_NAMES[p.lower()]
        except KeyError:
            raise ValueError(f"unknown precision {p!r}") from None
    return Precision(p)


def set_precision(p):
    _C._set_precision(int(_as_precision(p)))


def get_precision():
    return Precision(_C._get_precision())


class precision:
    """``with torch.tpu.precision(torch.tpu.Precision.HIGHEST): ...`` sets the
    float32 matmul precision for the block (process-wide), restoring it after.
    Calling it without ``with`` sets it until changed."""

    def __init__(self, p):
        self._prev = _C._get_precision()
        set_precision(p)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _C._set_precision(self._prev)
        return False


_hooks_lock = threading.Lock()
_orig_set_fp32 = None


def _install_precision_hooks():
    """torch.set_float32_matmul_precision('medium'|'high'|'highest') also sets
    the tpu precision (DEFAULT | HIGH | HIGHEST)."""
    global _orig_set_fp32
    with _hooks_lock:
        if _orig_set_fp32 is not None:
            return
        _orig_set_fp32 = torch.set_float32_matmul_precision

        def set_float32_matmul_precision(p):
            _orig_set_fp32(p)
            set_precision(p)

        set_float32_matmul_precision.__doc__ = _orig_set_fp32.__doc__
        torch.set_float32_matmul_precision = set_float32_matmul_precision


# ---- autocast ---------------------------------------------------------------------------------


_AMP_SUPPORTED_DTYPES = (
    torch.bfloat16, torch.bool, torch.complex128, torch.complex64, torch.float16,
    torch.float32, torch.float64, torch.float8_e4m3fn, torch.float8_e4m3fnuz,
    torch.float8_e5m2, torch.float8_e5m2fnuz, torch.float8_e8m0fnu, torch.int16,
    torch.int32, torch.int64, torch.int8, torch.uint16, torch.uint32, torch.uint64,
    torch.uint8,
)


def get_amp_supported_dtype():
    """The dtypes ``torch.autocast("tpu", dtype=...)`` accepts (TorchTPU's list)."""
    return list(_AMP_SUPPORTED_DTYPES)


def _is_autocast_enabled():
    """Whether autocast is on for tpu in this thread (torch's own state, so it
    agrees with ``torch.autocast("tpu")``)."""
    return torch.is_autocast_enabled("tpu")


def _get_autocast_dtype():
    return torch.get_autocast_dtype("tpu")


def _set_autocast_enabled(enabled):
    torch.set_autocast_enabled("tpu", bool(enabled))


def _set_autocast_dtype(dtype):
    if dtype not in _AMP_SUPPORTED_DTYPES:
        raise ValueError(f"Unsupported dtype {dtype} for AMP. Supported dtypes are:"
                         f" {get_amp_supported_dtype()}")
    torch.set_autocast_dtype("tpu", dtype)


def is_bf16_supported(including_emulation=True):
    return True


# ---- diagnostics ---------------------------------------------------------------------------------


def native_ops():
    """Sorted list of ATen overloads with a native tpu lowering."""
    return list(_C._native_ops())


def fallback_counts():
    """{"aten::op.overload": calls} of ops that ran through the CPU fallback."""
    return dict(_C._fallback_counts())


# ---- compilation cache (shared by Strict and Fused Eager) --------------------


def _get_cache_stats():
    """Compilation-cache counters: ``hits`` (in-memory), ``disk_hits``
    (programs loaded from TORCH_TPU_COMPILATION_CACHE_DIR), ``misses`` (=
    ``compiles``), ``compile_time_s``, ``entries`` (in-memory LRU size), plus
    the recorder's ``ops_recorded``, ``programs_run``, ``outputs_written``,
    ``outputs_elided``/``bytes_elided`` (dead intermediates never written)
    and ``flushes`` by reason; ``captures``/``broken_captures``/
    ``compiled_runs`` count whole programs of ``torch.compile`` graphs, and
    ``compile`` holds the compiled path's own counters (FX graphs,
    replays, Fused Eager runs, Dynamo recompiles); ``c_kernels`` the user C
    kernels' (``compiles``, ``disk_hits``, ``loads``, ``compile_time_s``,
    ``runs``); ``pjrt`` the PJRT executor's (``compiles``: executables XLA
    compiled, ``disk_loads``: executables deserialized from the cache
    directory instead, ``emits``, ``executions``, ``donated_inputs``,
    ``direct_outputs``, ``bytes_h2d``/``bytes_d2h``; all 0 on the vTPU);
    ``vtpu_jit`` the vTPU's native elementwise kernels (``compiles``,
    ``disk_loads``, ``failures``, ``compile_time_s``, ``bound``: program
    runs that used one, ``pending``: queued or compiling now; see
    TORCH_TPU_VTPU_JIT in the README)."""
    from . import _compile

    d = _C._cache_stats()
    d["compile"] = _compile.stats()
    d["pjrt"] = _C._pjrt_stats()
    d["vtpu_jit"] = _C._vtpu_jit_stats()
    d["recompiles"] = d["compile"].get("recompiles", 0)
    from .kernels import _c_kernel

    d["c_kernels"] = _c_kernel.stats()
    pl = sys.modules.get("torch_tpu.pallas")  # jax_op lowerings (never imports JAX here)
    d["pallas"] = pl.stats() if pl is not None else {}
    return d


class _executor_profile:
    """Where the vTPU executor's time goes: inside ``with
    torch.tpu._executor_profile() as prof:``, every program run adds the wall
    time of each step (a node such as ``dot_general bf16[8,8,256,64]``, a
    fused region ``region 5 ops f32[2048,512]: mul,add,...``, a dot with its
    epilogue, a region feeding a reduction), each output it copies
    (``(output copy) f32[...]``) and the whole run (``(plan runs)``) to a
    process-wide table; ``prof.table`` is then
    ``[(label, count, seconds)]``, largest time first, and ``prof.report(n)``
    formats the top n. Runs of other threads in that time count too."""

    def __enter__(self):
        synchronize()
        _C._vtpu_profile_read(True)
        _C._vtpu_profile(True)
        self.table = []
        return self

    def __exit__(self, *exc):
        synchronize()
        _C._vtpu_profile(False)
        self.table = sorted(_C._vtpu_profile_read(True), key=lambda e: -e[2])
        return False

    def report(self, n=30):
        lines = [f"{s * 1e3:10.2f} ms {c:7d}x  {label}" for label, c, s in self.table[:n]]
        return "\n".join(lines)


def _reset_cache_stats():
    from . import _compile

    from .kernels import _c_kernel

    _C._reset_cache_stats()
    _compile._reset_stats()
    _c_kernel._reset_stats()


_FUSIONS = {"epilogue": 0, "reduce": 1, "bf16_operands": 2}  # tpu_exec.h TPUX_FUSE_*


def _get_fusion_stats():
    """Executor fusion counters since the process started: ``epilogue``
    (matmuls whose elementwise consumers ran on each finished GEMM block),
    ``reduce`` (reductions evaluated tile by tile from their producer
    region, never materialising its value) and ``bf16_operands`` (f32
    DEFAULT-precision matmuls planned to read bf16 operands rounded once
    where they are produced)."""
    return {k: _C._fusion_runs(v) for k, v in _FUSIONS.items()}


def _set_fusion(kind, enabled):
    """Turn an executor fusion ("epilogue", "reduce" or "bf16_operands") on
    (True), off (False) or back to its environment default (None),
    process-wide; for A/B comparisons. "epilogue" and "reduce" are
    bit-identical either way; "bf16_operands" has the same products (f32
    accumulation order may differ) and applies to programs planned after
    the switch (clear the compilation cache to re-plan cached ones)."""
    if kind not in _FUSIONS:
        raise ValueError(f"unknown fusion {kind!r}; expected one of {sorted(_FUSIONS)}")
    _C._set_fusion(_FUSIONS[kind], -1 if enabled is None else int(bool(enabled)))


def _clear_compilation_cache():
    """Drop the in-memory programs (the disk tier stays)."""
    _C._cache_clear()


def _set_compilation_cache_dir(path):
    _C._cache_set_dir(str(path) if path else "")


def _get_cache_hits():
    s = _C._cache_stats()
    return s["hits"] + s.get("disk_hits", 0)


def _get_cache_misses():
    return _C._cache_stats()["misses"]


def _clear_cache():
    """TorchTPU's name for dropping the in-memory compiled programs."""
    _C._cache_clear()


# ---- TorchTPU-only names --------------------------------------------------------


def _get_generator(device):
    """Default generator of ``device`` (AOTAutograd's graph-safe RNG hook)."""
    idx = device.index if device.index is not None else _C._current_device()
    return _default_generators()[idx]


_gens = None


def _default_generators():
    global _gens
    if _gens is None:
        _gens = tuple(_C._get_default_generator(i) for i in range(device_count()))
    return _gens


def _xla_flag(name):
    """Value of ``--name=v`` in XLA_FLAGS (last one wins), or None."""
    val = None
    for tok in os.environ.get("XLA_FLAGS", "").split():
        key, _, v = tok.lstrip("-").partition("=")
        if key == name:
            val = v if v else "true"
    return val


_excess_precision = None


def _get_allow_excess_precision():
    global _excess_precision
    if _excess_precision is None:
        v = _xla_flag("xla_allow_excess_precision") or _xla_flag("allow_excess_precision")
        _excess_precision = v is not None and v.lower() in ("1", "true")
    return _excess_precision


def _set_allow_excess_precision(value):
    global _excess_precision
    if not isinstance(value, bool):
        raise TypeError(f"allow_excess_precision must be a bool, got {type(value).__name__}")
    _excess_precision = value


def topology_aware_mesh(mesh_shape, *, dcn_mesh_shape=None, allow_split_physical_axes=False,
                        contiguous_submeshes=False):
    """Deprecated (TorchTPU 0.2.0) alias of
    ``torch.tpu.distributed.topology_aware_mesh``."""
    import warnings

    warnings.warn("torch.tpu.topology_aware_mesh is deprecated since 0.2.0: use "
                  "torch.tpu.distributed.topology_aware_mesh instead.", DeprecationWarning,
                  stacklevel=2)
    try:
        from .distributed import topology_aware_mesh as impl
    except ImportError:
        impl = None
    if impl is not None:
        return impl(mesh_shape, dcn_mesh_shape=dcn_mesh_shape,
                    allow_split_physical_axes=allow_split_physical_axes,
                    contiguous_submeshes=contiguous_submeshes)
    # vTPU chips are all one hop apart, so the ICI-aware order is rank order.
    import math

    world = torch.distributed.get_world_size() if (
        torch.distributed.is_available() and torch.distributed.is_initialized()) else 1
    n = math.prod(mesh_shape)
    if n != world:
        raise ValueError(f"mesh_shape {tuple(mesh_shape)} has {n} devices but the world has {world}")
    return torch.arange(n, dtype=torch.int64).reshape(tuple(mesh_shape))


# ---- the module object: properties and submodules ---------------------------------

# TorchTPU's public submodules of torch.tpu; each is served by torch_tpu.<name>
# once that module exists (compiler, distributed and pallas belong to other
# parts of the project).
_SUBMODULES = ("compiler", "distributed", "ops", "optimizers", "pallas", "profiler")


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, real):
        self.real = real
        self._spec = None

    def create_module(self, spec):
        mod = importlib.import_module(self.real)
        self._spec = mod.__spec__
        return mod

    def exec_module(self, module):
        module.__spec__ = self._spec  # the import system set the alias's spec


class _SubmoduleFinder(importlib.abc.MetaPathFinder):
    """Serves ``import torch.tpu.<sub>[.x]`` from ``torch_tpu.<sub>[.x]``."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("torch.tpu."):
            return None
        rest = fullname[len("torch.tpu."):]
        if rest.split(".")[0] not in _SUBMODULES:
            return None
        real = "torch_tpu." + rest
        try:
            if importlib.util.find_spec(real) is None:
                return None
        except ModuleNotFoundError:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real))


class _TpuModule(types.ModuleType):
    """Type of ``torch.tpu``: TorchTPU's module properties."""

    @property
    def eager_mode(self):
        """The process-wide ``EagerMode`` (get/set)."""
        from .execution_mode import get_eager_mode

        return get_eager_mode()

    @eager_mode.setter
    def eager_mode(self, value):
        from .execution_mode import _apply

        _apply(value)

    @property
    def allow_excess_precision(self):
        """XLA's ``--allow_excess_precision`` (initially from XLA_FLAGS, else
        False). The vTPU rounds each op's result to its dtype either way, which
        is the ``False`` behaviour; the flag is kept for programs that set it."""
        return _get_allow_excess_precision()

    @allow_excess_precision.setter
    def allow_excess_precision(self, value):
        _set_allow_excess_precision(value)

    @property
    def default_generators(self):
        """One ``torch.Generator`` per tpu device (identity-stable tuple)."""
        return _default_generators()

    def __getattr__(self, name):
        if name in _SUBMODULES:
            try:
                return importlib.import_module("torch.tpu." + name)
            except ModuleNotFoundError:
                pass
        raise AttributeError(f"module 'torch.tpu' has no attribute '{name}'")


def _install_module_type():
    mod = sys.modules[__name__]
    if not isinstance(mod, _TpuModule):
        mod.__class__ = _TpuModule
    mod.__path__ = []  # a package for the import system: torch.tpu.<sub>
    if not any(isinstance(f, _SubmoduleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SubmoduleFinder())


_install_module_type()
