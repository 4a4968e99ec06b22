"""Eager execution modes (TorchTPU names).

- ``EagerMode.DEFER_NEVER`` (Strict Eager, default): each op is dispatched and
  queued on the chip's stream; the call returns before the op has run, like
  CUDA. ``.cpu()``, ``.item()`` and ``torch.tpu.synchronize()`` wait.
- ``EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING`` (Debug Eager): every op runs
  to completion before the call returns, so errors surface at the op that
  caused them. Also ``TORCH_TPU_LAUNCH_BLOCKING=1``.
- ``EagerMode.DEFER_AND_FUSE`` (Fused Eager): ops are recorded into the
  chip's pending IR graph (results are promises) and run as one fused,
  cached program on a flush: ``.cpu()``/``.item()``/``.tolist()``/
  ``.numpy()``/printing/``torch.save`` (device->host copies),
  ``torch.tpu.synchronize()``, stream/event syncs, cross-device copies, a
  repeated step (training-loop detection), a size cap
  (``TORCH_TPU_FUSE_MAX_OPS``), memory pressure. Also
  ``TORCH_TPU_DEFER_AND_FUSE=1``. See ``torch_tpu.sync``. A tensor freshly
  allocated in this mode (``torch.empty``) is a promise too until a flush.
- ``EagerMode.INTERNAL_DEFER_ALL`` (TorchTPU's internal mode): Fused Eager in
  which ops that check indices (gather/scatter/index_put with device
  indices, ...) are deferred as well instead of flushing; their errors
  surface when the program runs (at the next flush), as on a GPU.
"""
import contextlib
import enum
import os
import threading

from . import _C


class EagerMode(enum.Enum):
    DEFER_NEVER = "DEFER_NEVER"
    DEFER_NEVER_AND_LAUNCH_BLOCKING = "DEFER_NEVER_AND_LAUNCH_BLOCKING"
    DEFER_AND_FUSE = "DEFER_AND_FUSE"


class _EagerMode(enum.Enum):
    """Modes that are not public members of EagerMode (TorchTPU keeps them in
    its internal enum): reachable as ``EagerMode.INTERNAL_DEFER_ALL``, they
    are accepted wherever an EagerMode is, and ``torch.tpu.eager_mode``
    returns them as they are."""
    INTERNAL_DEFER_ALL = "INTERNAL_DEFER_ALL"


EagerMode.INTERNAL_DEFER_ALL = _EagerMode.INTERNAL_DEFER_ALL  # not iterated

# runtime recorder mode of each eager mode (tpu_graph.h TPUG_*)
_GRAPH_MODE = {EagerMode.DEFER_NEVER: 0, EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING: 0,
               EagerMode.DEFER_AND_FUSE: 1, _EagerMode.INTERNAL_DEFER_ALL: 2}


def _as_mode(mode):
    if isinstance(mode, (EagerMode, _EagerMode)):
        return mode
    try:
        return EagerMode(mode)
    except ValueError:
        return _EagerMode(mode)  # ValueError names the unknown value


_lock = threading.Lock()
_mode = EagerMode.DEFER_NEVER


def _apply(mode):
    global _mode
    mode = _as_mode(mode)
    with _lock:
        _C._set_graph_mode(_GRAPH_MODE[mode])
        _C._set_launch_blocking(mode is EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING)
        _mode = mode


class set_eager_mode:
    """Select the eager mode. TorchTPU's form is a context manager,
    ``with torch.tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE): ...``: the
    mode holds for the block and the previous one comes back on exit
    (nesting restores in order). The mode takes effect when called, so a
    bare ``set_eager_mode(m)`` (without ``with``) sets it process-wide until
    changed, as before."""

    def __init__(self, mode):
        self._prev = _mode
        _apply(mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _apply(self._prev)
        return False


def get_eager_mode():
    """The current eager mode."""
    return _mode


@contextlib.contextmanager
def eager_mode(mode):
    """Context manager: run the block in `mode`, then restore the previous one."""
    prev = get_eager_mode()
    _apply(mode)
    try:
        yield
    finally:
        _apply(prev)


class cpu_fallback_mode:
    """Allow (True) or forbid (False) the CPU fallback for ops without a native
    tpu lowering. Takes effect at once when called; used as a context manager
    it restores the previous setting on exit. Forbidden fallback raises
    NotImplementedError naming the op."""

    def __init__(self, enabled):
        self._prev = _C._get_fallback_enabled()
        _C._set_fallback_enabled(bool(enabled))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _C._set_fallback_enabled(self._prev)
        return False


def is_cpu_fallback_enabled():
    return _C._get_fallback_enabled()


def _env_flag(name):
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _init_from_env():
    global _mode
    if os.environ.get("TORCH_TPU_CPU_FALLBACK", "").strip() in ("0", "false", "off", "no"):
        _C._set_fallback_enabled(False)
    if _env_flag("TORCH_TPU_LAUNCH_BLOCKING"):
        _C._set_launch_blocking(True)
        _mode = EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
    if _env_flag("TORCH_TPU_DEFER_AND_FUSE") and _mode is EagerMode.DEFER_NEVER:
        _C._set_fused(True)
        _mode = EagerMode.DEFER_AND_FUSE
    elif _C._get_fused():  # the runtime read the variable with another spelling
        _C._set_fused(_mode is EagerMode.DEFER_AND_FUSE)
