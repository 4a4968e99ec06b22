"""torch.compile(backend="tpu"): each FX graph runs as one captured runtime
program, replayed on new memory; results are checked against eager tpu and
PyTorch CPU."""
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn as nn

import torch_tpu
from torch_tpu import _compile

from conftest import DEV, assert_close


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    _compile._set_replay(True)
    yield
    torch._dynamo.reset()
    _compile._set_replay(True)


def _stats():
    return torch.tpu._get_cache_stats()


def _mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.Tanh(),
                         nn.Linear(64, 8))


def _train(model, step_fn, xs, ys, opt):
    losses = []
    for x, y in zip(xs, ys):
        loss = step_fn(model, x, y)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def _loss_step(model, x, y):
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


def test_inference_graph_is_one_program_replayed():
    def f(x, w, b):
        return torch.softmax(torch.relu(x @ w + b) * 2.0, dim=-1).sum(0)

    w, b = torch.randn(16, 8), torch.randn(8)
    cf = torch.compile(f, backend="tpu")
    torch.tpu._reset_cache_stats()
    for i in range(4):
        x = torch.randn(5, 16)
        r = cf(x.to(DEV), w.to(DEV), b.to(DEV))
        assert_close(r, f(x, w, b), rtol=1e-5, atol=1e-5)
    s = _stats()
    assert s["compile"]["captures"] == 1 and s["compile"]["replays"] == 3
    assert s["captures"] == 1 and s["compiled_runs"] == 3
    # a replay dispatches nothing: no op is recorded
    args = (torch.randn(5, 16, device=DEV), w.to(DEV), b.to(DEV))
    before = _stats()["ops_recorded"]
    cf(*args)
    assert _stats()["ops_recorded"] == before


def test_mlp_training_matches_eager_and_cpu():
    torch.manual_seed(1)
    xs = [torch.randn(16, 32) for _ in range(8)]
    ys = [torch.randn(16, 8) for _ in range(8)]
    ref_model = _mlp()
    ref = _train(ref_model, _loss_step, xs, ys, torch.optim.AdamW(ref_model.parameters(), lr=1e-2))
    eager_model = _mlp().to(DEV)
    eager = _train(eager_model, _loss_step, [x.to(DEV) for x in xs], [y.to(DEV) for y in ys],
                   torch.optim.AdamW(eager_model.parameters(), lr=1e-2))
    model = _mlp().to(DEV)
    step = torch.compile(_loss_step, backend="tpu")
    torch.tpu._reset_cache_stats()
    comp = _train(model, step, [x.to(DEV) for x in xs], [y.to(DEV) for y in ys],
                  torch.optim.AdamW(model.parameters(), lr=1e-2))
    torch.testing.assert_close(comp, eager, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(comp, ref, rtol=1e-4, atol=1e-5)
    c = _stats()["compile"]
    assert c["graphs_forward"] == 1 and c["graphs_backward"] == 1
    assert c["captures"] == 2 and c["replays"] == 14 and c.get("broken_captures", 0) == 0
    for p, q in zip(model.parameters(), ref_model.parameters()):
        assert_close(p, q.detach(), rtol=1e-4, atol=1e-5)


def test_compiled_optimizer_step_matches_eager():
    torch.manual_seed(2)
    x, y = torch.randn(16, 32), torch.randn(16, 8)

    def run(compiled):
        model = _mlp().to(DEV)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
        step = torch.compile(opt.step, backend="tpu") if compiled else opt.step
        for _ in range(5):
            _loss_step(model, x.to(DEV), y.to(DEV))
            step()
            opt.zero_grad()
        return [p.detach().cpu() for p in model.parameters()]

    eager, comp = run(False), run(True)
    for a, b in zip(comp, eager):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert _stats()["compile"]["replays"] >= 3


def _gpt2_config():
    transformers = pytest.importorskip("transformers")
    return transformers, transformers.GPT2Config(
        n_layer=2, n_head=4, n_embd=64, vocab_size=128, n_positions=64,
        bos_token_id=0, eos_token_id=0)


def test_gpt2_trains_20_steps_like_eager():
    """GPT2LMHeadModel (dropout on: fresh Philox keys every replayed step)."""
    transformers, cfg = _gpt2_config()
    torch.manual_seed(3)
    batches = [torch.randint(0, 128, (2, 24)) for _ in range(20)]

    def run(compiled):
        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(cfg).to(DEV).train()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

        def step(ids):
            out = model(input_ids=ids, labels=ids)
            out.loss.backward()
            return out.loss

        f = torch.compile(step, backend="tpu") if compiled else step
        torch.tpu.manual_seed(7)
        losses = []
        for ids in batches:
            losses.append(f(ids.to(DEV)).item())
            opt.step()
            opt.zero_grad()
        return losses

    eager = run(False)
    torch.tpu._reset_cache_stats()
    comp = run(True)
    torch.testing.assert_close(comp, eager, rtol=1e-4, atol=0)
    assert comp[-1] < comp[0]
    c = _stats()["compile"]
    assert c.get("broken_captures", 0) == 0 and c["replays"] >= 2 * 19


class _Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


def _resnet(seed=0):
    """ResNet-18's layout (stem, 4 stages of 2 basic blocks, pool, fc), narrow."""
    torch.manual_seed(seed)
    layers = [nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
              nn.MaxPool2d(2)]
    cin = 8
    for cout, stride in ((8, 1), (16, 2), (32, 2), (32, 2)):
        layers += [_Block(cin, cout, stride), _Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10)]
    return nn.Sequential(*layers)


