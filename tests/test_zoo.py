"""Hugging Face model zoo, a representative subset (tools/zoo.py has the
whole list and `python tools/zoo.py` the report).

Each tiny model (random weights, built from a config, nothing downloaded) must
run forward and backward on tpu NATIVELY (CPU fallback disabled) and match
the CPU at precision HIGHEST. Models that fail today are strict xfails whose
reason is the first failing op: when that op (and every later one the model
needs) lands, the test XPASSes and fails loudly: then drop the mark.
"""
import os
import sys

import pytest

pytest.importorskip("transformers")

# the harness is tools/zoo.py (a tool of the checkout, not in the package)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import zoo  # noqa: E402

TIMEOUT = 60  # seconds per model (they take ~1-3 s each today)


def _xfail(reason):
    return pytest.mark.xfail(strict=True, reason=reason)


# name -> first failing op measured when the mark was written (None: passes)
SUBSET = {
    "gpt2": None,
    "llama": None,
    "mixtral": None,
    "bert": None,
    "t5": None,
    "vit": None,
}


def _params():
    for name, reason in SUBSET.items():
        yield pytest.param(name, id=name, marks=_xfail(reason) if reason else ())


def _describe(res, stage):
    d = res["stages"][stage]
    return (f"{res['name']} {stage}: {d['status']}, err {d['err']}, "
            f"first failing: {d['first_op'] or res['first_failing']}")


@pytest.mark.parametrize("name", list(_params()))
def test_zoo_forward_backward_native(name):
    res = zoo.check_model(name, stages=("forward", "backward"), fallback_rerun=False,
                          timeout=TIMEOUT)
    for stage in ("forward", "backward"):
        assert res["stages"][stage]["status"] == "ok", _describe(res, stage)


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_zoo_adamw_step_native(name):
    """One AdamW step (from the CPU gradients) runs natively and matches."""
    res = zoo.check_model(name, stages=("step",), fallback_rerun=False, timeout=TIMEOUT)
    assert res["stages"]["step"]["status"] == "ok", _describe(res, "step")


@pytest.mark.parametrize("name", ["gpt2", "t5", "llama"])
def test_zoo_generate_native(name):
    """Greedy generate() with the KV cache: 16 tokens identical to the CPU's."""
    res = zoo.check_model(name, stages=("generate",), fallback_rerun=False, timeout=TIMEOUT)
    assert res["stages"]["generate"]["status"] == "ok", _describe(res, "generate")


# ---- the harness itself (no model runs) ----


def test_zoo_list_is_broad():
    names = [s.name for s in zoo.SPECS]
    assert len(names) == len(set(names))
    assert len(names) >= 40
    kinds = {s.kind for s in zoo.SPECS}
    assert {"causal", "masked", "seq2seq", "vision"} <= kinds
    assert all(s.generate for s in zoo.SPECS if s.kind == "causal")


def test_zoo_missing_op_parsing():
    e = NotImplementedError(
        "torch_tpu: aten::index_select has no native tpu implementation and the CPU fallback "
        "is disabled (enable it with torch_tpu.execution_mode.cpu_fallback_mode(True) or "
        "TORCH_TPU_CPU_FALLBACK=1)")
    assert zoo._missing_op(e) == "aten::index_select"
    e = NotImplementedError(
        "torch_tpu: aten::mul.Tensor has no native tpu implementation (dtype ComplexFloat) and "
        "the CPU fallback is disabled (enable it with ...)")
    assert zoo._missing_op(e) == "aten::mul.Tensor (dtype ComplexFloat)"
    e = NotImplementedError(
        "convolution_overrideable not implemented. You are likely triggering this with tensor "
        "backend other than CPU/CUDA/MKLDNN, if this is intended, please use TORCH_LIBRARY_IMPL")
    assert zoo._missing_op(e).startswith("aten::convolution_overrideable")
    assert zoo._missing_op(RuntimeError("shape mismatch")) is None


def test_zoo_report_from_results(tmp_path):
    ok = {"status": "ok", "err": 1e-7, "first_op": None, "fallback_ops": [],
          "fallback_error": None, "time": 0.1}
    miss = {"status": "fb", "err": 2e-7, "first_op": "aten::index_select",
            "fallback_ops": ["aten::index_select", "aten::cat.out"], "fallback_error": None,
            "time": 0.1}
    na = {"status": "-", "err": None, "first_op": None, "fallback_ops": [],
          "fallback_error": None, "time": 0}
    results = [
        zoo._summarise({"name": "a", "kind": "causal", "model": "A", "attn": "sdpa",
                        "params": 1, "error": None, "notes": [], "time": 1.0,
                        "stages": {"forward": ok, "backward": ok,
                                   "compiled": dict(ok, graph_breaks=1, programs=4),
                                   "step": ok, "generate": ok}}),
        zoo._summarise({"name": "b", "kind": "masked", "model": "B", "attn": "sdpa",
                        "params": 1, "error": None, "notes": [], "time": 1.0,
                        "stages": {"forward": miss, "backward": miss, "compiled": miss,
                                   "step": ok, "generate": na}}),
    ]
    assert results[0]["native_only"] and not results[1]["native_only"]
    assert results[1]["first_failing"] == "aten::index_select"
    t = zoo.totals(results)
    assert t["forward"] == (1, 2) and t["forward_with_fallback"] == (2, 2)
    assert t["generate"] == (1, 1) and t["native_only"] == 1
    assert zoo.missing_ops(results) == {"aten::index_select": 1, "aten::cat.out": 1}
    path = tmp_path / "zoo.md"
    zoo.write_report(results, str(path))
    text = path.read_text()
    assert "| forward | 1/2 | 2/2 |" in text
    assert "| compiled | 1/2 | 2/2 |" in text and "1 of them with graph breaks" in text
    assert "`aten::index_select`" in text


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_zoo_compiled_forward_backward_native(name):
    """forward + backward under torch.compile(backend="tpu") match the CPU."""
    res = zoo.check_model(name, stages=("compiled",), fallback_rerun=False, timeout=2 * TIMEOUT)
    d = res["stages"]["compiled"]
    assert d["status"] == "ok", _describe(res, "compiled")
    assert d["programs"] >= 2  # a forward and a backward program at least
