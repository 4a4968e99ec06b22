"""Explicit control of Fused Eager (``EagerMode.DEFER_AND_FUSE``).

In Fused Eager, tpu ops are recorded into the chip's pending IR graph and
their results are promises until a flush runs the merged graph as one
cached program. These helpers flush, inspect and dump that graph. In Strict
Eager nothing is ever pending, so they are cheap no-ops (``synchronize``
with ``wait=True`` still waits for queued work).
"""
import torch

from . import _C

import os

__all__ = ["synchronize", "is_materialized", "is_materializing", "is_ready", "pending_ops",
           "dump_pending_graph", "computation_graphviz", "computation_mlir",
           "dump_computation_graphviz"]


def _devices(tensors):
    if tensors is None:
        return [d for d in range(_C._device_count()) if _C._is_initialized(d)]
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    devs = []
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type == "tpu":
            i = t.device.index or 0
            if i not in devs:
                devs.append(i)
    return devs


def synchronize(tensors=None, wait=False):
    """Flush the pending graph of the devices holding ``tensors`` (every
    device if None), enqueuing it as one program. With ``wait=True`` also
    wait until the devices have finished (raising errors of queued work)."""
    for d in _devices(tensors):
        if wait:
            _C._synchronize(d)
        else:
            _C._flush(d)


def is_materialized(t):
    """False while ``t``'s storage is the destination of a pending
    (unflushed) op, i.e. its value is still a promise."""
    if not isinstance(t, torch.Tensor) or t.device.type != "tpu" or t.numel() == 0:
        return True
    return not _C._is_pending_ptr(t.untyped_storage().data_ptr())


def is_ready(t):
    """True once ``t``'s value exists in device memory: it is not a promise
    of the pending Fused Eager graph (``is_materialized``) and the device's
    queued work has finished, so reading it would not wait. Never flushes or
    waits itself."""
    if not is_materialized(t):
        return False
    if not isinstance(t, torch.Tensor) or t.device.type != "tpu":
        return True
    d = t.device.index if t.device.index is not None else _C._current_device()
    return torch.tpu.default_stream(d).query() and torch.accelerator.current_stream(d).query()


def is_materializing(t):
    """TorchTPU's name: True while ``t``'s program has been enqueued but has
    not finished (materialized, not yet ready)."""
    return is_materialized(t) and not is_ready(t)


def pending_ops(device=None):
    """Number of ops recorded and not yet flushed on ``device``."""
    d = _C._current_device() if device is None else torch.device(device, 0).index if isinstance(device, str) else int(device)
    return _C._pending_ops(d)


def dump_pending_graph(device=None, format="text"):
    """The pending graph of ``device`` as it would be flushed now (merged,
    constants lifted, dead outputs dropped), without flushing it:
    ``format="text"`` (StableHLO-like listing) or ``"dot"`` (graphviz)."""
    d = _C._current_device() if device is None else int(device)
    fmt = {"text": 0, "dot": 1, "graphviz": 1}[format]
    return _C._dump_pending(d, fmt)


def _pending_of(tensors, fmt):
    devs = _devices(list(tensors)) or [_C._current_device()]
    return "".join(_C._dump_pending(d, fmt) for d in devs)


def computation_graphviz(*tensors):
    """TorchTPU's name: graphviz text of the pending graph that will compute
    ``tensors`` (the whole pending graph of their devices: the recorder
    fuses everything pending on a device into one program)."""
    return _pending_of(tensors, 1)


def computation_mlir(*tensors):
    """TorchTPU's name: the pending graph that will compute ``tensors`` as
    StableHLO (MLIR text, the program the PJRT executor would compile).
    NotImplementedError names an op without a StableHLO form."""
    return _pending_of(tensors, 2)


def dump_computation_graphviz(tensors, file_name):
    """Write ``computation_graphviz(*tensors)`` to ``file_name`` (directories
    are created)."""
    d = os.path.dirname(file_name)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(file_name, "w") as f:
        f.write(computation_graphviz(*tensors))