def test_resnet18_style_cnn_trains_20_steps_like_eager():
    torch.manual_seed(4)
    xs = [torch.randn(4, 3, 32, 32) for _ in range(20)]
    ys = [torch.randint(0, 10, (4,)) for _ in range(20)]

    def step(model, x, y):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    def run(compiled):
        model = _resnet().to(DEV).train()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        f = torch.compile(step, backend="tpu") if compiled else step
        out = _train(model, f, [x.to(DEV) for x in xs], [y.to(DEV) for y in ys], opt)
        return out, model

    eager, em = run(False)
    comp, cm = run(True)
    torch.testing.assert_close(comp, eager, rtol=1e-4, atol=0)
    # BatchNorm's running stats are input mutations inside the compiled graph
    assert_close(cm[1].running_mean, em[1].running_mean.cpu(), rtol=1e-4, atol=1e-5)
    assert _stats()["compile"].get("broken_captures", 0) == 0


def test_default_backend_is_tpu_for_tpu_inputs_and_inductor_refuses():
    def f(x):
        return (x.sin() * 2).sum()

    x = torch.randn(64)
    torch.tpu._reset_cache_stats()
    assert_close(torch.compile(f)(x.to(DEV)), f(x), rtol=1e-5, atol=1e-5)
    assert _stats()["compile"]["dynamo_graphs"] == 1
    torch._dynamo.reset()
    with pytest.raises(Exception, match="backend='tpu'"):
        torch.compile(f, backend="inductor")(x.to(DEV))
    assert "tpu" in torch._dynamo.list_backends()


def test_custom_compiler_options():
    from torch.tpu.compiler import custom_compiler_options

    with pytest.raises(ValueError, match="known options: precision, replay"):
        with custom_compiler_options({"no_such_option": 1}):
            pass

    def f(a, b):
        return a @ b

    torch.manual_seed(5)
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    ref = a.double() @ b.double()
    cf = torch.compile(f, backend="tpu")
    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        with custom_compiler_options({"precision": "default"}):
            low = cf(a.to(DEV), b.to(DEV)).cpu()
        with custom_compiler_options({"xla_optimization_level": "O1"}):
            high = cf(a.to(DEV), b.to(DEV)).cpu()
    err_low = (low.double() - ref).abs().max().item()
    err_high = (high.double() - ref).abs().max().item()
    assert err_high < 1e-4 < err_low  # bf16 one pass vs six passes
    with custom_compiler_options({"replay": False}):
        torch.tpu._reset_cache_stats()
        cf(a.to(DEV), b.to(DEV))
        cf(a.to(DEV), b.to(DEV))
    c = _stats()["compile"]
    assert c.get("replays", 0) == 0 and c["fused_runs"] == 1


