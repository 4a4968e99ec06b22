"""Loader used by frameworks that probe TorchTPU (Ray calls
``torch_tpu._loader.load()``)."""


def load():
    """Import torch_tpu (registering the ``tpu`` device); returns the module."""
    import torch_tpu

    return torch_tpu
