"""Helion kernels on ``tpu`` tensors.

Helion (``pip install helion``) compiles ``@helion.kernel`` functions to
Triton (GPU), Pallas (TPU through JAX) or CuTe. None of those targets the
vTPU, so a Helion kernel called with tpu tensors runs in Helion's
*reference mode* (``RefMode.EAGER``, the same mode as ``HELION_INTERPRET=1``):
the kernel body runs as PyTorch code and every tile loop (``hl.tile``,
``hl.grid``) iterates its tiles through ordinary tpu ops. Without an explicit
block size a tile spans the whole loop range, so each loop body is a few
whole-tensor ops; in Fused Eager (and under ``torch.compile(backend="tpu")``,
when the caller is compiled) they fuse with the ops around the kernel into
one program, and that program is cached like any other.

:func:`enable` switches this on for every ``helion.Kernel`` (it wraps
``Kernel.__call__``: a call with a tpu tensor argument goes to a reference
mode twin of the kernel built once with the same configs and settings;
other calls are untouched). ``import torch_tpu`` installs an import hook
that calls it when ``helion`` is imported, so ``@helion.kernel`` needs no
changes.

Not covered: Helion's compiled code paths (Triton/Pallas/CuTe codegen,
autotuning, ``hl.register_block_size`` driven tiling, atomics' memory
ordering, ``hl.signal``/``hl.wait`` and other inter-program
synchronisation), Helion's own torch.compile fusion of kernels into
Inductor graphs. Block sizes from a ``Config`` are honoured by reference
mode (smaller tiles mean more, smaller ops).
"""
import copy
import functools
import sys

_enabled = False


def _on_tpu(args, kwargs):
    import torch

    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor) and a.device.type == "tpu":
            return True
    return False


def _ref_twin(kernel):
    twin = kernel.__dict__.get("_torch_tpu_ref")
    if twin is None:
        from helion.runtime.kernel import Kernel
        from helion.runtime.ref_mode import RefMode

        settings = copy.copy(kernel.settings)
        settings.ref_mode = RefMode.EAGER
        twin = Kernel(kernel.fn, configs=list(kernel.configs), settings=settings)
        kernel.__dict__["_torch_tpu_ref"] = twin
    return twin


def enable():
    """Run ``helion.Kernel`` calls with tpu tensors in Helion's reference mode
    (idempotent). Raises ImportError when helion is not installed."""
    global _enabled
    if _enabled:
        return
    from helion.runtime.kernel import Kernel
    from helion.runtime.ref_mode import RefMode

    orig = Kernel.__call__

    @functools.wraps(orig)
    def __call__(self, *args, **kwargs):
        if self.settings.ref_mode == RefMode.OFF and _on_tpu(args, kwargs):
            return _ref_twin(self)(*args, **kwargs)
        return orig(self, *args, **kwargs)

    Kernel.__call__ = __call__
    _enabled = True


class _Hook:
    """Meta-path finder: call enable() right after ``helion.runtime.kernel``
    is imported (importing helion itself takes seconds; torch_tpu never does
    it on its own)."""

    _target = "helion.runtime.kernel"

    def find_spec(self, name, path=None, target=None):
        if name != self._target:
            return None
        import importlib.util

        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_enable(module):
            exec_module(module)
            sys.modules[name] = module
            try:
                enable()
            except Exception:  # noqa: BLE001 - an unexpected helion layout: leave it alone
                pass
            finally:
                if self in sys.meta_path:
                    sys.meta_path.remove(self)

        loader.exec_module = exec_and_enable
        return spec


def install_import_hook():
    """Enable now if helion is already imported, else when it is."""
    if "helion.runtime.kernel" in sys.modules:
        try:
            enable()
        except Exception:  # noqa: BLE001
            pass
        return
    if not any(isinstance(f, _Hook) for f in sys.meta_path):
        sys.meta_path.insert(0, _Hook())
