"""``optimization_barrier``: nothing is fused, deduplicated or moved across it."""
import torch

from .. import _C


def optimization_barrier(inputs):
    """Identity on ``inputs`` (a sequence of tensors) that the compiler treats
    as opaque (TorchTPU: ``stablehlo.optimization_barrier``). In Fused Eager
    the pending graph of every device holding one of ``inputs`` is flushed
    here, so the computations before the barrier run as their own program and
    none of them fuses with, or is recomputed in, what comes after. In Strict
    Eager every op is its own program already.

    Returns a list of the tensors, in order; use it (not ``inputs``) for what
    follows, as with TorchTPU."""
    if isinstance(inputs, torch.Tensor):
        raise TypeError("optimization_barrier expects a sequence of tensors, got a Tensor")
    out = list(inputs)
    devs = []
    for t in out:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"optimization_barrier expects tensors, got {type(t).__name__}")
        if t.device.type == "tpu":
            d = t.device.index if t.device.index is not None else _C._current_device()
            if d not in devs:
                devs.append(d)
    for d in devs:
        _C._flush(d)
    return out
