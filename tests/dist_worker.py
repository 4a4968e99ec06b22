"""One rank of a tests/test_distributed.py scenario (launched with RANK,
WORLD_SIZE, MASTER_ADDR/PORT, TPU_VISIBLE_CHIPS set). Prints one JSON line
"RESULT {...}" that the test checks. Usage: dist_worker.py SCENARIO [ARGS]."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import torch_tpu  # noqa: F401  (registers "tpu" and the tpu_dist backend)

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
STEPS = 10


def result(**kw):
    print("RESULT " + json.dumps(kw), flush=True)


def collectives():
    dist.init_process_group("tpu_dist")
    out = {}
    g = torch.Generator().manual_seed(0)
    data = [torch.randn(1000, 3, generator=g) for _ in range(WORLD)]  # same on every rank
    mine = data[RANK]
    for op, ref in [
        (dist.ReduceOp.SUM, sum(data)),
        (dist.ReduceOp.AVG, sum(data) / WORLD),
        (dist.ReduceOp.MAX, torch.stack(data).amax(0)),
        (dist.ReduceOp.MIN, torch.stack(data).amin(0)),
        (dist.ReduceOp.PRODUCT, torch.stack(data).prod(0)),
    ]:
        x = mine.to("tpu")
        dist.all_reduce(x, op=op)
        out[f"all_reduce_{op}"] = (x.cpu() - ref).abs().max().item()
    # non-contiguous, int, bf16
    x = mine.t().to("tpu")
    dist.all_reduce(x)
    out["all_reduce_noncontig"] = (x.cpu() - sum(data).t()).abs().max().item()
    xi = (mine * 100).to(torch.int64).to("tpu")
    dist.all_reduce(xi)
    out["all_reduce_int64"] = (xi.cpu() - sum((d * 100).to(torch.int64) for d in data)).abs().max().item()
    xb = mine.to(torch.bfloat16).to("tpu")
    dist.all_reduce(xb)
    refb = sum(d.to(torch.bfloat16).float() for d in data).to(torch.bfloat16)
    out["all_reduce_bf16"] = (xb.cpu().float() - refb.float()).abs().max().item()
    # broadcast / reduce
    x = mine.to("tpu")
    dist.broadcast(x, src=WORLD - 1)
    out["broadcast"] = (x.cpu() - data[WORLD - 1]).abs().max().item()
    x = mine.to("tpu")
    dist.reduce(x, dst=0)
    out["reduce"] = (x.cpu() - (sum(data) if RANK == 0 else mine)).abs().max().item()
    x = mine.to("tpu")
    dist.reduce(x, dst=WORLD - 1, op=dist.ReduceOp.MAX)
    refm = torch.stack(data).amax(0) if RANK == WORLD - 1 else mine
    out["reduce_max_last"] = (x.cpu() - refm).abs().max().item()
    # all_gather (list and into tensor), reduce_scatter (list and tensor)
    outs = [torch.empty(1000, 3, device="tpu") for _ in range(WORLD)]
    dist.all_gather(outs, mine.to("tpu"))
    out["all_gather"] = max((o.cpu() - d).abs().max().item() for o, d in zip(outs, data))
    big = torch.empty(WORLD * 1000, 3, device="tpu")
    dist.all_gather_into_tensor(big, mine.to("tpu"))
    out["all_gather_into_tensor"] = (big.cpu() - torch.cat(data)).abs().max().item()
    full = torch.cat([d * (RANK + 1) for d in data])  # rank r's input
    o = torch.empty(1000, 3, device="tpu")
    dist.reduce_scatter_tensor(o, full.to("tpu"))
    ref = sum(data[RANK] * (r + 1) for r in range(WORLD))
    out["reduce_scatter_tensor"] = (o.cpu() - ref).abs().max().item()
    dist.reduce_scatter_tensor(o, full.to("tpu"), op=dist.ReduceOp.AVG)
    out["reduce_scatter_avg"] = (o.cpu() - ref / WORLD).abs().max().item()
    o2 = torch.empty(1000, 3, device="tpu")
    dist.reduce_scatter(o2, [(d * (RANK + 1)).to("tpu") for d in data])
    out["reduce_scatter"] = (o2.cpu() - ref).abs().max().item()
    # all_to_all_single with uneven splits: rank r sends r + k + 1 rows to k
    send = [r + k + 1 for k in range(WORLD) for r in [RANK]]
    recv = [k + RANK + 1 for k in range(WORLD)]
    inp = torch.arange(sum(send) * 2, dtype=torch.float32).reshape(-1, 2) + 1000 * RANK
    o = torch.empty(sum(recv), 2, device="tpu")
    dist.all_to_all_single(o, inp.to("tpu"), recv, send)
    refs = []
    for k in range(WORLD):
        ks = [k + j + 1 for j in range(WORLD)]
        kin = torch.arange(sum(ks) * 2, dtype=torch.float32).reshape(-1, 2) + 1000 * k
        refs.append(kin[sum(ks[:RANK]) : sum(ks[: RANK + 1])])
    out["all_to_all_single"] = (o.cpu() - torch.cat(refs)).abs().max().item()
    outs = [torch.empty(2, device="tpu") for _ in range(WORLD)]
    dist.all_to_all(outs, [torch.full((2,), float(RANK * 10 + k), device="tpu") for k in range(WORLD)])
    out["all_to_all"] = max(abs(o.cpu()[0].item() - (k * 10 + RANK)) for k, o in enumerate(outs))
    # send/recv ring, async work handles
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    buf = torch.empty(300, device="tpu")
    reqs = [dist.isend(torch.full((300,), float(RANK), device="tpu"), nxt), dist.irecv(buf, prv)]
    for r in reqs:
        r.wait()
    out["send_recv"] = (buf.cpu() - prv).abs().max().item()
    w = dist.all_reduce(torch.ones(4, device="tpu"), async_op=True)
    w.wait()
    out["async_not_done"] = 1.0 - float(w.is_completed())
    # gather / scatter / broadcast_object / coalesced
    g_out = [torch.empty(3, device="tpu") for _ in range(WORLD)] if RANK == 0 else None
    dist.gather(torch.full((3,), float(RANK), device="tpu"), g_out, dst=0)
    out["gather"] = max(abs(t.cpu()[0].item() - k) for k, t in enumerate(g_out)) if RANK == 0 else 0.0
    s_out = torch.empty(3, device="tpu")
    dist.scatter(s_out, [torch.full((3,), float(k), device="tpu") for k in range(WORLD)] if RANK == 0 else None, src=0)
    out["scatter"] = abs(s_out.cpu()[0].item() - RANK)
    objs = [None] * WORLD
    dist.all_gather_object(objs, {"r": RANK})
    out["all_gather_object"] = float(objs != [{"r": k} for k in range(WORLD)])
    # functional collectives (what DTensor uses)
    import torch.distributed._functional_collectives as fc

    y = fc.all_reduce(mine.to("tpu"), "sum", dist.group.WORLD)
    out["functional_all_reduce"] = (y.cpu() - sum(data)).abs().max().item()
    y = fc.all_gather_tensor(mine.to("tpu"), 0, dist.group.WORLD)
    out["functional_all_gather"] = (y.cpu() - torch.cat(data)).abs().max().item()
    y = fc.reduce_scatter_tensor(full.to("tpu"), "sum", 0, dist.group.WORLD)
    out["functional_reduce_scatter"] = (y.cpu() - ref).abs().max().item()
    # CPU tensors go through the same backend
    c = mine.clone()
    dist.all_reduce(c)
    out["cpu_all_reduce"] = (c - sum(data)).abs().max().item()
    # torch.tpu.ops-style collectives
    from torch_tpu.distributed import ops as tops

    y = tops.all_gather_dim(mine.to("tpu"), 1)
    out["all_gather_dim"] = (y.cpu() - torch.cat(data, 1)).abs().max().item()
    y = tops.reduce_scatter_dim(torch.cat([d * (RANK + 1) for d in data], 1).to("tpu"), 1)
    out["reduce_scatter_dim"] = (y.cpu() - ref).abs().max().item()
    tam = torch.tpu.distributed.topology_aware_mesh("tpu", (2, WORLD // 2))
    out["topology_aware_mesh"] = float(tam.tolist() != torch.arange(WORLD).reshape(2, -1).tolist())
    dist.barrier()
    dist.destroy_process_group()
    result(**out)


# ---- training scenarios: loss per step vs the same model on one chip ------

def _mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
        torch.nn.Linear(32, 4)
    )


def _batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)) for _ in range(STEPS)]


def _single_chip_losses():
    model = _mlp().to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in _batches():
        loss = torch.nn.functional.mse_loss(model(x.to("tpu")), y.to("tpu"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _train(wrap, shard_batch=True):
    model = wrap(_mlp().to("tpu"))
    # foreach=False: TP mixes DTensor and plain parameters
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    losses = []
    for x, y in _batches():
        if shard_batch:
            per = x.shape[0] // WORLD
            x, y = x[RANK * per:(RANK + 1) * per], y[RANK * per:(RANK + 1) * per]
        loss = torch.nn.functional.mse_loss(model(x.to("tpu")), y.to("tpu"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        g = loss.detach().clone()
        if shard_batch:
            dist.all_reduce(g, op=dist.ReduceOp.AVG)
        losses.append(g.item() if not hasattr(g, "full_tensor") else g.full_tensor().item())
    return losses


def ddp(backend="tpu_dist"):
    torch.set_float32_matmul_precision("highest")
    if backend == "device_id":
        dist.init_process_group(device_id=torch.device("tpu:0"))
    else:
        dist.init_process_group(backend)
    from torch.nn.parallel import DistributedDataParallel as DDP

    losses = _train(lambda m: DDP(m))
    ref = _single_chip_losses() if RANK == 0 else losses
    name = dist.get_backend()
    dist.destroy_process_group()
    result(losses=losses, ref=ref, backend=str(name))


def fsdp():
    torch.set_float32_matmul_precision("highest")
    dist.init_process_group("tpu_dist")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("tpu", (WORLD,))

    def wrap(m):
        for layer in m:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        return fully_shard(m, mesh=mesh)

    losses = _train(wrap)
    ref = _single_chip_losses() if RANK == 0 else losses
    dist.destroy_process_group()
    result(losses=losses, ref=ref)


def tp():
    torch.set_float32_matmul_precision("highest")
    dist.init_process_group("tpu_dist")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("tpu", (WORLD,))

    def wrap(m):
        return parallelize_module(m, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})

    losses = _train(wrap, shard_batch=False)  # TP: every rank sees the whole batch
    ref = _single_chip_losses() if RANK == 0 else losses
    dist.destroy_process_group()
    result(losses=losses, ref=ref)


def fault(victim):
    """`victim` dies (SIGKILL) before the second all_reduce; the others
    must raise a timeout-class error within the configured timeout."""
    import datetime
    import signal

    dist.init_process_group("tpu_dist", timeout=datetime.timedelta(seconds=float(os.environ["FAULT_TIMEOUT"])))
    x = torch.ones(1 << 16, device="tpu")
    dist.all_reduce(x)
    torch.tpu.synchronize()
    if RANK == int(victim):
        result(pid=os.getpid(), dying=True)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.2)
    t0 = time.monotonic()
    try:
        dist.all_reduce(x)
        err = None
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {e}"
    result(error=err, seconds=time.monotonic() - t0)
    os._exit(0)  # a broken group cannot be destroyed collectively


def _error_then_usable(bad_call):
    """Run a collective that must fail; report its error and that the group
    is still usable afterwards."""
    dist.init_process_group("tpu_dist")
    try:
        bad_call()
        err = None
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {e}"
    y = torch.ones(4, device="tpu")
    dist.all_reduce(y)
    result(error=err, after=y.cpu().tolist())
    dist.destroy_process_group()


def mismatch():
    _error_then_usable(lambda: dist.all_reduce(torch.ones(10 + RANK, device="tpu")))


def a2a_mismatch():
    """all_to_all_single whose splits disagree between ranks (two hosts):
    every rank raises ValueError, none hangs."""
    recv = [2 if (RANK == 0 and k == 1) else 1 for k in range(WORLD)]
    _error_then_usable(lambda: dist.all_to_all_single(torch.empty(sum(recv), device="tpu"),
                                                      torch.ones(WORLD, device="tpu"), recv, [1] * WORLD))


def fused():
    """Fused Eager: a collective flushes the pending graph (graph break)."""
    from torch_tpu.execution_mode import EagerMode, set_eager_mode

    set_eager_mode(EagerMode.DEFER_AND_FUSE)
    dist.init_process_group("tpu_dist")
    x = torch.ones(64, device="tpu") * (RANK + 1)
    y = x * 2 + 1  # pending
    pending_before = torch_tpu._C._pending_ops(0)
    dist.all_reduce(y)
    pending_after = torch_tpu._C._pending_ops(0)
    z = y + 1
    ref = sum(2 * (r + 1) + 1 for r in range(WORLD)) + 1
    err = (z.cpu() - ref).abs().max().item()
    dist.destroy_process_group()
    result(pending_before=pending_before, pending_after=pending_after, err=err)


def _ragged_setup(world, rows=12, feat=(3, 2)):
    """Every rank's ragged_all_to_all arguments (the same on all ranks):
    sizes ss[i][j] rows from i to j (some 0), slices taken from operand i
    in reverse rank order with gaps, landing in receiver j at distinct
    offsets with gaps."""
    ss = [[(3 * i + 2 * j + 1) % 4 for j in range(world)] for i in range(world)]
    ins = []
    for i in range(world):
        pos, o = 1, [0] * world
        for j in reversed(range(world)):
            o[j] = pos
            pos += ss[i][j] + 1
        assert pos <= rows
        ins.append(o)
    oo = [[0] * world for _ in range(world)]
    for j in range(world):
        pos = 1
        for i in range(world):
            oo[i][j] = pos
            pos += ss[i][j] + 1
        assert pos <= rows
    g = torch.Generator().manual_seed(5)
    ops = [torch.randn((rows,) + feat, generator=g) for _ in range(world)]
    outs = [torch.randn((rows,) + feat, generator=g) for _ in range(world)]
    return ss, ins, oo, ops, outs


def _ragged_ref(world, me, ss, ins, oo, ops, outs):
    res = outs[me].clone()
    for i in range(world):
        n = ss[i][me]
        res[oo[i][me]: oo[i][me] + n] = ops[i][ins[i][me]: ins[i][me] + n]
    return res


def p2p_ragged():
    """torch.tpu.ops.send / recv / ragged_all_to_all against CPU references."""
    dist.init_process_group("tpu_dist")
    out = {}
    tops = torch.tpu.ops
    peer = 1 - RANK if WORLD == 2 else None
    # ---- send / recv: several tensors of different dtypes in one call,
    # a non-contiguous receive target, two tags in order
    g = torch.Generator().manual_seed(11)
    a = torch.randn(5, 7, generator=g)
    b = (torch.randn(33, generator=g) * 100).to(torch.int64)
    c = torch.randn(4, 6, generator=g).to(torch.bfloat16)
    if RANK == 0:
        w = tops.send([a.to("tpu"), b.to("tpu"), c.to("tpu")], 1, 3)
        w.wait()
        tops.send([a.t().to("tpu") * 2], 1, 4).wait()  # non-contiguous source
        out["send_recv"] = 0.0
    else:
        ra = torch.empty(7, 5, device="tpu").t()  # non-contiguous target
        rb = torch.empty(33, dtype=torch.int64, device="tpu")
        rc = torch.empty(4, 6, dtype=torch.bfloat16, device="tpu")
        w = tops.recv([ra, rb, rc], 0, 3)
        w.wait()
        r2 = torch.empty(7, 5, device="tpu")
        tops.recv([r2], 0, 4).wait()
        out["send_recv"] = max(
            (ra.cpu() - a).abs().max().item(), (rb.cpu() - b).abs().max().item(),
            (rc.cpu().float() - c.float()).abs().max().item(), (r2.cpu() - a.t() * 2).abs().max().item())
    # a recv with the wrong tag raises and leaves the message queued
    if RANK == 0:
        tops.send([torch.full((6,), 7.0, device="tpu")], 1, 8).wait()
        out["tag_error"] = "n/a"
    else:
        buf = torch.zeros(6, device="tpu")
        try:
            tops.recv([buf], 0, 9).wait()
            out["tag_error"] = None
        except ValueError as e:
            out["tag_error"] = str(e)
        tops.recv([buf], 0, 8).wait()
        out["after_tag_error"] = buf.cpu().tolist()
    # CPU tensors take the same path
    if RANK == 0:
        tops.send([a], 1, 0).wait()
    else:
        ca = torch.empty(5, 7)
        tops.recv([ca], 0, 0).wait()
        out["send_recv_cpu"] = (ca - a).abs().max().item()
    # ---- ragged_all_to_all
    ss, ins, oo, ops, outs = _ragged_setup(WORLD)
    name = dist.group.WORLD.group_name
    args = lambda dtype: (  # noqa: E731
        ops[RANK].to(dtype).to("tpu"), outs[RANK].to(dtype).to("tpu"),
        torch.tensor(ins[RANK], device="tpu"), torch.tensor(ss[RANK], device="tpu"),
        torch.tensor(oo[RANK], device="tpu"), torch.tensor([ss[j][RANK] for j in range(WORLD)], device="tpu"))
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        cast = [t.to(dtype) for t in ops], [t.to(dtype) for t in outs]
        ref = _ragged_ref(WORLD, RANK, ss, ins, oo, *cast)
        res = tops.ragged_all_to_all(*args(dtype), name)
        out[f"ragged_{dtype}"] = (res.cpu().double() - ref.double()).abs().max().item()
    # out=: written in place and returned
    o = torch.empty_like(outs[RANK]).to("tpu")
    r = tops.ragged_all_to_all(*args(torch.float32), name, out=o)
    ref = _ragged_ref(WORLD, RANK, ss, ins, oo, ops, outs)
    out["ragged_out"] = (o.cpu() - ref).abs().max().item() + float(r is not o)
    # autograd: d(sum(result * wt))/d operand and /d output vs the CPU rule
    wts = [torch.randn(outs[0].shape, generator=torch.Generator().manual_seed(20 + j)) for j in range(WORLD)]
    op_t, out_t, *rest = args(torch.float32)
    op_t.requires_grad_(True)
    out_t.requires_grad_(True)
    res = tops.ragged_all_to_all(op_t, out_t, *rest, name)
    (res * wts[RANK].to("tpu")).sum().backward()
    gref = torch.zeros_like(ops[RANK])
    for j in range(WORLD):
        n = ss[RANK][j]
        gref[ins[RANK][j]: ins[RANK][j] + n] = wts[j][oo[RANK][j]: oo[RANK][j] + n]
    out["ragged_grad_operand"] = (op_t.grad.cpu() - gref).abs().max().item()
    oref = wts[RANK].clone()
    for i in range(WORLD):
        oref[oo[i][RANK]: oo[i][RANK] + ss[i][RANK]] = 0
    out["ragged_grad_output"] = (out_t.grad.cpu() - oref).abs().max().item()
    # mismatched sizes: rank 1's recv_sizes disagree with the senders' (all
    # ranks raise, the group stays usable)
    bad = list(args(torch.float32))
    if RANK == 1:
        bad[5] = bad[5].flip(0)
    try:
        tops.ragged_all_to_all(*bad, name)
        out["ragged_mismatch"] = None
    except (RuntimeError, ValueError) as e:
        out["ragged_mismatch"] = f"{type(e).__name__}: {e}"
    dist.barrier()
    dist.destroy_process_group()
    result(**out)


# ---- distributed checkpoint: FSDP2 + optimizer saved on N ranks, loaded on M

def _dcp_model(mesh, seed):
    from torch.distributed.fsdp import fully_shard

    m = _mlp(seed).to("tpu")
    for layer in m:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    return fully_shard(m, mesh=mesh)


def _dcp_full(model, opt):
    """Every parameter and AdamW state entry as a full CPU tensor (a
    collective: all ranks call it)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(model, opt)
    full = {}
    for k, v in msd.items():
        full["model." + k] = v.full_tensor().cpu()
    for pk, st in osd["state"].items():
        for sk, v in st.items():
            full[f"optim.{pk}.{sk}"] = (v.full_tensor() if hasattr(v, "full_tensor") else v).cpu()
    return full