def test_recompiles_counted_and_warned():
    def f(x):
        return x * 2 + 1

    cf = torch.compile(f, backend="tpu", dynamic=False)
    torch.tpu._reset_cache_stats()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in range(3, 8):
            assert_close(cf(torch.ones(n, device=DEV)), torch.full((n,), 3.0))
    assert _stats()["recompiles"] == 4
    msgs = [str(x.message) for x in w if "recompiled" in str(x.message)]
    assert msgs and "size" in msgs[0]


def test_dynamic_shapes_one_graph_many_layouts():
    def f(x):
        return torch.tanh(x).cumsum(0)

    cf = torch.compile(f, backend="tpu", dynamic=True)
    torch.tpu._reset_cache_stats()
    for n in (5, 9, 5, 9, 12):
        x = torch.randn(n)
        assert_close(cf(x.to(DEV)), f(x), rtol=1e-5, atol=1e-5)
    c = _stats()["compile"]
    assert c["dynamo_graphs"] == 1 and c["captures"] == 3 and c["replays"] == 2


def test_op_without_lowering_names_it():
    def f(x, w, s):
        return torch._weight_int8pack_mm(x, w, s)

    x = torch.randn(4, 32)
    w = torch.randint(-100, 100, (8, 32), dtype=torch.int8)
    s = torch.rand(8)
    with pytest.raises(Exception, match="_weight_int8pack_mm"):
        torch.compile(f, backend="tpu")(x.to(DEV), w.to(DEV), s.to(DEV))


def test_without_replay_same_results_through_fused_eager():
    _compile._set_replay(False)
    torch.manual_seed(6)
    xs = [torch.randn(8, 32) for _ in range(3)]
    ys = [torch.randn(8, 8) for _ in range(3)]
    m1, m2 = _mlp().to(DEV), _mlp().to(DEV)
    a = _train(m1, torch.compile(_loss_step, backend="tpu"), [x.to(DEV) for x in xs],
               [y.to(DEV) for y in ys], torch.optim.SGD(m1.parameters(), lr=0.1))
    _compile._set_replay(True)
    torch._dynamo.reset()
    b = _train(m2, torch.compile(_loss_step, backend="tpu"), [x.to(DEV) for x in xs],
               [y.to(DEV) for y in ys], torch.optim.SGD(m2.parameters(), lr=0.1))
    torch.testing.assert_close(a, b, rtol=1e-6, atol=0)


def _run_child(code, env):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_second_process_finds_programs_on_disk(tmp_path):
    code = """
        import torch, torch_tpu
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to("tpu")
        step = torch.compile(lambda x: m(x).square().mean(), backend="tpu")
        torch.tpu._reset_cache_stats()
        l = step(torch.ones(8, 16, device="tpu"))
        l.backward()
        s = torch.tpu._get_cache_stats()
        print("RESULT", round(l.item(), 6), s["disk_hits"], s["misses"])
    """
    env = dict(os.environ, TORCH_TPU_COMPILATION_CACHE_DIR=str(tmp_path / "cache"),
               TPU_VISIBLE_CHIPS="3")
    first = _run_child(code, env).split("RESULT")[1].split()
    second = _run_child(code, env).split("RESULT")[1].split()
    assert first[0] == second[0]
    assert int(first[1]) == 0 and int(first[2]) >= 2
    assert int(second[1]) >= 2 and int(second[2]) == 0  # forward + backward from disk


def test_export_saved_program_runs_in_another_process(tmp_path):
    """An ExportedProgram with tpu inputs runs as one program, is saved to a
    file, and runs in a process that never sees the model's Python code."""
    import torch_tpu.export as te

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = nn.Linear(16, 32), nn.Linear(32, 4)
            self.register_buffer("shift", torch.linspace(-1, 1, 4))

        def forward(self, x):
            return {"y": self.l2(torch.relu(self.l1(x))) + self.shift, "n": x.norm(dim=-1)}

    torch.manual_seed(8)
    net = Net()
    x = torch.randn(5, 16)
    ref = net(x)
    ep = torch.export.export(net.to(DEV), (x.to(DEV),))
    prog = te.compile(ep)
    torch.tpu._reset_cache_stats()
    for _ in range(2):
        out = prog(x.to(DEV))
        assert_close(out["y"], ref["y"].detach(), rtol=1e-5, atol=1e-5)
        assert_close(out["n"], ref["n"].detach(), rtol=1e-5, atol=1e-5)
    c = _stats()["compile"]
    assert c["captures"] == 1 and c["replays"] == 1
    path = tmp_path / "net.pt2"
    te.save(ep, str(path))
    torch.save({"x": x, "y": ref["y"].detach(), "n": ref["n"].detach()}, tmp_path / "io.pt")
    code = f"""
        import torch, torch_tpu, torch_tpu.export as te
        io = torch.load({str(tmp_path / "io.pt")!r})
        prog = te.load({str(path)!r})
        with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
            for _ in range(3):
                out = prog(io["x"].to("tpu"))
        torch.testing.assert_close(out["y"].cpu(), io["y"], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out["n"].cpu(), io["n"], rtol=1e-5, atol=1e-5)
        c = torch.tpu._get_cache_stats()["compile"]
        print("RESULT", c["captures"], c["replays"])
    """
    out = _run_child(code, dict(os.environ, TPU_VISIBLE_CHIPS="3"))
    assert out.split("RESULT")[1].split() == ["1", "2"]


