"""``torch.tpu.compiler``: options of the tpu compiler (TorchTPU's names).

``custom_compiler_options(options)`` is a context manager: graphs compiled
by ``torch.compile(backend="tpu")`` (and their programs, which are keyed by
the options) use the options in effect when they run. Nested contexts merge,
the inner one winning. Known options:

- ``"precision"``: ``"default" | "high" | "highest"``: matmul-class ops of
  the graph use this MXU precision whatever ``torch.tpu.precision`` says.
- ``"replay"``: ``True`` (default) runs a captured graph again as its one
  program; ``False`` re-dispatches its ops each call (through Fused Eager).
- ``"xla_*"`` (TorchTPU's XLA flags, e.g. ``"xla_optimization_level"``):
  accepted as strings and part of the program key; they are meant for the
  PJRT executor's XLA compile and have no effect on the vTPU.

An unknown option raises ``ValueError`` listing the known ones.
"""
import contextlib
import threading

__all__ = ["custom_compiler_options"]

_PRECISIONS = ("default", "high", "highest")
KNOWN_OPTIONS = ("precision", "replay", "xla_*")

_tls = threading.local()


def _stack():
    if not hasattr(_tls, "stack"):
        _tls.stack = []
    return _tls.stack


def _validate(options):
    if not isinstance(options, dict):
        raise TypeError(f"custom_compiler_options expects a dict, got {type(options).__name__}")
    out = {}
    for k, v in options.items():
        if k == "precision":
            v = str(getattr(v, "name", v)).lower()
            if v not in _PRECISIONS:
                raise ValueError(f"custom_compiler_options: precision must be one of {_PRECISIONS}, got {v!r}")
        elif k == "replay":
            if not isinstance(v, bool):
                raise ValueError(f"custom_compiler_options: replay must be a bool, got {v!r}")
        elif isinstance(k, str) and k.startswith("xla_"):
            v = str(v)
        else:
            raise ValueError(f"custom_compiler_options: unknown option {k!r}; known options: "
                             f"{', '.join(KNOWN_OPTIONS)}")
        out[k] = v
    return out


def current_options():
    """The merged options in effect on this thread (a new dict)."""
    merged = {}
    for o in _stack():
        merged.update(o)
    return merged


def _options_key():
    st = _stack()
    return tuple(sorted(current_options().items())) if st else ()


@contextlib.contextmanager
def custom_compiler_options(options):
    """Run the block with these compiler options (see the module doc)."""
    opts = _validate(options)
    _stack().append(opts)
    try:
        yield
    finally:
        _stack().pop()