def dcp_save(ckpt_dir):
    """FSDP2 on WORLD ranks trains 3 AdamW steps, saves model + optimizer
    with torch.distributed.checkpoint, and rank 0 stores the full tensors
    (the reference the loading run compares with)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.device_mesh import init_device_mesh

    torch.set_float32_matmul_precision("highest")
    dist.init_process_group("tpu_dist")
    mesh = init_device_mesh("tpu", (WORLD,))
    model = _dcp_model(mesh, 0)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    for x, y in _batches()[:3]:
        loss = torch.nn.functional.mse_loss(model(x.to("tpu")), y.to("tpu"))
        opt.zero_grad()
        loss.backward()
        opt.step()
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=ckpt_dir)
    full = _dcp_full(model, opt)
    if RANK == 0:
        torch.save(full, os.path.join(ckpt_dir, "reference.pt"))
    shards = {k: list(v.to_local().shape) for k, v in msd.items()}
    # the step after the checkpoint, for the loading run to reproduce
    x, y = _batches()[3]
    loss = torch.nn.functional.mse_loss(model(x.to("tpu")), y.to("tpu"))
    dist.barrier()
    dist.destroy_process_group()
    result(saved=True, shards=shards, next_loss=loss.item())


def dcp_load(ckpt_dir):
    """FSDP2 on WORLD ranks (another count than the save), another init:
    after dcp.load every parameter and optimizer state equals the saved
    run's; one more step then matches on all ranks."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import init_device_mesh

    torch.set_float32_matmul_precision("highest")
    dist.init_process_group("tpu_dist")
    mesh = init_device_mesh("tpu", (WORLD,))
    model = _dcp_model(mesh, 123)  # different weights until loaded
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    # a step creates the optimizer state that load fills in
    x, y = _batches()[0]
    torch.nn.functional.mse_loss(model(x.to("tpu")), y.to("tpu")).backward()
    opt.step()
    opt.zero_grad()
    msd, osd = get_state_dict(model, opt)
    sd = {"model": msd, "optim": osd}
    dcp.load(sd, checkpoint_id=ckpt_dir)
    set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
    full = _dcp_full(model, opt)
    ref = torch.load(os.path.join(ckpt_dir, "reference.pt"))
    diffs = {k: (full[k].double() - ref[k].double()).abs().max().item() for k in ref}
    missing = sorted(set(ref) ^ set(full))
    shards = {k: list(v.to_local().shape) for k, v in msd.items()}
    # training continues from the loaded state
    x, y = _batches()[3]
    loss = torch.nn.functional.mse_loss(model(x.to("tpu")), y.to("tpu"))
    dist.destroy_process_group()
    result(diffs=diffs, missing=missing, shards=shards, loss=loss.item())


