"""torch_tpu: run PyTorch on TPUs by changing one line, ``.to("cuda")`` ->
``.to("tpu")``.

Importing this package (or just ``import torch`` once it is installed: it
registers a ``torch.backends`` autoload entry point) renames PyTorch's
PrivateUse1 device to ``tpu``, registers ``torch.tpu`` and the tensor/module
methods (``.tpu()``, ``.is_tpu``), and installs the C runtime behind it. The
runtime's embedded executor is the vTPU: TPU programs run on the host CPU
with TPU semantics (per-chip HBM, async queues, MXU numerics).
"""


def _autoload():
    """Entry point of the ``torch.backends`` group. Defined before ``import
    torch``: when torch_tpu itself is being imported first, torch's autoload
    finds this half-initialised module and calls this; the rest of the
    package then finishes initialising below."""


def _env_aliases():
    """TorchTPU's spellings of our environment variables (ours win when both
    are set), and torchrun's chip per local rank. Done before the runtime
    loads: it reads them with getenv."""
    import os

    for theirs, ours in (("TPU_VISIBLE_DEVICES", "TPU_VISIBLE_CHIPS"),
                         ("TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT",
                          "TORCH_TPU_COMPILATION_CACHE_DIR")):
        if theirs in os.environ and ours not in os.environ:
            os.environ[ours] = os.environ[theirs]
    # torchrun: local rank r uses chip r (and locks only that one) unless
    # the launcher chose the chips itself.
    lr = os.environ.get("LOCAL_RANK", "")
    if lr.isdigit() and "TPU_VISIBLE_CHIPS" not in os.environ:
        if int(lr) < int(os.environ.get("TORCH_TPU_VTPU_CHIPS", "") or 4):
            os.environ["TPU_VISIBLE_CHIPS"] = lr


_env_aliases()

import torch as _torch  # noqa: E402

from . import pjrt as _pjrt  # noqa: E402

_pjrt.configure()  # PJRT plugin discovery, before the runtime's first use

from . import _C  # noqa: E402

__version__ = "0.1.0"


def _settle_autograd_threads():
    """At exit. PyTorch runs backward passes over tpu tensors on an autograd
    thread per device, which drops a finished graph task after backward()
    has returned; the task's thread-local state can hold Python objects
    (torch.compile stashes some there), so that thread then waits for the
    GIL. If the interpreter is already finalizing when it gets it, the
    thread is ended mid-unwind and the process aborts ("terminate called
    without an active exception"). Giving the GIL away for a moment lets
    such a thread finish first; only processes that used a chip wait."""
    if any(_C._is_initialized(i) for i in range(_C._device_count())):
        import time

        time.sleep(0.05)


def _init():
    import atexit

    atexit.register(_settle_autograd_threads)
    if _torch._C._get_privateuse1_backend_name() != "tpu":
        _torch.utils.rename_privateuse1_backend("tpu")
    from . import tpu as _tpu_module

    if not hasattr(_torch, "tpu"):
        _torch._register_device_module("tpu", _tpu_module)
    if not hasattr(_torch.Tensor, "is_tpu"):
        _torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
    _tpu_module._install_precision_hooks()
    from . import backends, profiler

    backends._register()
    _install_print_hook()
    from . import _compile

    _compile.install()  # torch.compile(backend="tpu"); torch.tpu.compiler is torch_tpu.compiler
    from . import execution_mode

    execution_mode._init_from_env()
    from . import distributed as _distributed  # registers the c10d backend "tpu_dist"

    _tpu_module.distributed = _distributed
    from .kernels import helion as _helion

    _helion.install_import_hook()  # @helion.kernel on tpu tensors: reference mode


def _install_print_hook():
    """Printing a tpu tensor formats its host copy: printing is a
    synchronisation point, and the formatter's helper ops (masked_select,
    isfinite, ...) then run where the digits are, not as device work."""
    import torch._tensor_str as ts

    if getattr(ts._tensor_str, "_torch_tpu", False):
        return
    orig = ts._tensor_str

    def _tensor_str(self, indent):
        if self.device.type == "tpu":
            self = self.cpu()
        return orig(self, indent)

    _tensor_str._torch_tpu = True
    ts._tensor_str = _tensor_str


_init()

from . import execution_mode  # noqa: E402
from .tpu import Precision, precision  # noqa: E402


__all__ = ["execution_mode", "Precision", "precision"]
