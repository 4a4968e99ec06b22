"""torch.tpu semantics as TorchTPU 0.2.0 has them (EagerMode, eager_mode
property, set_eager_mode context manager, allow_excess_precision,
default_generators, Event kwargs, device properties, AMP dtypes and autocast
hooks, torch.backends.tpu, env-variable aliases, submodules)."""
import os
import subprocess
import sys

import pytest
import torch

import torch_tpu
import torch_tpu.sync
from torch_tpu.execution_mode import EagerMode, get_eager_mode


def _run(code, env_extra=None):
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=180)


def test_eager_mode_enum_and_property():
    assert torch.tpu.EagerMode is EagerMode
    assert {m.name for m in torch.tpu.EagerMode} == {
        "DEFER_AND_FUSE", "DEFER_NEVER", "DEFER_NEVER_AND_LAUNCH_BLOCKING"}
    prev = torch.tpu.eager_mode
    assert prev is get_eager_mode()
    try:
        torch.tpu.eager_mode = EagerMode.DEFER_AND_FUSE
        assert torch.tpu.eager_mode is EagerMode.DEFER_AND_FUSE
        assert torch_tpu._C._get_fused()
        a = torch.ones(4, device="tpu") * 3
        assert torch_tpu.sync.pending_ops() > 0  # recorded, not run
        assert a.sum().item() == 12.0
        torch.tpu.eager_mode = EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
        assert torch_tpu._C._get_launch_blocking() and not torch_tpu._C._get_fused()
    finally:
        torch.tpu.eager_mode = prev
    assert torch.tpu.eager_mode is prev
    with pytest.raises(ValueError):
        torch.tpu.eager_mode = "NOT_A_MODE"


def test_set_eager_mode_is_a_context_manager_and_nests():
    prev = torch.tpu.eager_mode
    with torch.tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
        assert torch.tpu.eager_mode is EagerMode.DEFER_AND_FUSE
        with torch.tpu.set_eager_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
            assert torch.tpu.eager_mode is EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
        assert torch.tpu.eager_mode is EagerMode.DEFER_AND_FUSE
        x = torch.arange(6.0, device="tpu").reshape(2, 3).sum(1)
        assert not torch_tpu.sync.is_materialized(x)
        assert x.tolist() == [3.0, 12.0]
    assert torch.tpu.eager_mode is prev
    # restored on an exception too
    with pytest.raises(RuntimeError, match="boom"):
        with torch.tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
            raise RuntimeError("boom")
    assert torch.tpu.eager_mode is prev


def test_allow_excess_precision_property_and_backends():
    prev = torch.tpu.allow_excess_precision
    assert prev is False  # default when XLA_FLAGS does not set it
    try:
        torch.tpu.allow_excess_precision = True
        assert torch.tpu.allow_excess_precision is True
        assert torch.backends.tpu.allow_excess_precision is True
        torch.backends.tpu.allow_excess_precision = False
        assert torch.tpu.allow_excess_precision is False
        with pytest.raises(TypeError):
            torch.tpu.allow_excess_precision = "yes"
    finally:
        torch.tpu.allow_excess_precision = prev
    r = _run("import torch; print(torch.tpu.allow_excess_precision)",
             {"XLA_FLAGS": "--xla_dump_to=/tmp/x --xla_allow_excess_precision=true"})
    assert r.stdout.strip() == "True", r.stderr
    assert torch.backends.tpu.is_available()
    with torch.tpu.precision(torch.tpu.Precision.HIGH):
        assert torch.backends.tpu.precision is torch.tpu.Precision.HIGH


def test_default_generators():
    gens = torch.tpu.default_generators
    assert isinstance(gens, tuple) and len(gens) == torch.tpu.device_count()
    assert gens is torch.tpu.default_generators
    assert all(isinstance(g, torch.Generator) and g.device == torch.device("tpu", i)
               for i, g in enumerate(gens))
    gens[0].manual_seed(1234)
    a = torch.rand(5, device="tpu")
    torch.tpu.manual_seed(1234)
    b = torch.rand(5, device="tpu")
    assert torch.equal(a.cpu(), b.cpu())
    assert torch.tpu._get_generator(torch.device("tpu", 1)) is gens[1]
    assert torch.tpu.initial_seed() == gens[0].initial_seed() == 1234


