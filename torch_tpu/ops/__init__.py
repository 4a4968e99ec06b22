"""``torch.tpu.ops``: TorchTPU's custom operators, computed by the tpu
runtime (each is a composition of natively lowered tpu ops; no CPU kernels).

``python -m torch_tpu.ops --list/--opinfo`` is the native-op CLI
(``torch_tpu/ops/__main__.py``), unrelated to this namespace."""
from ..distributed.ops import all_gather_dim, ragged_all_to_all, recv, reduce_scatter_dim, send
from .barrier import optimization_barrier
from .jagged import align_jagged_to_multiple, strip_jagged_padding
from .pooling import (max_pool1d, max_pool1d_backward, max_pool2d, max_pool2d_backward,
                      max_pool3d, max_pool3d_backward)
from .ragged import ragged_dot, ragged_dot_weight_grad
from .sparse import (sparse_dense_matmul, sparse_dense_matmul_activation_unstack,
                     sparse_dense_matmul_grad_with_adagrad, sparse_dense_matmul_grad_with_adam,
                     sparse_dense_matmul_grad_with_sgd, sparse_dense_matmul_gradient_stack,
                     sparse_gather, sparse_gather_backward, sparse_iota, sparse_map_row)
from .splash import splash_sdpa

__all__ = [
    "all_gather_dim",
    "ragged_all_to_all",
    "recv",
    "reduce_scatter_dim",
    "send",
    "align_jagged_to_multiple",
    "max_pool1d",
    "max_pool1d_backward",
    "max_pool2d",
    "max_pool2d_backward",
    "max_pool3d",
    "max_pool3d_backward",
    "optimization_barrier",
    "ragged_dot",
    "ragged_dot_weight_grad",
    "sparse_dense_matmul",
    "sparse_dense_matmul_activation_unstack",
    "sparse_dense_matmul_grad_with_adagrad",
    "sparse_dense_matmul_grad_with_adam",
    "sparse_dense_matmul_grad_with_sgd",
    "sparse_dense_matmul_gradient_stack",
    "sparse_gather",
    "sparse_gather_backward",
    "sparse_iota",
    "sparse_map_row",
    "splash_sdpa",
    "strip_jagged_padding",
]
