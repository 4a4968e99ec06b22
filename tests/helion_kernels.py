"""Helion kernels for tests/test_kernels.py (Helion wants module-level
functions; imported only when helion is installed)."""
import helion
import helion.language as hl
import torch


@helion.kernel(autotune_effort="none")
def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        row = x[tile_m, :].to(torch.float32)
        var = torch.mean(row * row, dim=-1, keepdim=True)
        out[tile_m, :] = (row * torch.rsqrt(var + 1e-6) * w[None, :]).to(out.dtype)
    return out


@helion.kernel(autotune_effort="none")
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile] + y[tile]
    return out


@helion.kernel(autotune_effort="none", config=helion.Config(block_sizes=[8]))
def row_sum_tiled(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m], dtype=x.dtype, device=x.device)
    for tile_m in hl.tile(m):
        out[tile_m] = x[tile_m, :].sum(-1)
    return out