def compiled(mode="compile"):
    """torch.compile(backend="tpu") of functions with functional collectives
    (all_reduce between matmuls, all_gather, reduce_scatter; forward and a
    training step with DTensor-free autograd), checked against eager CPU."""
    import torch.distributed._functional_collectives as fc

    from torch_tpu import _compile

    torch.set_float32_matmul_precision("highest")
    dist.init_process_group("tpu_dist")
    grp = dist.group.WORLD
    g = torch.Generator().manual_seed(3)
    ws = [torch.randn(16, 16, generator=g) for _ in range(2)]
    xs = [torch.randn(8, 16, generator=g) for _ in range(WORLD)]
    out = {}

    def f(x, w0, w1):
        h = torch.tanh(x @ w0)
        h = fc.all_reduce(h, "sum", grp)  # partial sums of every rank
        h = h * 0.5 + 1.0
        y = fc.all_gather_tensor(h @ w1, 0, grp)
        z = fc.reduce_scatter_tensor(y.repeat(WORLD, 1), "sum", 0, grp)
        return z.sum(1), h

    def ref(x_all):
        h = sum(torch.tanh(x @ ws[0]) for x in x_all) * 0.5 + 1.0
        y = torch.cat([h @ ws[1]] * WORLD)
        z = (y * WORLD)
        return z.sum(1), h

    cf = torch.compile(f, backend="tpu")
    _compile._reset_stats()
    wt = [w.to("tpu") for w in ws]
    errs = []
    for step in range(3):  # capture, then replays
        xa = [x + step for x in xs]
        a, b = cf(xa[RANK].to("tpu"), *wt)
        ra, rb = ref(xa)
        errs.append(max((a.cpu() - ra).abs().max().item(), (b.cpu() - rb).abs().max().item()))
    out["forward_err"] = max(errs)
    out["stats"] = _compile.stats()
    # a training step: the backward all_reduces the gradient (DDP by hand)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    cpu_model = __import__("copy").deepcopy(model)
    model = model.to("tpu")

    def step_fn(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        grads = [fc.all_reduce(p.grad, "avg", grp) for p in model.parameters()]
        with torch.no_grad():
            for p, gr in zip(model.parameters(), grads):
                p -= 0.1 * gr
        return loss.detach()

    cstep = torch.compile(step_fn, backend="tpu") if mode == "compile" else step_fn
    gb = torch.Generator().manual_seed(9)
    batches = [(torch.randn(WORLD * 4, 16, generator=gb), torch.randn(WORLD * 4, 1, generator=gb))
               for _ in range(4)]
    losses, ref_losses = [], []
    for x, y in batches:
        xr, yr = x[RANK * 4:(RANK + 1) * 4], y[RANK * 4:(RANK + 1) * 4]
        losses.append(cstep(xr.to("tpu"), yr.to("tpu")).item())
        for p in model.parameters():  # (Dynamo 2.13 drops `p.grad = None` inside the frame)
            p.grad = None
        # CPU reference: the same step with the full-batch-average gradient
        gs = []
        for r in range(WORLD):
            cpu_model.zero_grad()
            torch.nn.functional.mse_loss(cpu_model(x[r * 4:(r + 1) * 4]), y[r * 4:(r + 1) * 4]).backward()
            gs.append([p.grad.clone() for p in cpu_model.parameters()])
        ref_losses.append(torch.nn.functional.mse_loss(cpu_model(xr), yr).item())
        with torch.no_grad():
            for i, p in enumerate(cpu_model.parameters()):
                p -= 0.1 * sum(gg[i] for gg in gs) / WORLD
    out["train_err"] = max(abs(a - b) for a, b in zip(losses, ref_losses))
    out["train_stats"] = _compile.stats()
    dist.destroy_process_group()
    result(**out)


if __name__ == "__main__":
    globals()[sys.argv[1]](*sys.argv[2:])
