"""torch.tpu.distributed: the c10d backend ``tpu_dist`` (alias ``tpu``) and
TorchTPU's distributed helpers.

``init_process_group("tpu_dist")``, ``init_process_group(device_id=
torch.device("tpu:0"))`` and ``"cpu:gloo,tpu:tpu_dist"`` all select it. The
bytes move in the C runtime (``runtime/include/tpu_coll.h``): processes of
one host share a POSIX shared-memory segment (the vTPU's ICI); ranks on
different hosts are joined by gloo, hierarchically (shared memory inside the
host, gloo between hosts). Rendezvous goes through the c10d Store that
``init_process_group`` provides.

A "host" is ``socket.gethostname()``, or ``TORCH_TPU_DIST_HOST`` when set
(tests use it to run two "hosts" on one machine). Ranks must be numbered
host-major (what torchrun does).
"""
import os
import socket
import sys
import types
import uuid

import torch
import torch.distributed as dist

from .. import _C

__all__ = [
    "set_tpu_launch_env",
    "topology_aware_mesh",
    "spmd_safe",
    "window_num_stripes",
    "window_stripe_chunk_mb",
]

_DEFAULT_STRIPE_CHUNK_MB = 1


def _host_key():
    return os.environ.get("TORCH_TPU_DIST_HOST") or socket.gethostname()


def _slot_bytes():
    mb = _settings["window_stripe_chunk_mb"]
    return int(mb) << 20 if mb else 0