@pytest.mark.parametrize("case", ["transposed*broadcast", "channels_last+bias", "permuted unary",
                                  "contiguous+transposed", "compare"])
def test_elementwise_results_follow_input_layout(case):
    """New results of elementwise ops get TensorIterator's layout (what the
    traced graph's views assume; Mamba's backward views a transposed product)."""
    a = torch.randn(4, 5, 6)
    f, args = {
        "transposed*broadcast": (lambda x, y: x * y, (a.transpose(1, 2), torch.randn(6, 1))),
        "channels_last+bias": (lambda x, y: x + y,
                               (torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
                                torch.randn(3, 1, 1))),
        "permuted unary": (lambda x: torch.tanh(x), (a.permute(2, 0, 1),)),
        "contiguous+transposed": (lambda x, y: x - y, (torch.randn(5, 5), torch.randn(5, 5).t())),
        "compare": (lambda x: x < 0, (a.transpose(0, 2),)),
    }[case]
    ref = f(*args)
    out = f(*[t.to(DEV) for t in args])
    assert out.stride() == ref.stride()
    assert_close(out, ref, rtol=1e-6, atol=1e-6)


def test_compiled_view_of_transposed_product():
    def f(x, y):
        # valid only with TensorIterator's layout for the product
        return (x.transpose(1, 2) * y).transpose(1, 2).view(4, 30).sum(0)

    x, y = torch.randn(4, 5, 6), torch.randn(6, 1)
    cf = torch.compile(f, backend="tpu")
    for _ in range(2):
        assert_close(cf(x.to(DEV), y.to(DEV)), f(x, y), rtol=1e-5, atol=1e-5)


_WARM_CODE = """
    import torch, torch_tpu
    from torch._dynamo.utils import counters
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to("tpu")

    def step(x):
        # torch.rand without tensor inputs: a re-traced graph would freeze it
        loss = (m(x) + torch.rand(8, 4, device="tpu")).square().mean()
        loss.backward()
        return loss

    f = torch.compile(step, backend="tpu")
    torch.tpu._reset_cache_stats()
    x = torch.ones(8, 16, device="tpu")
    losses = [f(x).item() for _ in range(3)]
    grad = m[0].weight.grad.sum().item()
    s = torch.tpu._get_cache_stats()
    c = s["compile"]
    if torch._dynamo.config.caching_precompile:
        torch.compiler.save_cache_artifacts()
    print("RESULT", repr(losses), repr(grad), c.get("dynamo_graphs", 0), c.get("graphs", 0),
          c.get("graphs_loaded", 0), counters["aot_autograd"].get("autograd_cache_hit", 0),
          s["misses"], c.get("replays", 0))
"""


def _warm_runs(tmp_path, precompile):
    env = dict(os.environ, TORCH_TPU_COMPILATION_CACHE_DIR=str(tmp_path / "programs"),
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "torch"), TPU_VISIBLE_CHIPS="3",
               TORCH_CACHING_PRECOMPILE="1" if precompile else "0")
    out = []
    for _ in range(2):
        r = _run_child(_WARM_CODE, env).split("RESULT")[1].split("\n")[0]
        losses, rest = r.split("]", 1)
        losses = eval(losses.strip() + "]")  # noqa: S307 - our own child's repr
        grad, dyn, graphs, loaded, aot_hits, misses, replays = rest.split()
        out.append(dict(losses=losses, grad=float(grad), dynamo=int(dyn), graphs=int(graphs),
                        loaded=int(loaded), aot_hits=int(aot_hits), misses=int(misses),
                        replays=int(replays)))
    return out


