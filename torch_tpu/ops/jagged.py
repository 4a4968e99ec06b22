"""Padding helpers for ``torch.jagged`` nested tensors: pad the flat values
buffer to a multiple of the MXU tile so ragged batches share compiled shapes,
and strip that padding again."""
import torch
from torch.nested._internal import nested_tensor as _nt


def _check(nt, fn):
    if not isinstance(nt, torch.Tensor) or not nt.is_nested or nt.layout != torch.jagged:
        raise TypeError(f"{fn} expects a torch.jagged nested tensor")


def align_jagged_to_multiple(nt, multiple=128, padding_value=0.0):
    """A jagged tensor whose values buffer is ``nt.values()`` followed by
    ``padding_value`` rows up to a multiple of ``multiple`` rows; offsets (and
    so every sequence) are unchanged. Returns ``nt`` itself when it is
    already aligned."""
    _check(nt, "align_jagged_to_multiple")
    if int(multiple) <= 0:
        raise ValueError(f"multiple must be positive, got {multiple}")
    values = nt.values()
    rem = values.size(0) % int(multiple)
    if rem == 0:
        return nt
    pad = torch.full((int(multiple) - rem,) + tuple(values.shape[1:]), padding_value,
                     dtype=values.dtype, device=values.device)
    return _nt.nested_view_from_values_offsets(torch.cat([values, pad], 0), nt.offsets())


def strip_jagged_padding(nt, valid_tokens=None):
    """A view of ``nt`` whose values buffer ends at the last valid token
    (``offsets[-1]``, read from the device unless the caller passes the
    host-known ``valid_tokens``, which avoids that sync)."""
    _check(nt, "strip_jagged_padding")
    offsets = nt.offsets()
    if valid_tokens is None:
        valid_tokens = int(offsets[-1].item()) if offsets.numel() > 0 else 0
    values = nt.values()
    if values.size(0) == valid_tokens:
        return nt
    if not 0 <= valid_tokens <= values.size(0):
        raise ValueError(f"valid_tokens={valid_tokens} outside [0, {values.size(0)}]")
    return _nt.nested_view_from_values_offsets(values[:valid_tokens], offsets)
