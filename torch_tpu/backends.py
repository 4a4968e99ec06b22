"""``torch.backends.tpu``: process-wide tpu backend flags (like
``torch.backends.cuda``): ``allow_excess_precision`` (same flag as
``torch.tpu.allow_excess_precision``) and ``precision`` (the float32
matmul ``torch.tpu.Precision``)."""
import sys
import types


class _BackendsTpu(types.ModuleType):
    @property
    def allow_excess_precision(self):
        from . import tpu

        return tpu._get_allow_excess_precision()

    @allow_excess_precision.setter
    def allow_excess_precision(self, value):
        from . import tpu

        tpu._set_allow_excess_precision(value)

    @property
    def precision(self):
        from . import tpu

        return tpu.get_precision()

    @precision.setter
    def precision(self, value):
        from . import tpu

        tpu.set_precision(value)


def is_available():
    from . import _C

    return _C._device_count() > 0


sys.modules[__name__].__class__ = _BackendsTpu


def _register():
    import torch.backends

    sys.modules["torch.backends.tpu"] = sys.modules[__name__]
    torch.backends.tpu = sys.modules[__name__]