def test_warm_process_skips_aot_tracing(tmp_path):
    """AOTAutogradCache stores our compiled artifact: a new process traces the
    frame with Dynamo again but loads the forward and backward graphs instead
    of running AOTAutograd, and finds their programs on disk."""
    cold, warm = _warm_runs(tmp_path, precompile=False)
    assert cold["loaded"] == 0 and cold["graphs"] == 2 and cold["aot_hits"] == 0
    assert warm["dynamo"] == cold["dynamo"] >= 1
    assert warm["graphs"] == warm["loaded"] == 2 and warm["aot_hits"] >= 1
    # programs from disk (since the IR-serialised disk tier, one program of this
    # graph is compiled again in the second process: a runtime matter, see #12)
    assert warm["misses"] < cold["misses"] and warm["replays"] == cold["replays"] == 4
    assert warm["losses"] == cold["losses"] and warm["grad"] == cold["grad"]
    assert len(set(warm["losses"])) == 3  # fresh random numbers every step


def test_warm_process_with_precompile_traces_nothing(tmp_path):
    """With PyTorch's precompile cache (TORCH_CACHING_PRECOMPILE=1 and
    torch.compiler.save_cache_artifacts()), a new process starts with 0 Dynamo
    and 0 AOTAutograd traces: bytecode, guards and our artifacts come from
    disk, programs from the runtime's disk cache; results are identical."""
    cold, warm = _warm_runs(tmp_path, precompile=True)
    assert cold["dynamo"] >= 1 and cold["graphs"] == 2 and cold["loaded"] == 0
    assert warm["dynamo"] == 0 and warm["graphs"] == warm["loaded"] == 2
    assert warm["misses"] < cold["misses"] and warm["replays"] == 4
    assert warm["losses"] == cold["losses"] and warm["grad"] == cold["grad"]
    assert len(set(warm["losses"])) == 3


def test_cached_artifact_roundtrip_keeps_random_ops_and_constants():
    """The stored graph is the graph (not its code re-traced: that would run a
    rand without tensor inputs once and freeze it), its tpu constants travel
    with it, an output that is (a view of) a constant replays as one, and an
    artifact of another torch_tpu build refuses to load."""
    import pickle

    from torch_tpu._compile_cache import TpuOutputCode

    g = torch.fx.Graph()
    x = g.placeholder("x")
    r = g.call_function(torch.ops.aten.rand.default, ([4],), {"device": torch.device(DEV)})
    c = g.get_attr("c")
    y = g.call_function(torch.ops.aten.add.Tensor, (g.call_function(torch.ops.aten.add.Tensor,
                                                                    (x, r)), c))
    view = g.call_function(torch.ops.aten.slice.Tensor, (c, 0, 1, 4))
    g.output((y, view))
    root = nn.Module()
    root.register_buffer("c", torch.arange(4.0).to(DEV))
    oc = pickle.loads(pickle.dumps(TpuOutputCode(torch.fx.GraphModule(root, g), "inference")))
    xs = torch.ones(4, device=DEV)
    torch.tpu._reset_cache_stats()
    outs = [oc([xs]) for _ in range(3)]
    c = _stats()["compile"]
    assert c["graphs_loaded"] == 1 and c["captures"] == 1 and c["replays"] == 2
    rands = [(o[0].cpu() - 1 - torch.arange(4.0)) for o in outs]
    assert all(((0 <= v) & (v < 1)).all() for v in rands)
    assert not torch.equal(rands[0], rands[1]) and not torch.equal(rands[1], rands[2])
    const = oc.graph.gm.c
    for o in outs:
        assert_close(o[1], torch.tensor([1.0, 2.0, 3.0]))
        assert o[1].untyped_storage().data_ptr() == const.untyped_storage().data_ptr()
    st = oc.__getstate__()
    st["build"] = "torch_tpu-another-build"
    with pytest.raises(RuntimeError, match="another torch_tpu build"):
        TpuOutputCode.__new__(TpuOutputCode).__setstate__(st)