def test_event_device_and_external_kwargs():
    e = torch.tpu.Event(enable_timing=True, external=True, device="tpu:0")
    assert isinstance(e, torch.Event) and e.device.type == "tpu"
    x = torch.ones(1000, device="tpu")
    e.record()
    (x * 2).sum()
    e2 = torch.tpu.Event(enable_timing=True, device=torch.device("tpu"))
    e2.record()
    e2.synchronize()
    assert e.query() and e2.query()
    assert e.elapsed_time(e2) >= 0.0
    with pytest.raises(ValueError):
        torch.tpu.Event(device="cpu")


def test_device_properties_fields():
    p = torch.tpu.get_device_properties(0)
    assert p.name == torch.tpu.get_device_name(0)
    assert p.total_memory == torch.tpu.mem_get_info(0)[1] > 0
    assert p.multi_processor_count == 1
    with pytest.raises(Exception):
        p.total_memory = 1  # frozen, as TorchTPU's dataclass
    with pytest.raises(AssertionError):
        torch.tpu.get_device_properties(torch.tpu.device_count())


def test_amp_supported_dtypes_and_autocast_hooks():
    dts = torch.tpu.get_amp_supported_dtype()
    assert len(dts) == 20 and torch.bfloat16 in dts and torch.float8_e4m3fn in dts
    assert torch.uint32 in dts and torch.complex64 in dts
    assert torch.tpu._is_autocast_enabled() is False
    with torch.autocast("tpu", dtype=torch.float16):
        assert torch.tpu._is_autocast_enabled() is True
        assert torch.tpu._get_autocast_dtype() is torch.float16
        y = torch.mm(torch.ones(2, 2, device="tpu"), torch.ones(2, 2, device="tpu"))
        assert y.dtype is torch.float16
    assert torch.tpu._is_autocast_enabled() is False
    prev = torch.tpu._get_autocast_dtype()
    try:
        torch.tpu._set_autocast_dtype(torch.bfloat16)
        torch.tpu._set_autocast_enabled(True)
        y = torch.mm(torch.ones(2, 2, device="tpu"), torch.ones(2, 2, device="tpu"))
        assert y.dtype is torch.bfloat16
    finally:
        torch.tpu._set_autocast_enabled(False)
        torch.tpu._set_autocast_dtype(prev)
    with pytest.raises(ValueError, match="Unsupported dtype"):
        torch.tpu._set_autocast_dtype(torch.complex32)


def test_torchtpu_env_variable_aliases():
    env = {k: v for k, v in os.environ.items() if k != "TPU_VISIBLE_CHIPS"}
    env["TPU_VISIBLE_DEVICES"] = "2"
    r = subprocess.run([sys.executable, "-c", "import torch; print(torch.tpu.device_count(),"
                        " torch.tpu.get_device_properties(0).physical_chip)"],
                       capture_output=True, text=True, env=env, timeout=180)
    assert r.stdout.strip() == "1 2", r.stderr
    # ours wins when both are set
    env["TPU_VISIBLE_CHIPS"] = "0,1"
    r = subprocess.run([sys.executable, "-c", "import torch; print(torch.tpu.device_count())"],
                       capture_output=True, text=True, env=env, timeout=180)
    assert r.stdout.strip() == "2", r.stderr


def test_tier3_cache_root_alias(tmp_path):
    code = ("import torch; x = torch.ones(3, device='tpu');"
            "torch.tpu.synchronize();"
            "import torch_tpu.execution_mode as em;"
            "em.set_eager_mode(em.EagerMode.DEFER_AND_FUSE);"
            "print(((x + 1) * 2).sum().item())")
    env = {"TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT": str(tmp_path), "TPU_VISIBLE_CHIPS": "3"}
    saved = os.environ.pop("TORCH_TPU_COMPILATION_CACHE_DIR", None)  # ours wins over the alias
    try:
        r = _run(code, env)
    finally:
        if saved is not None:
            os.environ["TORCH_TPU_COMPILATION_CACHE_DIR"] = saved
    assert r.stdout.strip() == "12.0", r.stderr
    assert any(f.name != "vtpu_jit" for f in tmp_path.iterdir()), \
        "no program was written to the TorchTPU-named cache root"


