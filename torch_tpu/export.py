"""``torch.export`` on tpu: an ``ExportedProgram`` runs as one runtime program.

    ep = torch.export.export(model.to("tpu"), (x.to("tpu"),))
    torch_tpu.export.save(ep, "model.pt2")       # graph + weights, no Python code
    # ... another process, without the model's source:
    prog = torch_tpu.export.load("model.pt2")    # or torch_tpu.export.compile(ep)
    y = prog(x.to("tpu"))

The program's graph goes through the same lowerings as eager and
``torch.compile``: its first call per input layout captures every op into one
program (found in the compilation cache, also on disk in a later process
when ``TORCH_TPU_COMPILATION_CACHE_DIR`` is set); later calls replay it
without dispatching any op. It runs without autograd (inference; train
through ``torch.compile``). The file is ``torch.export.save``'s format, so
``torch.export.load`` reads it too.
"""
import torch

from . import _compile

__all__ = ["compile", "save", "load", "ExportedTpuProgram"]


class ExportedTpuProgram:
    """A callable running an ExportedProgram's graph as one tpu program."""

    def __init__(self, ep):
        self.exported_program = ep
        self.module = ep.module()
        self._graph = _compile._TpuGraph(self.module, "export", tree_outputs=True)

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise TypeError("ExportedTpuProgram takes the exported inputs positionally")
        with torch.no_grad():  # an inference program: autograd would keep intermediates
            return self._graph(*args)


def compile(ep):  # noqa: A001 - the verb users expect
    """Wrap an ``ExportedProgram`` as an :class:`ExportedTpuProgram`."""
    if not isinstance(ep, torch.export.ExportedProgram):
        raise TypeError(f"expected a torch.export.ExportedProgram, got {type(ep).__name__}")
    return ExportedTpuProgram(ep)


def save(ep, path):
    """Write the exported program (graph, weights on tpu, signatures) to a file."""
    if not isinstance(ep, torch.export.ExportedProgram):
        raise TypeError(f"expected a torch.export.ExportedProgram, got {type(ep).__name__}")
    torch.export.save(ep, path)


def load(path):
    """Read a file written by :func:`save` (or ``torch.export.save``) and return
    it as a callable :class:`ExportedTpuProgram`."""
    return ExportedTpuProgram(torch.export.load(path))
