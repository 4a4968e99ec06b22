"""tpu_dist: collectives, DDP / FSDP2 / DTensor TP vs one chip, faults.

Each test launches ranks as processes (tests/dist_worker.py) on their own
chips (TPU_VISIBLE_CHIPS) with a private lock dir, and checks what they
report. CI runs them on 2 chips; the 4-rank collectives run too (the vTPU
has 4 chips per host)."""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKER = os.path.join(HERE, "dist_worker.py")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _shm_segments():
    try:
        return {f for f in os.listdir("/dev/shm") if f.startswith("tpu_dist_")}
    except FileNotFoundError:
        return set()


def launch(scenario, world, *args, env=None, timeout=240, hosts=None, expect_fail=()):
    """Run `world` ranks; returns (list of per-rank RESULT dicts, lock dir).
    hosts: per-rank TORCH_TPU_DIST_HOST values (two-"host" runs)."""
    port = _free_port()
    lock_dir = tempfile.mkdtemp(prefix="tpu_dist_locks_")
    procs = []
    for r in range(world):
        e = dict(os.environ)
        e.update(
            RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port), TPU_VISIBLE_CHIPS=str(r % 4), TORCH_TPU_LOCK_DIR=lock_dir,
            TORCH_TPU_NUM_THREADS="1", OMP_NUM_THREADS="1",
            PYTHONPATH=ROOT + os.pathsep + e.get("PYTHONPATH", ""),
        )
        e.pop("TORCH_TPU_DEFER_AND_FUSE", None) if scenario == "fault" else None
        if hosts:
            e["TORCH_TPU_DIST_HOST"] = hosts[r]
            e["LOCAL_RANK"] = str(hosts[:r].count(hosts[r]))
        if env:
            e.update(env)
        procs.append(subprocess.Popen([sys.executable, WORKER, scenario, *args], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results, logs = [], []
    deadline = time.monotonic() + timeout
    for r, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"rank {r} of {scenario} hung")
        logs.append(err[-3000:])
        res = [json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")]
        if p.returncode != 0 and r not in expect_fail:
            raise AssertionError(f"rank {r} of {scenario} exited {p.returncode}:\n{err[-3000:]}")
        results.append(res)
    return results, lock_dir


@pytest.mark.parametrize("world", [2, 4])
def test_collectives_match_reference(world):
    _check_collectives(world)


def test_collectives_two_hosts():
    """Every collective on two "hosts" of two chips each: shared memory
    inside a host, gloo between them; send/recv inside and between hosts."""
    _check_collectives(4, hosts=["hostA", "hostA", "hostB", "hostB"])


def _check_collectives(world, hosts=None):
    before = _shm_segments()
    results, _ = launch("collectives", world, hosts=hosts)
    for r, res in enumerate(results):
        errs = res[-1]
        for k, v in errs.items():
            tol = 0.05 if "bf16" in k else 1e-4
            assert v <= tol, f"rank {r}: {k} off by {v}"
    assert _shm_segments() <= before  # nothing left in /dev/shm


def _check_losses(results):
    ref = results[0][-1]["ref"]
    assert len(ref) == 10
    for r, res in enumerate(results):
        losses = res[-1]["losses"]
        for step, (a, b) in enumerate(zip(losses, ref)):
            assert abs(a - b) <= 1e-5, f"rank {r} step {step}: {a} vs single-chip {b}"
    return ref


@pytest.mark.parametrize("backend", ["tpu_dist", "cpu:gloo,tpu:tpu_dist", "device_id"])
def test_ddp_matches_single_chip(backend):
    results, _ = launch("ddp", 2, backend)
    ref = _check_losses(results)
    assert ref[-1] < ref[0]  # it trains
    assert results[0][-1]["backend"] in ("tpu_dist", "cpu:gloo,tpu:tpu_dist")


def test_fsdp2_matches_single_chip():
    _check_losses(launch("fsdp", 2)[0])


def test_dtensor_tp_matches_single_chip():
    _check_losses(launch("tp", 2)[0])


def test_ddp_two_hosts():
    """Two "hosts" of two chips each, joined through gloo (hierarchical)."""
    results, _ = launch("ddp", 4, "tpu_dist", hosts=["hostA", "hostA", "hostB", "hostB"])
    _check_losses(results)


def test_dcp_save_on_4_ranks_load_on_2(tmp_path):
    """torch.distributed.checkpoint with FSDP2 (DTensor) model + AdamW state
    dicts: saved by 4 ranks (4 chips), loaded by 2 with other shard shapes;
    every tensor equals the saved run's and the next step's loss matches."""
    ckpt = str(tmp_path / "ckpt")
    os.makedirs(ckpt)
    saved, _ = launch("dcp_save", 4, ckpt)
    assert all(r[-1]["saved"] for r in saved)
    assert saved[0][-1]["shards"]["0.weight"] == [8, 16]
    assert any(f.endswith(".distcp") for f in os.listdir(ckpt))
    loaded, _ = launch("dcp_load", 2, ckpt)
    for r, res in enumerate(loaded):
        got = res[-1]
        assert got["shards"]["0.weight"] == [16, 16]
        assert not got["missing"], got["missing"]
        assert len(got["diffs"]) == 6 + 6 * 3
        for k, v in got["diffs"].items():
            assert v == 0.0, f"rank {r}: {k} differs from the saved run by {v}"
        assert abs(got["loss"] - saved[0][-1]["next_loss"]) <= 1e-5


def test_killed_rank_times_out_without_leaks():
    before = _shm_segments()
    timeout_s = 6.0
    results, lock_dir = launch("fault", 3, "2", env={"FAULT_TIMEOUT": str(timeout_s)}, expect_fail=(2,))
    assert results[2][-1]["dying"]
    for r in (0, 1):
        res = results[r][-1]
        assert res["error"] is not None, f"rank {r} did not fail"
        assert "DistBackendError" in res["error"] and "tpu_dist timeout" in res["error"], res["error"]
        assert res["seconds"] <= timeout_s + 1.0
    assert _shm_segments() <= before
    # every chip lock is free again: a new process can take chips 0..2
    import fcntl

    for f in os.listdir(lock_dir):
        with open(os.path.join(lock_dir, f), "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if still held
            fcntl.flock(fh, fcntl.LOCK_UN)


def test_mismatched_shapes_raise_clear_error():
    results, _ = launch("mismatch", 2)
    for res in results:
        err = res[-1]["error"]
        assert err is not None and err.startswith("RuntimeError") and "mismatched" in err
        assert "count=10" in err and "count=11" in err
        assert res[-1]["after"] == [2.0] * 4


def test_all_to_all_split_mismatch_two_hosts():
    results, _ = launch("a2a_mismatch", 4, hosts=["hostA", "hostA", "hostB", "hostB"])
    for res in results:
        err = res[-1]["error"]
        assert err is not None and err.startswith("ValueError"), err
        assert "rank 1 sends 1 elements to rank 0, which expects 2" in err
        assert res[-1]["after"] == [4.0] * 4


def test_tpu_ops_send_recv_ragged_all_to_all():
    """torch.tpu.ops.send/recv (several tensors and dtypes, non-contiguous
    ends, tags) and ragged_all_to_all (3 dtypes, out=, autograd, mismatched
    sizes) on 2 ranks against CPU computations."""
    results, _ = launch("p2p_ragged", 2)
    for r, res in enumerate(results):
        got = res[-1]
        for k, v in got.items():
            if isinstance(v, float):
                assert v == 0.0, f"rank {r}: {k} off by {v}"
        assert "split mismatch" in got["ragged_mismatch"], got["ragged_mismatch"]
    r1 = results[1][-1]
    assert "tag mismatch" in r1["tag_error"] and "tag 9" in r1["tag_error"], r1["tag_error"]
    assert r1["after_tag_error"] == [7.0] * 6
    assert r1["send_recv_cpu"] == 0.0


def test_collective_is_a_graph_break_in_fused_eager():
    results, _ = launch("fused", 2)
    for res in results:
        r = res[-1]
        assert r["pending_before"] > 0 and r["pending_after"] == 0
        assert r["err"] == 0.0


def test_compiled_graph_with_collectives_is_split():
    """torch.compile(backend="tpu") of graphs holding functional collectives
    (all_reduce, all_gather, reduce_scatter between matmuls; a training step
    that all_reduces its gradients) on 2 ranks: correct against eager CPU,
    and each graph is cut at its collectives into captured programs that are
    replayed (no broken capture, no Fused Eager fallback)."""
    results, _ = launch("compiled", 2)
    for r, res in enumerate(results):
        got = res[-1]
        assert got["forward_err"] <= 1e-4 and got["train_err"] <= 1e-5, got
        st = got["stats"]
        assert st["split_graphs"] == 1 and st.get("broken_captures", 0) == 0, st
        assert st["captures"] == 4 and st["replays"] == 8, st  # 4 programs, captured once
        tst = got["train_stats"]
        assert tst["split_graphs"] == 2 and tst.get("broken_captures", 0) == 0, tst
        assert tst.get("fused_runs", 0) == 0 and tst["replays"] > st["replays"], tst


def test_torch_tpu_distributed_names():
    import torch
    import torch_tpu  # noqa: F401

    td = torch.tpu.distributed
    assert td.window_num_stripes == 1 and td.window_stripe_chunk_mb == 1
    td.window_stripe_chunk_mb = 4
    try:
        assert td.window_stripe_chunk_mb == 4 and td._slot_bytes() == 4 << 20
        with pytest.raises(ValueError):
            td.window_stripe_chunk_mb = 0
    finally:
        td.window_stripe_chunk_mb = 1
    with pytest.raises(ValueError, match="nproc_per_node"):
        td.set_tpu_launch_env(nproc_per_node=99)
    td.set_tpu_launch_env(nproc_per_node=2)

    @td.spmd_safe
    def f(x):
        return x * 2

    x = torch.ones(3, device="tpu")
    assert f(x).cpu().tolist() == [2.0] * 3 and f._tpu_spmd_safe
    with pytest.raises(RuntimeError, match="initialized"):
        td.topology_aware_mesh("tpu", (2,))
    assert torch.tpu.ops.all_gather_dim is td.ops.all_gather_dim
    import torch.distributed as dist

    assert "tpu_dist" in dist.Backend.backend_list and "tpu" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["tpu"] == "tpu_dist"