def test_submodules_import_and_attribute():
    import torch.tpu.ops as ops
    assert torch.tpu.ops is ops is torch_tpu.ops
    assert ops.__spec__.name == "torch_tpu.ops"
    assert "ragged_dot" in ops.__all__
    with pytest.raises(AttributeError):
        torch.tpu.not_a_submodule


def test_ops_cli_still_works():
    r = subprocess.run([sys.executable, "-m", "torch_tpu.ops", "--list"], capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0 and "native ATen overloads" in r.stdout, r.stderr


def test_fresh_empty_is_pending_in_fused_eager():
    with torch.tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
        flushes = dict(torch.tpu._get_cache_stats()["flushes"])
        e = torch.empty(8, device="tpu")
        assert not torch_tpu.sync.is_materialized(e) and not torch_tpu.sync.is_ready(e)
        x = torch.arange(4.0).to("tpu")  # host data copied in: materialized
        assert torch_tpu.sync.is_materialized(x)
        e.fill_(2.0)
        assert not torch_tpu.sync.is_materialized(e)
        assert e.sum().item() == 16.0  # the flush materializes it
        assert torch_tpu.sync.is_materialized(e)
        f = torch.empty(3, device="tpu")
        assert not torch_tpu.sync.is_materialized(f)
        torch.tpu.synchronize()
        assert torch_tpu.sync.is_materialized(f) and torch_tpu.sync.is_ready(f)
        g = torch.empty(5, device="tpu")
        g.copy_(torch.ones(5))  # written by a copy from the host
        assert torch_tpu.sync.is_materialized(g) and g.tolist() == [1.0] * 5
        # a fresh block alone is never a reason to flush
        after = torch.tpu._get_cache_stats()["flushes"]
        assert after["copy"] == flushes["copy"] and after["alias"] == flushes["alias"]
    with torch.tpu.set_eager_mode(EagerMode.DEFER_NEVER):
        e2 = torch.empty(8, device="tpu")  # Strict: materialized at once
        assert torch_tpu.sync.is_materialized(e2)


def test_internal_defer_all_defers_index_checks():
    assert "INTERNAL_DEFER_ALL" not in {m.name for m in EagerMode}  # internal, as in TorchTPU
    prev = torch.tpu.eager_mode
    with torch.tpu.set_eager_mode(EagerMode.INTERNAL_DEFER_ALL):
        assert torch.tpu.eager_mode is EagerMode.INTERNAL_DEFER_ALL
        assert torch_tpu._C._get_graph_mode() == 2
        a = torch.arange(10.0, device="tpu")
        b = a[torch.tensor([1, 7], device="tpu")] * 2  # index check deferred
        assert torch_tpu.sync.pending_ops() >= 3
        assert b.tolist() == [2.0, 14.0]
        c = torch.arange(10.0, device="tpu")
        bad = c[torch.tensor([1, 20], device="tpu")]
        assert torch_tpu.sync.pending_ops() > 0  # no flush at the op
        with pytest.raises(IndexError, match="out of range"):
            bad.cpu()  # the error surfaces when the program runs
        ok = (torch.arange(3.0, device="tpu") + 1).tolist()  # the device carries on
        assert ok == [1.0, 2.0, 3.0]
    assert torch.tpu.eager_mode is prev
    torch.tpu.eager_mode = "INTERNAL_DEFER_ALL"
    try:
        assert torch.tpu.eager_mode is EagerMode.INTERNAL_DEFER_ALL
    finally:
        torch.tpu.eager_mode = prev
    with pytest.raises(ValueError):
        torch.tpu.eager_mode = "DEFER_SOME"


def test_sync_module_torchtpu_names(tmp_path):
    with torch.tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
        y = torch.ones(3, device="tpu") * 2
        mlir = torch_tpu.sync.computation_mlir(y)
        assert "func.func" in mlir and "stablehlo.multiply" in mlir
        dot = torch_tpu.sync.computation_graphviz(y)
        assert dot.startswith("digraph") and "mul" in dot
        f = tmp_path / "sub" / "g.dot"
        torch_tpu.sync.dump_computation_graphviz([y], str(f))
        assert f.read_text() == dot
        assert not torch_tpu.sync.is_materializing(y)  # pending, not yet enqueued
        assert y.tolist() == [2.0] * 3
        assert not torch_tpu.sync.is_materializing(y)  # finished
