"""User kernels on the ``tpu`` device.

* :func:`c_kernel` - a kernel written in C, compiled once with the system
  compiler (cached on disk), run by the vTPU executor as a node of fused
  programs (``_c_kernel.py``).
* Helion: ``@helion.kernel`` functions called with tpu tensors run their tile
  loops through tpu ops (Helion's reference mode), see ``helion.py``.
"""
from ._c_kernel import CKernel, CKernelCompileError, c_kernel, stats  # noqa: F401

__all__ = ["c_kernel", "CKernel", "CKernelCompileError", "stats"]