def _create_backend(store, rank, world_size, timeout):
    """c10d creator: rendezvous through `store` (already prefixed per
    group), then join this host's shared-memory communicator and, on a
    multi-host job, a gloo group of the ranks with the same local rank (the
    hierarchical collectives' second step) and one of all ranks (send/recv
    between hosts)."""
    timeout_ms = max(1, int(timeout.total_seconds() * 1000))
    host = _host_key()
    store.set(f"tpu_dist/host/{rank}", host)
    hosts = [store.get(f"tpu_dist/host/{r}").decode() for r in range(world_size)]
    order = list(dict.fromkeys(hosts))
    local = [r for r in range(world_size) if hosts[r] == host]
    local_rank, local_size = local.index(rank), len(local)
    host_idx = order.index(host)
    cross = peers = None
    if len(order) > 1:
        expect = [order[r // local_size] for r in range(world_size)]
        if hosts != expect or world_size % local_size:
            raise RuntimeError(
                "tpu_dist: a multi-host job needs the same number of ranks on every host, "
                f"numbered host-major; got hosts by rank {hosts}"
            )
        from torch.distributed import PrefixStore, ProcessGroupGloo

        cross_store = PrefixStore(f"tpu_dist/cross/{local_rank}/", store)
        cross = ProcessGroupGloo(cross_store, host_idx, len(order), timeout)
        # send/recv between hosts: any rank to any rank
        peers = ProcessGroupGloo(PrefixStore("tpu_dist/peers/", store), rank, world_size, timeout)
    key = f"tpu_dist/seg/{host_idx}"
    if local_rank == 0:
        name = f"/tpu_dist_{os.getpid()}_{uuid.uuid4().hex[:16]}"
        store.set(key, name)
    else:
        name = store.get(key).decode()
    return _C._tpu_dist_create(
        name, rank, world_size, local_rank, local_size, _slot_bytes(), timeout_ms, cross, peers
    )


def _register():
    if "tpu_dist" in dist.Backend.backend_list:
        return
    for name in ("tpu_dist", "tpu"):
        dist.Backend.register_backend(name, _create_backend, devices=["tpu", "cpu"])


# ---- TorchTPU names --------------------------------------------------------


def set_tpu_launch_env(*, nnodes=None, nproc_per_node=None):
    """Set the environment a TPU job needs before workers spawn (TorchTPU
    name). Idempotent; never overwrites a variable that is already set.

    On the vTPU: every local rank uses the chip with its number
    (``torch.tpu.set_device(LOCAL_RANK)`` happens when torch_tpu is imported
    in a worker that has ``LOCAL_RANK`` and no ``TPU_VISIBLE_CHIPS``);
    here the parent records ``TORCH_TPU_VTPU_CHIPS`` and checks that
    ``nproc_per_node`` fits on the host's chips.
    """
    chips = int(os.environ.get("TORCH_TPU_VTPU_CHIPS", "4"))
    if nproc_per_node is not None and nproc_per_node > chips:
        raise ValueError(
            f"set_tpu_launch_env(): nproc_per_node={nproc_per_node} but this host has "
            f"{chips} vTPU chips (TORCH_TPU_VTPU_CHIPS)"
        )
    hostnames = [h for h in os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]
    if nnodes is not None and hostnames and nnodes != len(hostnames):
        raise ValueError(
            "set_tpu_launch_env(): expected nnodes to match the number of hosts in "
            f"TPU_WORKER_HOSTNAMES ({len(hostnames)}), got {nnodes}"
        )
    os.environ.setdefault("TORCH_TPU_VTPU_CHIPS", str(chips))
    if nproc_per_node is not None:
        os.environ.setdefault("TORCH_TPU_DEVICES_PER_HOST", str(nproc_per_node))


def topology_aware_mesh(device_type, mesh_shape=None, *, dcn_mesh_shape=None,
                        allow_split_physical_axes=False, contiguous_submeshes=False):
    """An int64 tensor of global ranks with shape `mesh_shape` laid out on
    the chips' topology, for ``DeviceMesh(device_type, mesh=...)`` (TorchTPU
    name). The vTPU's chips of a host form a fully connected set (one shared
    segment) and hosts are joined by the network, so the layout keeps the
    innermost (most network-intensive, last) axes inside a host and splits
    the outer ones across hosts: host-major rank order. `dcn_mesh_shape`, if
    given, must divide `mesh_shape` and multiply to the number of hosts."""
    if mesh_shape is None and not isinstance(device_type, str):
        device_type, mesh_shape = "tpu", device_type  # torch.tpu.topology_aware_mesh(shape)
    shape = tuple(int(s) for s in mesh_shape)
    if not dist.is_initialized():
        if all(s == 1 for s in shape):  # a one-process "world" needs no group
            return torch.zeros(shape, dtype=torch.int64)
        raise RuntimeError(
            "PyTorch distributed process group must be initialized before calling "
            "topology_aware_mesh."
        )
    world = dist.get_world_size()
    n = 1
    for s in shape:
        n *= s
    if n != world:
        raise ValueError(f"topology_aware_mesh: mesh_shape {shape} has {n} ranks, world size is {world}")
    hosts = [None] * world
    dist.all_gather_object(hosts, _host_key())
    nhosts = len(dict.fromkeys(hosts))
    if dcn_mesh_shape is not None:
        dcn = tuple(int(s) for s in dcn_mesh_shape)
        m = 1
        for d, s in zip(dcn, shape):
            if s % d:
                raise ValueError(f"topology_aware_mesh: dcn_mesh_shape {dcn} does not divide {shape}")
            m *= d
        if len(dcn) != len(shape) or m != nhosts:
            raise ValueError(
                f"topology_aware_mesh: dcn_mesh_shape {dcn} must have {len(shape)} axes "
                f"multiplying to the {nhosts} hosts"
            )
        # ranks of one host form the ICI block; blocks are tiled by dcn
        ici = tuple(s // d for s, d in zip(shape, dcn))
        per_host = world // nhosts
        ici_ids = torch.arange(per_host).reshape(ici)
        out = torch.empty(shape, dtype=torch.int64)
        import itertools

        for h, idx in enumerate(itertools.product(*[range(d) for d in dcn])):
            sl = tuple(slice(i * e, (i + 1) * e) for i, e in zip(idx, ici))
            out[sl] = ici_ids + h * per_host
        return out
    return torch.arange(world, dtype=torch.int64).reshape(shape)


def spmd_safe(func):
    """Mark `func` as issuing the same TPU operations and collectives, in the
    same order and shapes, on every rank (TorchTPU name). On the vTPU every
    collective already flushes the pending Fused Eager graph and runs as its
    own stream task, so the marker needs no change of behaviour: the
    wrapper synchronises the inputs' pending work without waiting, like
    TorchTPU, and calls `func`."""
    import functools

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if not torch.compiler.is_compiling():
            from .. import sync

            tensors = [a for a in list(args) + list(kwargs.values())
                       if isinstance(a, torch.Tensor) and a.device.type == "tpu"]
            if tensors:
                sync.synchronize(tensors, wait=False)
        return func(*args, **kwargs)

    wrapper._tpu_spmd_safe = True
    return wrapper


_settings = {"window_num_stripes": 1, "window_stripe_chunk_mb": _DEFAULT_STRIPE_CHUNK_MB}


class _DistributedModule(types.ModuleType):
    """Module properties, as in TorchTPU: ``torch.tpu.distributed.
    window_stripe_chunk_mb = 4`` calls the setter."""

    @property
    def window_num_stripes(self):
        """Concurrent copy stripes per peer transfer. The vTPU's shared-memory
        transport copies with one stripe per rank (each rank is one process
        on the host CPU); the value is validated and reported."""
        return _settings["window_num_stripes"]

    @window_num_stripes.setter
    def window_num_stripes(self, value):
        if int(value) <= 0:
            raise ValueError(f"window_num_stripes must be positive, got {value}")
        _settings["window_num_stripes"] = int(value)

    @property
    def window_stripe_chunk_mb(self):
        """Chunk size in MB of one transfer step (the per-rank slot of the
        shared segment) for process groups created afterwards."""
        return _settings["window_stripe_chunk_mb"]

    @window_stripe_chunk_mb.setter
    def window_stripe_chunk_mb(self, value):
        if int(value) <= 0:
            raise ValueError(f"window_stripe_chunk_mb must be positive, got {value}")
        _settings["window_stripe_chunk_mb"] = int(value)


sys.modules[__name__].__class__ = _DistributedModule
_register()
